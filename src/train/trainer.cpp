#include "src/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "io/loader.hpp"
#include "mpi/allreduce.hpp"
#include "mpi/topology.hpp"
#include "io/sampler.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/cpu/cpu_info.hpp"
#include "src/nn/graph.hpp"
#include "src/train/datasets.hpp"
#include "src/train/learners.hpp"
#include "src/train/metrics.hpp"
#include "src/train/optimizer.hpp"
#include "src/train/progress.hpp"
#include "src/train/schedule.hpp"
#include "src/train/timeline.hpp"

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

// Evaluates the model on test samples [begin, end), in batches of the graph's batch size;
// the last partial batch is padded with copies of its first sample whose labels are
// ignored. Returns the confusion matrix and the loss summed over samples (to be combined
// across ranks).
struct EvalPart {
  ConfusionMatrix cm;
  double loss_sum = 0, samples = 0;
};

EvalPart evaluate(nn::Graph& g, nn::Backend& be, nn::Stream& stream, const DataSource& test, int64_t begin,
                  int64_t end, int32_t* dev_labels, int32_t* dev_pred, const float* class_weights) {
  const int64_t batch = g.batch();
  const auto& info = test.info();
  const int64_t per_sample = info.sample.per_sample();
  const int64_t label_hw = info.per_pixel_labels ? info.sample.h() * info.sample.w() : 1;
  std::vector<float> images(static_cast<size_t>(batch * per_sample));
  std::vector<int32_t> labels(static_cast<size_t>(batch * label_hw)), pred(labels.size());
  EvalPart part{ConfusionMatrix(info.classes)};
  std::vector<int64_t> idx;
  nn::RunMode mode;
  mode.train = false;
  for (int64_t start = begin; start < end; start += batch) {
    const int64_t valid = std::min(batch, end - start);
    idx.resize(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) idx[static_cast<size_t>(i)] = start + std::min(i, valid - 1);
    test.read(idx, images.data(), labels.data());
    std::fill(labels.begin() + valid * label_hw, labels.end(), -1);  // padding: ignored
    be.copy_from_host(stream, g.input().data, images.data(), images.size());
    be.copy_labels_from_host(stream, dev_labels, labels.data(), labels.size());
    g.forward(stream, mode);
    float batch_loss = 0;
    const auto out = g.output_shape();
    be.softmax_cross_entropy(stream, g.output().data, dev_labels, class_weights, out.n(), out.c(),
                             out.h() * out.w(), g.output_grad().data, &batch_loss);
    be.argmax_channels(stream, g.output().data, dev_pred, out.n(), out.c(), out.h() * out.w());
    be.copy_labels_to_host(stream, pred.data(), dev_pred, pred.size());
    be.synchronize(stream);
    part.loss_sum += static_cast<double>(batch_loss) * static_cast<double>(valid);
    part.samples += static_cast<double>(valid);
    part.cm.add(std::span<const int32_t>(pred.data(), static_cast<size_t>(valid * label_hw)),
                std::span<const int32_t>(labels.data(), static_cast<size_t>(valid * label_hw)));
  }
  return part;
}

}  // namespace

