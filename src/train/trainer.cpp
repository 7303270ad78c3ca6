#include "src/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/loader.hpp"
#include "io/sampler.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/cpu/cpu_info.hpp"
#include "src/nn/graph.hpp"
#include "src/train/data_source.hpp"
#include "src/train/metrics.hpp"
#include "src/train/optimizer.hpp"
#include "src/train/progress.hpp"
#include "src/train/schedule.hpp"

namespace squall::train {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::unique_ptr<DataSource> open_source(const DataConfig& d, const std::string& split, const std::string& key) {
  const std::string& path = split == "train" ? d.train : d.test;
  try {
    return open_dataset(path, split, d.normalize, d.normalization, d.cache_mb);
  } catch (const BadSample&) {
    throw;
  } catch (const Error& e) {
    throw Error("data." + key + ": " + e.what());
  }
}

// Appends one JSON object per line and flushes, so a crashed run keeps what it logged.
class MetricsLog {
 public:
  explicit MetricsLog(const std::filesystem::path& path) : m_out(path, std::ios::trunc) {
    if (!m_out) throw Error("cannot write " + path.string());
  }
  void write(const json& j) { m_out << j.dump() << "\n" << std::flush; }

 private:
  std::ofstream m_out;
};

// Writes `text` to path atomically (temp file + rename): readers never see half a file.
void write_atomic(const std::filesystem::path& path, const std::string& text) {
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) throw Error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

struct EvalResult {
  double loss = 0, accuracy = 0, miou = 0;
  std::vector<double> iou;
};

// Evaluates the model on every test sample, in batches of the training batch size; the
// last partial batch is padded with copies of its first sample whose labels are ignored.
EvalResult evaluate(nn::Graph& g, nn::Backend& be, nn::Stream& stream, const DataSource& test, int64_t n_test,
                    int32_t* dev_labels, int32_t* dev_pred) {
  const int64_t batch = g.batch();
  const auto& info = test.info();
  const int64_t per_sample = info.sample.per_sample();
  const int64_t label_hw = info.per_pixel_labels ? info.sample.h() * info.sample.w() : 1;
  std::vector<float> images(static_cast<size_t>(batch * per_sample));
  std::vector<int32_t> labels(static_cast<size_t>(batch * label_hw)), pred(labels.size());
  ConfusionMatrix cm(info.classes);
  RunningMean loss;
  std::vector<int64_t> idx;
  nn::RunMode mode;
  mode.train = false;
  for (int64_t start = 0; start < n_test; start += batch) {
    const int64_t valid = std::min(batch, n_test - start);
    idx.resize(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) idx[static_cast<size_t>(i)] = start + std::min(i, valid - 1);
    test.read(idx, images.data(), labels.data());
    std::fill(labels.begin() + valid * label_hw, labels.end(), -1);  // padding: ignored
    be.copy_from_host(stream, g.input().data, images.data(), images.size());
    be.copy_labels_from_host(stream, dev_labels, labels.data(), labels.size());
    g.forward(stream, mode);
    float batch_loss = 0;
    const auto out = g.output_shape();
    be.softmax_cross_entropy(stream, g.output().data, dev_labels, nullptr, out.n(), out.c(), out.h() * out.w(),
                             g.output_grad().data, &batch_loss);
    be.argmax_channels(stream, g.output().data, dev_pred, out.n(), out.c(), out.h() * out.w());
    be.copy_labels_to_host(stream, pred.data(), dev_pred, pred.size());
    be.synchronize(stream);
    loss.add(batch_loss, static_cast<double>(valid));
    cm.add(std::span<const int32_t>(pred.data(), static_cast<size_t>(valid * label_hw)),
           std::span<const int32_t>(labels.data(), static_cast<size_t>(valid * label_hw)));
  }
  return {loss.mean(), cm.accuracy(), cm.mean_iou(), cm.iou_per_class()};
}

}  // namespace