std::string fnv1a_hex(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

// SQUALL_FAIL_AT=RANK:STEP: that rank fails at that step (fault tests). -1 when unset.
std::pair<int, int64_t> fail_at_from_env() {
  const char* env = std::getenv("SQUALL_FAIL_AT");
  if (env == nullptr || *env == '\0') return {-1, -1};
  int rank = -1;
  long long step = -1;
  char tail = 0;
  if (std::sscanf(env, "%d:%lld%c", &rank, &step, &tail) != 2 || rank < 0 || step < 1)
    throw Error(std::string("SQUALL_FAIL_AT must be RANK:STEP (a rank >= 0 and a step >= 1), got '") + env + "'");
  return {rank, static_cast<int64_t>(step)};
}

// Crossbow's auto-tuner, simplified: measure the throughput over a window of steps, add a
// learner, measure again; keep it while the gain exceeds the threshold, else take it back
// and stop. Rank 0's clock decides (every step ends in a collective, so the ranks agree to
// within one step) and the decision is broadcast.
class AutoTuner {
 public:
  AutoTuner(bool enabled, double threshold, int max_learners, int64_t window)
      : m_enabled(enabled), m_threshold(threshold), m_max(max_learners), m_window(window) {}
  bool active() const { return m_enabled && !m_done; }

  // Called after every step with the global samples processed in it; returns +1 (add a
  // learner), -1 (remove the last one) or 0. Collective when active.
  int after_step(const mpi::Communicator& world, int learners, int64_t samples, double seconds) {
    if (!active()) return 0;
    if (++m_steps <= m_skip) return 0;  // a new configuration's first steps build and warm up
    m_samples += samples;
    m_seconds += seconds;
    if (m_steps < m_skip + m_window) return 0;
    double rate = m_samples / std::max(m_seconds, 1e-9);
    const std::string decided = world.broadcast_string(std::to_string(rate));
    rate = std::stod(decided);
    m_steps = 0;
    m_samples = 0;
    m_seconds = 0;
    int change = 0;
    std::string verdict;
    if (m_best_rate > 0 && rate <= m_best_rate * (1.0 + m_threshold)) {
      change = -1;
      m_done = true;
      verdict = "gain below the threshold: back to " + std::to_string(learners - 1) + " learner(s), tuning ends";
    } else if (learners >= m_max) {
      m_best_rate = rate;
      m_done = true;
      verdict = "at parallel.max_replicas_per_device, tuning ends";
    } else {
      m_best_rate = rate;
      change = +1;
      verdict = "trying " + std::to_string(learners + 1) + " learners";
    }
    m_decisions.push_back({{"learners", learners}, {"samples_per_s", rate}, {"decision", verdict}});
    return change;
  }
  const nlohmann::json& decisions() const { return m_decisions; }

 private:
  bool m_enabled;
  double m_threshold;
  int m_max;
  int64_t m_window;
  int64_t m_skip = 3;
  bool m_done = false;
  int64_t m_steps = 0;
  double m_samples = 0, m_seconds = 0, m_best_rate = 0;
  nlohmann::json m_decisions = nlohmann::json::array();
};

}  // namespace

// The likely causes of a divergence, naming the keys that govern them.
std::string divergence_hint(const Config& cfg, Algorithm algorithm, const LearnerGroup& group) {
  std::string hint = "lower optimizer.lr or add schedule.warmup_steps";
  if (algorithm == Algorithm::sma) {
    const SmaCoefficients c = group.sma();
    char text[512];
    std::snprintf(text, sizeof(text),
                  "; sma with %d learner(s) in the job pulls each learner by parallel.alpha = %g and moves the "
                  "central model by beta = %g (parallel.centre_rate%s) with parallel.momentum = %g: a smaller "
                  "parallel.momentum or parallel.centre_rate damps the central model",
                  group.learners() * group.options().ranks, c.alpha, c.beta,
                  cfg.parallel.centre_rate > 0 ? "" : " = 0: min(alpha x learners, 1)", c.mu);
    hint += text;
  }
  return hint;
}

TrainResult run_training(const Config& cfg, const std::string& origin, const RunOptions& options) {
  namespace fs = std::filesystem;
  const auto t_start = Clock::now();

  // ---- the job ----
  const mpi::Topology topo = mpi::Topology::create(options.ranks_per_node);
  const mpi::Communicator& world = topo.world();
  const int rank = topo.rank(), ranks = topo.world_size();
  const bool root = rank == 0;
  const Algorithm algorithm = parse_algorithm(cfg.parallel.algorithm);
  const auto [fail_rank, fail_step] = fail_at_from_env();

  // ---- data ----
  auto train = open_source(cfg.data, "train", "train");
  auto test = open_source(cfg.data, "test", "test");
  const auto& info = train->info();
  const int64_t n_train = cfg.data.train_samples > 0 ? std::min(cfg.data.train_samples, train->size()) : train->size();
  const int64_t n_test = cfg.data.test_samples > 0 ? std::min(cfg.data.test_samples, test->size()) : test->size();
  const int64_t batch = cfg.train.batch_size;
  int learners = static_cast<int>(cfg.parallel.replicas_per_device);
  const int max_learners = cfg.parallel.autotune ? std::max<int>(learners, static_cast<int>(cfg.parallel.max_replicas_per_device))
                                                 : learners;
  // Each rank reads its share of every epoch (io/sampler.hpp) and hands its learners
  // consecutive batches: learner j of a step takes the rank's batch step*L + j.
  std::vector<int64_t> offsets = train->file_offsets();
  if (n_train < train->size()) offsets = {0, n_train};
  std::vector<int> node_of_rank = world.allgather(topo.node());
  const io::Sampler sampler(io::parse_sampling(cfg.data.sampling), offsets, io::node_sizes_from(node_of_rank),
                            static_cast<uint64_t>(cfg.run.seed));
  const int64_t batches_per_epoch = sampler.steps_per_epoch(batch);
  if (batches_per_epoch < learners)
    throw Error(origin + ": one step takes train.batch_size x replicas x ranks = " + std::to_string(batch) + " x " +
                std::to_string(learners) + " x " + std::to_string(ranks) + " samples, more than an epoch's " +
                std::to_string(n_train) + " training samples");
  int64_t steps_per_epoch = batches_per_epoch / learners;
  int64_t total_steps = steps_per_epoch * cfg.train.epochs;
  if (cfg.train.max_steps > 0) total_steps = std::min(total_steps, cfg.train.max_steps);
  // A central model that never synchronises is the initial one: evaluating it would say nothing.
  if (algorithm != Algorithm::ssgd) {
    const int64_t first_sync = (algorithm == Algorithm::local_sgd ? cfg.parallel.start_step : 0) + cfg.parallel.period;
    if (first_sync > total_steps)
      throw UsageError(origin + ": parallel.period = " + std::to_string(cfg.parallel.period) +
                       (algorithm == Algorithm::local_sgd
                            ? " after parallel.start_step = " + std::to_string(cfg.parallel.start_step)
                            : std::string()) +
                       " is longer than the run (" + std::to_string(total_steps) +
                       " steps: train.epochs, train.max_steps): the central model would never be synchronised and "
                       "the run would evaluate the initial model");
  }

  // ---- model, backend, learners ----
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
  if (!cfg.data.class_weights.empty() && static_cast<int64_t>(cfg.data.class_weights.size()) != spec.classes)
    throw Error(origin + ": data.class_weights has " + std::to_string(cfg.data.class_weights.size()) +
                " entries but the model has " + std::to_string(spec.classes) + " classes");
  // Ranks on one machine share its cores (unless the launcher pinned them): count them.
  const std::vector<int> host_of_rank = world.allgather(static_cast<int>(std::hash<std::string>{}(topo.host()) & 0x7fffffff));
  const int ranks_on_host = static_cast<int>(std::count(host_of_rank.begin(), host_of_rank.end(), host_of_rank[static_cast<size_t>(rank)]));
  auto backend = nn::make_cpu_backend(cfg.run.threads > 0 ? static_cast<int>(cfg.run.threads)
                                                          : cpu::default_threads(ranks_on_host));
  auto stream = backend->create_stream();
  const nn::Shape sample = info.sample;
  auto make_graph = [spec, sample] { return nn::make_model(spec, sample); };

  mpi::AllreduceOptions ar_options;
  ar_options.stall_warn_s = options.stall_warn_s;
  ar_options.stall_abort_s = options.stall_abort_s;
  mpi::HierAllreduce allreduce(topo, ar_options);
  AllreduceReducer reducer(allreduce, ranks);
  SingleRankReducer alone;

  LearnerGroupOptions lg;
  lg.algorithm = algorithm;
  lg.learners = learners;
  lg.ranks = ranks;
  lg.rank = rank;
  lg.period = cfg.parallel.period;
  lg.alpha = cfg.parallel.alpha;
  lg.centre_rate = cfg.parallel.centre_rate;
  lg.momentum = cfg.parallel.momentum;
  lg.start_step = cfg.parallel.start_step;
  lg.bucket_floats = std::max<size_t>(1, static_cast<size_t>(cfg.parallel.bucket_mb * double(1 << 20) / sizeof(float)));
  lg.seed = static_cast<uint64_t>(cfg.run.seed);
  std::vector<float> class_weights(cfg.data.class_weights.begin(), cfg.data.class_weights.end());
  const int64_t label_hw = info.per_pixel_labels ? info.sample.h() * info.sample.w() : 1;
  LearnerGroup group(*backend, make_graph, batch, batch * label_hw, cfg.optimizer, class_weights, lg,
                     ranks > 1 ? static_cast<Reducer&>(reducer) : static_cast<Reducer&>(alone));
  // The linear scaling rule scales by the batch one update averages over: the global batch
  // under ssgd, a learner's own batch under sma and local-sgd.
  const Schedule schedule(cfg.schedule, cfg.optimizer.lr,
                          algorithm == Algorithm::ssgd ? batch * learners * ranks : batch, steps_per_epoch);

  nn::Buffer label_buf, pred_buf, weight_buf;
  int32_t* dev_labels = backend->allocate_labels(static_cast<size_t>(batch * label_hw), label_buf);
  int32_t* dev_pred = backend->allocate_labels(static_cast<size_t>(batch * label_hw), pred_buf);
  const float* dev_weights = nullptr;
  if (!class_weights.empty()) {
    weight_buf = backend->allocate(class_weights.size());
    backend->copy_from_host(*stream, weight_buf.data(), class_weights.data(), class_weights.size());
    dev_weights = weight_buf.data();
  }
  io::LoaderOptions loader_options;
  loader_options.batch_size = batch;
  loader_options.workers = static_cast<int>(cfg.data.workers);
  loader_options.prefetch = std::max(static_cast<int>(cfg.data.prefetch), max_learners);
  loader_options.skip_bad = cfg.data.skip_bad_samples;
  io::Loader loader(*train, loader_options);

  // ---- timeline ----
  Timeline timeline(options.timeline);
  world.barrier();
  const double origin_s = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  timeline.set_origin(origin_s);
  if (timeline.enabled()) {
    group.set_phase_hook([&timeline](const char* phase, int learner, double t0, double t1) {
      timeline.add(phase, learner < 0 ? Timeline::k_rank_track : Timeline::learner_track(learner), t0, t1);
    });
    allreduce.set_level_hook([&timeline](const char* level, double t0, double t1, size_t) {
      const std::string_view l(level);
      if (l == "node_reduce_scatter") timeline.add("node reduce-scatter", Timeline::k_allreduce_track + 1, t0, t1);
      else if (l == "cross_allreduce") timeline.add("cross-node allreduce", Timeline::k_allreduce_track + 2, t0, t1);
      else if (l == "node_allgather") timeline.add("node allgather", Timeline::k_allreduce_track + 3, t0, t1);
      else timeline.add("allreduce", Timeline::k_allreduce_track, t0, t1);
    });
  }
  auto now_s = [] { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); };

  // ---- run directory (rank 0 writes; every rank needs it to exist for nothing else) ----
  const fs::path dir(cfg.run.dir);
  std::unique_ptr<MetricsLog> metrics;
  if (root) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw Error("run.dir = '" + cfg.run.dir + "': cannot create it: " + ec.message());
    write_atomic(dir / "config.toml", to_toml(cfg));
    metrics = std::make_unique<MetricsLog>(dir / "metrics.jsonl");
  }
  auto log_metrics = [&](const json& j) {
    if (metrics) metrics->write(j);
  };

  log::info("squall train: " + spec.name + " (" + std::to_string(group.param_count()) + " parameters) on " +
            info.description + ", backend " + backend->name() + ", " + std::to_string(ranks) + " rank(s) on " +
            std::to_string(topo.nodes()) + " node(s) x " + std::to_string(learners) + " learner(s), " +
            algorithm_name(algorithm) + ", batch " + std::to_string(batch) + " per learner (global " +
            std::to_string(batch * learners * ranks) + "), " + std::to_string(total_steps) + " steps (" +
            std::to_string(steps_per_epoch) + " per epoch), optimizer " + group.optimizer_name() + ", run dir " +
            cfg.run.dir);
  if (algorithm == Algorithm::sma) {
    const SmaCoefficients c = group.sma();
    char line[256];
    std::snprintf(line, sizeof(line),
                  "sma: %d learner(s) in the job, each pulled by alpha %g towards the central model, which moves "
                  "by beta %g%s towards their mean with momentum %g",
                  learners * ranks, c.alpha, c.beta, cfg.parallel.centre_rate > 0 ? "" : " (min(alpha x learners, 1))",
                  c.mu);
    log::info(line);
  }

  // ---- loop ----
  Progress progress(root && isatty(STDOUT_FILENO) != 0, cfg.train.log_every_steps);
  AutoTuner tuner(cfg.parallel.autotune, cfg.parallel.autotune_threshold, max_learners,
                  std::max<int64_t>(10, steps_per_epoch / 20));
  RunningMean window_loss;
  double last_train_loss = 0;
  EvalPart last_eval{ConfusionMatrix(info.classes)};
  double last_eval_loss = 0;
  int64_t step = 0, samples_done = 0;
  const int64_t planned_steps = total_steps, planned_step_samples = batch * learners * ranks;
  double eval_total_s = 0;
  const auto t_loop = Clock::now();
  int64_t epochs = cfg.train.max_steps > 0 ? (total_steps + steps_per_epoch - 1) / steps_per_epoch
                                           : cfg.train.epochs;

  auto run_eval = [&](int64_t epoch) {
    const auto t0 = Clock::now();
    const double ts = now_s();
    nn::Graph& g = group.eval_graph();
    const int64_t begin = n_test * rank / ranks, end = n_test * (rank + 1) / ranks;
    last_eval = evaluate(g, *backend, *stream, *test, begin, end, dev_labels, dev_pred, dev_weights);
    if (ranks > 1) {
      std::vector<double> sums(last_eval.cm.counts().size() + 2);
      for (size_t i = 0; i < last_eval.cm.counts().size(); ++i) sums[i] = static_cast<double>(last_eval.cm.counts()[i]);
      sums[sums.size() - 2] = last_eval.loss_sum;
      sums.back() = last_eval.samples;
      world.allreduce_sum(std::span<double>(sums));
      for (size_t i = 0; i < last_eval.cm.counts().size(); ++i)
        last_eval.cm.counts()[i] = static_cast<int64_t>(sums[i]);
      last_eval.loss_sum = sums[sums.size() - 2];
      last_eval.samples = sums.back();
    }
    last_eval_loss = last_eval.samples > 0 ? last_eval.loss_sum / last_eval.samples : 0;
    const double secs = seconds_since(t0);
    timeline.add("eval", Timeline::k_rank_track, ts, now_s());
    eval_total_s += secs;
    const double elapsed = seconds_since(t_loop);
    log_metrics({{"kind", "eval"}, {"step", step}, {"epoch", epoch}, {"test_loss", last_eval_loss},
                 {"test_accuracy", last_eval.cm.accuracy()}, {"test_miou", last_eval.cm.mean_iou()}, {"eval_s", secs},
                 {"elapsed_s", elapsed}, {"train_s", elapsed - eval_total_s},
                 {"epochs_done", static_cast<double>(samples_done) / static_cast<double>(n_train)}});
    progress.finish();
    char line[256];
    std::snprintf(line, sizeof(line), "eval  epoch %lld step %lld: test loss %.4f accuracy %.4f mIoU %.4f (%.1f s)",
                  static_cast<long long>(epoch), static_cast<long long>(step), last_eval_loss,
                  last_eval.cm.accuracy(), last_eval.cm.mean_iou(), secs);
    log::info(line);
  };

  std::vector<const io::Batch*> held;
  std::vector<LearnerBatch> inputs;
  for (int64_t epoch = 1; epoch <= epochs && step < total_steps; ++epoch) {
    std::vector<int64_t> indices = sampler.indices(cfg.data.shuffle ? epoch : 0, topo.node(), topo.local_rank());
    loader.start_epoch(std::move(indices), batches_per_epoch);
    int64_t used = 0;
    while (used + learners <= batches_per_epoch && step < total_steps) {
      const double t_load = now_s();
      held.clear();
      inputs.clear();
      for (int j = 0; j < learners; ++j) {
        const io::Batch* data = loader.next();
        if (data == nullptr)
          throw Error("loader: epoch " + std::to_string(epoch) + " ended after " + std::to_string(used + j) + " of " +
                      std::to_string(batches_per_epoch) + " batches");
        held.push_back(data);
        inputs.push_back({data->images, data->labels});
      }
      used += learners;
      timeline.add("load", Timeline::k_rank_track, t_load, now_s());
      if (rank == fail_rank && step + 1 == fail_step)
        throw Error("SQUALL_FAIL_AT: rank " + std::to_string(rank) + " fails at step " + std::to_string(fail_step) +
                    " on purpose");

      // The schedule follows the samples trained on, counted in steps of the initial learner
      // count, so that the auto-tuner's changes keep warm-up, milestones and the cosine in place.
      const double lr = schedule.lr_at(std::min(samples_done / planned_step_samples, planned_steps - 1), planned_steps);
      const auto t_step = Clock::now();
      const std::vector<float> losses = group.step(inputs, step, static_cast<float>(lr));
      for (const io::Batch* b : held) loader.release(b);
      double loss = 0;
      for (float l : losses) {
        if (!std::isfinite(l)) {
          progress.finish();
          throw Error("training diverged: the loss is " + std::string(std::isnan(l) ? "NaN" : "infinite") +
                      " at step " + std::to_string(step + 1) + " (epoch " + std::to_string(epoch) + ", rank " +
                      std::to_string(rank) + ", learning rate " + std::to_string(lr) + "); " +
                      divergence_hint(cfg, algorithm, group));
        }
        loss += l;
      }
      loss /= static_cast<double>(losses.size());
      ++step;
      const int64_t step_samples = batch * learners * ranks;
      samples_done += step_samples;

      window_loss.add(loss);
      const double elapsed = seconds_since(t_loop);
      if (root)
        progress.update({step, total_steps, static_cast<int>(epoch), static_cast<int>(epochs), window_loss.mean(),
                       static_cast<double>(samples_done) / std::max(elapsed, 1e-9), elapsed});
      if (step % cfg.train.log_every_steps == 0 || step == total_steps) {
        last_train_loss = window_loss.mean();
        log_metrics({{"kind", "train"}, {"step", step}, {"epoch", epoch}, {"loss", last_train_loss}, {"lr", lr},
                     {"learners", learners}, {"samples_per_s", static_cast<double>(samples_done) / std::max(elapsed, 1e-9)}});
        window_loss.reset();
      }

      const int change = tuner.after_step(world, learners, step_samples, seconds_since(t_step));
      if (change != 0) {
        if (change > 0) group.add_learner(); else group.remove_learner();
        learners = group.learners();
        // Each step now takes `learners` batches: the rest of the run takes fewer or more steps.
        steps_per_epoch = batches_per_epoch / learners;
        const int64_t rest_of_epoch = (batches_per_epoch - used) / learners;
        if (cfg.train.max_steps == 0)
          total_steps = step + rest_of_epoch + (epochs - epoch) * steps_per_epoch;
        else
          epochs = epoch + (std::max<int64_t>(0, total_steps - step - rest_of_epoch) + steps_per_epoch - 1) / steps_per_epoch;
        const json& d = tuner.decisions().back();
        log_metrics({{"kind", "autotune"}, {"step", step}, {"learners_before", d["learners"]},
                     {"samples_per_s", d["samples_per_s"]}, {"decision", d["decision"]}, {"learners", learners},
                     {"steps_per_epoch", steps_per_epoch}, {"total_steps", total_steps}});
        progress.finish();
        char line[256];
        std::snprintf(line, sizeof(line),
                      "autotune step %lld: %d learner(s) per device ran %.0f samples/s; %s (now %lld steps per epoch, "
                      "%lld in all)",
                      static_cast<long long>(step), d["learners"].get<int>(), d["samples_per_s"].get<double>(),
                      d["decision"].get<std::string>().c_str(), static_cast<long long>(steps_per_epoch),
                      static_cast<long long>(total_steps));
        log::info(line);
      }
      if (cfg.train.eval_every_steps > 0 && step % cfg.train.eval_every_steps == 0 && step != total_steps)
        run_eval(epoch);
    }
    if (cfg.train.eval_every_steps == 0 || step == total_steps) run_eval(epoch);
  }
  progress.finish();
  const double loop_s = seconds_since(t_loop);
  const double t_io = loader.io_wait_s();

  // ---- the central model: the same on every rank, or the run failed ----
  std::vector<float> host(group.param_count() + group.state_count());
  backend->copy_to_host(*stream, host.data(), group.central_params(), group.param_count());
  backend->copy_to_host(*stream, host.data() + group.param_count(), group.central_state(), group.state_count());
  backend->synchronize(*stream);
  TrainResult r;
  r.model_checksum = fnv1a_hex(host.data(), host.size() * sizeof(float));
  const std::vector<std::string> sums = world.gather_strings(r.model_checksum);
  std::string mismatch;
  for (size_t i = 0; i < sums.size(); ++i)
    if (sums[i] != sums[0]) mismatch += (mismatch.empty() ? "" : ", ") + ("rank " + std::to_string(i) + " " + sums[i]);
  if (!mismatch.empty())
    throw Error("the ranks' central models differ at the end of training: rank 0 " + sums[0] + ", " + mismatch);

  // ---- timeline ----
  if (timeline.enabled()) {
    if (timeline.dropped() > 0)
      log::warn("timeline: " + std::to_string(timeline.dropped()) + " events past the limit were dropped");
    const auto parts = world.gather_strings(timeline.events_json(rank, topo.host(), topo.node()));
    if (root) write_atomic(dir / "timeline.json", Timeline::document(parts));
  }

  // ---- summary ----
  const double t_compute = group.compute_seconds(), t_reduce = group.reduce_seconds();
  r.steps = step;
  r.train_loss = last_train_loss;
  r.test_accuracy = last_eval.cm.accuracy();
  r.test_loss = last_eval_loss;
  r.wall_s = seconds_since(t_start);
  r.samples_per_s = static_cast<double>(samples_done) / std::max(loop_s, 1e-9);

  json final_metrics{{"train_loss", r.train_loss}, {"test_loss", r.test_loss}};
  if (info.per_pixel_labels) {
    final_metrics["test_miou"] = last_eval.cm.mean_iou();
    json per_class = json::array();
    for (double v : last_eval.cm.iou_per_class()) per_class.push_back(std::isnan(v) ? json(nullptr) : json(v));
    final_metrics["test_iou_per_class"] = per_class;
  } else {
    final_metrics["test_accuracy"] = r.test_accuracy;
  }
  json parallel{{"period", cfg.parallel.period}};
  if (algorithm == Algorithm::sma) {
    const SmaCoefficients c = group.sma();
    parallel["alpha"] = c.alpha;
    parallel["centre_rate"] = c.beta;
    parallel["momentum"] = c.mu;
  }
  if (algorithm == Algorithm::local_sgd) parallel["start_step"] = cfg.parallel.start_step;
  if (algorithm != Algorithm::sma && ranks > 1) {
    parallel["bucket_mb"] = cfg.parallel.bucket_mb;
    parallel["buckets"] = group.buckets();
    parallel["max_buckets_in_flight"] = group.max_buckets_in_flight();
  }
  if (cfg.parallel.autotune) parallel["autotune"] = tuner.decisions();
  const json summary{
      {"world_size", ranks}, {"nodes", topo.nodes()}, {"devices_per_rank", 1}, {"replicas_per_device", learners},
      {"algorithm", algorithm_name(algorithm)}, {"parallel", parallel}, {"backend", backend->name()},
      {"threads", backend->threads()}, {"model", spec.name}, {"parameters", group.param_count()},
      {"optimizer", group.optimizer_name()}, {"global_batch", batch * learners * ranks}, {"batch_per_learner", batch},
      {"epochs", epochs}, {"steps", step}, {"wall_s", r.wall_s}, {"train_loop_s", loop_s},
      {"samples_per_s", r.samples_per_s},
      {"time_breakdown_s", {{"compute", t_compute}, {"allreduce", t_reduce}, {"io_wait", t_io},
                            {"allreduce_overlapped", group.overlapped_reduce_seconds()}}},
      {"skipped_samples", loader.bad_samples()}, {"data", info.description},
      {"final", final_metrics}, {"model_checksum", r.model_checksum}, {"config", origin}};
  if (root) write_atomic(dir / "summary.json", summary.dump(2) + "\n");

  char line[400];
  std::snprintf(line, sizeof(line),
                "done: %lld steps in %.1f s, %.0f samples/s on %d rank(s) x %d learner(s), train loss %.4f, test "
                "accuracy %.4f (compute %.1f s, allreduce %.1f s, io_wait %.1f s); summary in %s",
                static_cast<long long>(step), r.wall_s, r.samples_per_s, ranks, learners, r.train_loss,
                r.test_accuracy, t_compute, t_reduce, t_io, (dir / "summary.json").c_str());
  log::info(line);
  return r;
}

}  // namespace squall::train