std::string fnv1a_hex(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

TrainResult run_training(const Config& cfg, const std::string& origin) {
  namespace fs = std::filesystem;
  const auto t_start = Clock::now();
  if (cfg.parallel.replicas_per_device != 1 || cfg.parallel.algorithm != "ssgd")
    log::warn("parallel.algorithm '" + cfg.parallel.algorithm + "' with " + std::to_string(cfg.parallel.replicas_per_device) +
              " replica(s): this build trains one learner per rank; the distributed learners are not implemented yet");

  // ---- data ----
  auto train = open_source(cfg.data, "train", "train");
  auto test = open_source(cfg.data, "test", "test");
  const auto& info = train->info();
  const int64_t n_train = cfg.data.train_samples > 0 ? std::min(cfg.data.train_samples, train->size()) : train->size();
  const int64_t n_test = cfg.data.test_samples > 0 ? std::min(cfg.data.test_samples, test->size()) : test->size();
  const int64_t batch = cfg.train.batch_size;
  if (n_train < batch)
    throw Error(origin + ": train.batch_size " + std::to_string(batch) + " is larger than the " + std::to_string(n_train) +
                " training samples");
  // One rank, one node for now; the sampler already speaks nodes and ranks. The samples
  // beyond steps_per_epoch * batch are the epoch's remainder (io/sampler.hpp).
  std::vector<int64_t> offsets = train->file_offsets();
  if (n_train < train->size()) offsets = {0, n_train};
  const io::Sampler sampler(io::parse_sampling(cfg.data.sampling), offsets, {1}, static_cast<uint64_t>(cfg.run.seed));
  const int64_t steps_per_epoch = sampler.steps_per_epoch(batch);
  int64_t total_steps = steps_per_epoch * cfg.train.epochs;
  if (cfg.train.max_steps > 0) total_steps = std::min(total_steps, cfg.train.max_steps);

  // ---- model, backend, optimizer ----
  nn::ModelSpec spec;
  spec.name = cfg.model.name;
  spec.classes = cfg.model.classes > 0 ? cfg.model.classes : info.classes;
  spec.width = cfg.model.width;
  spec.depth = cfg.model.depth;
  spec.aspp_rates = cfg.model.aspp_rates;
  spec.dropout = static_cast<float>(cfg.model.dropout);
  if (cfg.model.in_channels > 0 && cfg.model.in_channels != info.sample.c())
    throw Error(origin + ": model.in_channels = " + std::to_string(cfg.model.in_channels) + " but the data has " +
                std::to_string(info.sample.c()) + " channels");
  auto backend = nn::make_cpu_backend(static_cast<int>(cfg.run.threads));
  auto stream = backend->create_stream();
  auto graph = nn::make_model(spec, info.sample);
  graph->build(*backend, batch, static_cast<uint64_t>(cfg.run.seed));

  std::vector<ParamGroup> groups;
  for (const auto& p : graph->param_info())
    groups.push_back({graph->params() + p.offset, graph->grads() + p.offset, p.count,
                      p.weight_decay || cfg.optimizer.decay_bias_and_norm, p.name});
  auto optimizer = make_optimizer(cfg.optimizer, *backend, std::move(groups));
  const Schedule schedule(cfg.schedule, cfg.optimizer.lr, batch, steps_per_epoch);

  const int64_t label_hw = info.per_pixel_labels ? info.sample.h() * info.sample.w() : 1;
  nn::Buffer label_buf, pred_buf;
  int32_t* dev_labels = backend->allocate_labels(static_cast<size_t>(batch * label_hw), label_buf);
  int32_t* dev_pred = backend->allocate_labels(static_cast<size_t>(batch * label_hw), pred_buf);
  io::LoaderOptions loader_options;
  loader_options.batch_size = batch;
  loader_options.workers = static_cast<int>(cfg.data.workers);
  loader_options.prefetch = static_cast<int>(cfg.data.prefetch);
  loader_options.skip_bad = cfg.data.skip_bad_samples;
  io::Loader loader(*train, loader_options);

  // ---- run directory ----
  const fs::path dir(cfg.run.dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("run.dir = '" + cfg.run.dir + "': cannot create it: " + ec.message());
  write_atomic(dir / "config.toml", to_toml(cfg));
  MetricsLog metrics(dir / "metrics.jsonl");

  log::info("squall train: " + spec.name + " (" + std::to_string(graph->param_count()) + " parameters) on " +
            info.description + ", backend " + backend->name() + ", batch " + std::to_string(batch) + ", " +
            std::to_string(total_steps) + " steps (" + std::to_string(steps_per_epoch) + " per epoch), optimizer " +
            optimizer->name() + ", run dir " + cfg.run.dir);

  // ---- loop ----
  Progress progress(isatty(STDOUT_FILENO) != 0, cfg.train.log_every_steps);
  double t_compute = 0;
  RunningMean window_loss;
  double last_train_loss = 0;
  EvalResult last_eval;
  int64_t step = 0;
  const auto t_loop = Clock::now();
  nn::RunMode mode;
  mode.train = true;
  mode.seed = static_cast<uint64_t>(cfg.run.seed);
  const int64_t epochs = (total_steps + steps_per_epoch - 1) / steps_per_epoch;

  auto run_eval = [&](int64_t epoch) {
    const auto t0 = Clock::now();
    last_eval = evaluate(*graph, *backend, *stream, *test, n_test, dev_labels, dev_pred);
    const double secs = seconds_since(t0);
    metrics.write({{"kind", "eval"}, {"step", step}, {"epoch", epoch}, {"test_loss", last_eval.loss},
                   {"test_accuracy", last_eval.accuracy}, {"test_miou", last_eval.miou}, {"eval_s", secs}});
    progress.finish();
    char line[256];
    std::snprintf(line, sizeof(line), "eval  epoch %lld step %lld: test loss %.4f accuracy %.4f mIoU %.4f (%.1f s)",
                  static_cast<long long>(epoch), static_cast<long long>(step), last_eval.loss, last_eval.accuracy,
                  last_eval.miou, secs);
    log::info(line);
  };

  for (int64_t epoch = 1; epoch <= epochs && step < total_steps; ++epoch) {
    std::vector<int64_t> indices = sampler.indices(cfg.data.shuffle ? epoch : 0, 0, 0);
    const int64_t batches = std::min(steps_per_epoch, total_steps - step);
    loader.start_epoch(std::move(indices), batches);
    for (int64_t b = 0; b < batches; ++b) {
      const io::Batch* data = loader.next();
      if (data == nullptr) throw Error("loader: epoch " + std::to_string(epoch) + " ended after " + std::to_string(b) +
                                       " of " + std::to_string(batches) + " batches");
      const auto t0 = Clock::now();
      backend->copy_from_host(*stream, graph->input().data, data->images, static_cast<size_t>(graph->input().numel()));
      backend->copy_labels_from_host(*stream, dev_labels, data->labels, static_cast<size_t>(batch * label_hw));
      loader.release(data);
      mode.step = static_cast<uint64_t>(step);
      graph->forward(*stream, mode);
      float loss = 0;
      const auto out = graph->output_shape();
      backend->softmax_cross_entropy(*stream, graph->output().data, dev_labels, nullptr, out.n(), out.c(),
                                     out.h() * out.w(), graph->output_grad().data, &loss);
      backend->synchronize(*stream);
      if (!std::isfinite(loss)) {
        progress.finish();
        throw Error("training diverged: the loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                    " at step " + std::to_string(step + 1) + " (epoch " + std::to_string(epoch) +
                    "); lower optimizer.lr or add schedule.warmup_steps");
      }
      graph->backward(*stream);
      const double lr = schedule.lr_at(step, total_steps);
      optimizer->step(*backend, *stream, static_cast<float>(lr));
      backend->synchronize(*stream);
      t_compute += seconds_since(t0);
      ++step;

      window_loss.add(loss);
      const double elapsed = seconds_since(t_loop);
      progress.update({step, total_steps, static_cast<int>(epoch), static_cast<int>(epochs), window_loss.mean(),
                       static_cast<double>(step * batch) / std::max(elapsed, 1e-9), elapsed});
      if (step % cfg.train.log_every_steps == 0 || step == total_steps) {
        last_train_loss = window_loss.mean();
        metrics.write({{"kind", "train"}, {"step", step}, {"epoch", epoch}, {"loss", last_train_loss}, {"lr", lr},
                       {"samples_per_s", static_cast<double>(step * batch) / std::max(elapsed, 1e-9)}});
        window_loss.reset();
      }
      if (cfg.train.eval_every_steps > 0 && step % cfg.train.eval_every_steps == 0 && step != total_steps)
        run_eval(epoch);
    }
    if (cfg.train.eval_every_steps == 0 || step == total_steps) run_eval(epoch);
  }
  progress.finish();
  const double loop_s = seconds_since(t_loop);
  const double t_io = loader.io_wait_s();

  // ---- summary ----
  std::vector<float> host(graph->param_count() + graph->state_count());
  backend->copy_to_host(*stream, host.data(), graph->params(), graph->param_count());
  backend->copy_to_host(*stream, host.data() + graph->param_count(), graph->state(), graph->state_count());
  backend->synchronize(*stream);
  TrainResult r;
  r.steps = step;
  r.train_loss = last_train_loss;
  r.test_accuracy = last_eval.accuracy;
  r.test_loss = last_eval.loss;
  r.wall_s = seconds_since(t_start);
  r.samples_per_s = static_cast<double>(step * batch) / std::max(t_compute + t_io, 1e-9);
  r.model_checksum = fnv1a_hex(host.data(), host.size() * sizeof(float));

  json final_metrics{{"train_loss", r.train_loss}, {"test_loss", r.test_loss}};
  if (info.per_pixel_labels) {
    final_metrics["test_miou"] = last_eval.miou;
    json per_class = json::array();
    for (double v : last_eval.iou) per_class.push_back(std::isnan(v) ? json(nullptr) : json(v));
    final_metrics["test_iou_per_class"] = per_class;
  } else {
    final_metrics["test_accuracy"] = r.test_accuracy;
  }
  const json summary{
      {"world_size", 1}, {"nodes", 1}, {"devices_per_rank", 1}, {"replicas_per_device", 1},
      {"algorithm", cfg.parallel.algorithm}, {"backend", backend->name()}, {"threads", cpu::hardware_threads()},
      {"model", spec.name}, {"parameters", graph->param_count()}, {"optimizer", optimizer->name()},
      {"global_batch", batch}, {"epochs", epochs}, {"steps", step}, {"wall_s", r.wall_s}, {"train_loop_s", loop_s},
      {"samples_per_s", r.samples_per_s},
      {"time_breakdown_s", {{"compute", t_compute}, {"allreduce", 0.0}, {"io_wait", t_io}}},
      {"skipped_samples", loader.bad_samples()}, {"data", info.description},
      {"final", final_metrics}, {"model_checksum", r.model_checksum}, {"config", origin}};
  write_atomic(dir / "summary.json", summary.dump(2) + "\n");

  char line[320];
  std::snprintf(line, sizeof(line),
                "done: %lld steps in %.1f s, %.0f samples/s, train loss %.4f, test accuracy %.4f (io_wait %.1f%%); "
                "summary in %s",
                static_cast<long long>(step), r.wall_s, r.samples_per_s, r.train_loss, r.test_accuracy,
                100.0 * t_io / std::max(t_io + t_compute, 1e-9), (dir / "summary.json").c_str());
  log::info(line);
  return r;
}

}  // namespace squall::train
