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
#include "io/png.hpp"
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
#include "src/train/predictions.hpp"
#include "src/train/progress.hpp"
#include "src/train/schedule.hpp"
#include "src/train/timeline.hpp"

namespace squall::train {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

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

// Held-out samples drawn in predictions/epoch-N.png.
constexpr size_t k_picture_samples = 4;

// pictures: when not null (per-pixel labels), the first samples of the range (up to its
// capacity) with their first channel, labels and predictions, for predictions/epoch-N.png.
EvalPart evaluate(nn::Graph& g, nn::Backend& be, nn::Stream& stream, const DataSource& test, int64_t begin,
                  int64_t end, int32_t* dev_labels, int32_t* dev_pred, const float* class_weights,
                  std::vector<PredictionSample>* pictures = nullptr) {
  const int64_t batch = g.batch();
  const auto& info = test.info();
  const int64_t per_sample = info.sample.per_sample();
  const int64_t label_hw = info.per_pixel_labels ? info.sample.h() * info.sample.w() : 1;
  std::vector<float> images(static_cast<size_t>(batch * per_sample));
  std::vector<int32_t> labels(static_cast<size_t>(batch * label_hw));
  EvalPart part{ConfusionMatrix(info.classes)};
  // The loss sum and the confusion matrix accumulate in backend memory and are read once at
  // the end: no host round trip per batch.
  const auto classes = static_cast<size_t>(info.classes);
  nn::Buffer loss = be.allocate(2);  // [this batch's mean loss, the sum over samples]
  nn::Buffer confusion = be.allocate(classes * classes, nn::DType::i32);
  be.fill(stream, loss.data(), 2, 0.0f);
  be.fill(stream, reinterpret_cast<float*>(confusion.as<int32_t>()), classes * classes, 0.0f);  // 0.0f is all zero bits
  std::vector<int64_t> idx;
  nn::RunMode mode;
  mode.train = false;
  for (int64_t start = begin; start < end; start += batch) {
    const int64_t valid = std::min(batch, end - start);
    idx.resize(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) idx[static_cast<size_t>(i)] = start + std::min(i, valid - 1);
    test.read(idx, images.data(), labels.data());
    std::fill(labels.begin() + valid * label_hw, labels.end(), -1);  // padding: ignored
    // Pageable host memory: these copies have read it when they return, so the next
    // batch may overwrite it.
    be.copy_from_host(stream, g.input().f32(), images.data(), images.size());
    be.copy_labels_from_host(stream, dev_labels, labels.data(), labels.size());
    g.forward(stream, mode);
    const auto out = g.output_shape();
    be.softmax_cross_entropy(stream, g.dtype(), g.output().data, dev_labels, class_weights, out.n(), out.c(),
                             out.h() * out.w(), g.output_grad().data, loss.data(), nullptr);
    be.axpy(stream, static_cast<float>(valid), loss.data(), loss.data() + 1, 1);
    be.argmax_channels(stream, g.dtype(), g.output().data, dev_pred, out.n(), out.c(), out.h() * out.w());
    be.accumulate_confusion(stream, dev_labels, dev_pred, static_cast<size_t>(valid * label_hw), info.classes,
                            confusion.as<int32_t>());
    if (pictures && start == begin && info.per_pixel_labels) {  // the first batch only: one wait
      const auto keep = static_cast<size_t>(std::min<int64_t>(valid, static_cast<int64_t>(pictures->size())));
      pictures->resize(keep);
      std::vector<int32_t> pred(static_cast<size_t>(valid * label_hw));
      be.copy_labels_to_host(stream, pred.data(), dev_pred, pred.size());
      be.synchronize(stream);
      for (size_t k = 0; k < keep; ++k) {
        PredictionSample& p = (*pictures)[k];
        const auto first = static_cast<int64_t>(k);
        const float* image = images.data() + first * per_sample;  // channel 0 of sample k
        p.channel.assign(image, image + label_hw);
        p.label.assign(labels.begin() + first * label_hw, labels.begin() + (first + 1) * label_hw);
        p.pred.assign(pred.begin() + first * label_hw, pred.begin() + (first + 1) * label_hw);
      }
    }
    part.samples += static_cast<double>(valid);
  }
  float host_loss[2] = {0, 0};
  std::vector<int32_t> counts(classes * classes);
  be.copy_to_host(stream, host_loss, loss.data(), 2);
  be.copy_labels_to_host(stream, counts.data(), confusion.as<int32_t>(), counts.size());
  be.synchronize(stream);
  part.loss_sum = static_cast<double>(host_loss[1]);
  for (size_t i = 0; i < counts.size(); ++i) part.cm.counts()[i] += counts[i];
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

// Per-class IoU for metrics.jsonl and summary.json: null for a class absent from both the
// labels and the predictions (its IoU is undefined).
json iou_per_class_json(const ConfusionMatrix& cm) {
  json per_class = json::array();
  for (double v : cm.iou_per_class()) per_class.push_back(std::isnan(v) ? json(nullptr) : json(v));
  return per_class;
}

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

// One training run on this rank, in the order it happens: plan() reads the data and works out
// the steps, build() makes the model, the learners and the loader, open_outputs() the run
// directory and the timeline, train() runs the epochs (train_step() each step, evaluate()
// when due, reshape() after the auto-tuner changes the learner count), finish() checks the
// central model and writes the summary.
class TrainingRun {
 public:
  TrainingRun(const Config& cfg, const std::string& origin, const RunOptions& options)
      : m_cfg(cfg),
        m_origin(origin),
        m_options(options),
        m_start(Clock::now()),
        m_topo(mpi::Topology::create(options.ranks_per_node)),
        m_world(m_topo.world()),
        m_rank(m_topo.rank()),
        m_ranks(m_topo.world_size()),
        m_root(m_rank == 0),
        m_algorithm(parse_algorithm(cfg.parallel.algorithm)),
        m_timeline(options.timeline) {
    std::tie(m_fail_rank, m_fail_step) = fail_at_from_env();
  }

  TrainResult run() {
    plan();
    build();
    open_outputs();
    train();
    return finish();
  }

 private:
  static double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

  void log_metrics(const json& j) {
    if (m_metrics) m_metrics->write(j);
  }

  // ---- the data and the plan of steps ----
  void plan() {
    const Config& cfg = m_cfg;
    m_train = open_source(cfg.data, "train", "train");
    m_test = open_source(cfg.data, "test", "test");
    m_n_train = cfg.data.train_samples > 0 ? std::min(cfg.data.train_samples, m_train->size()) : m_train->size();
    m_n_test = cfg.data.test_samples > 0 ? std::min(cfg.data.test_samples, m_test->size()) : m_test->size();
    m_batch = cfg.train.batch_size;
    m_learners = static_cast<int>(cfg.parallel.replicas_per_device);
    m_max_learners = cfg.parallel.autotune
                         ? std::max<int>(m_learners, static_cast<int>(cfg.parallel.max_replicas_per_device))
                         : m_learners;
    // Each rank reads its share of every epoch (io/sampler.hpp) and hands its learners
    // consecutive batches: learner j of a step takes the rank's batch step*L + j.
    std::vector<int64_t> offsets = m_train->file_offsets();
    if (m_n_train < m_train->size()) offsets = {0, m_n_train};
    const std::vector<int> node_of_rank = m_world.allgather(m_topo.node());
    m_sampler = std::make_unique<io::Sampler>(io::parse_sampling(cfg.data.sampling), offsets,
                                              io::node_sizes_from(node_of_rank), static_cast<uint64_t>(cfg.run.seed));
    m_batches_per_epoch = m_sampler->steps_per_epoch(m_batch);
    if (m_batches_per_epoch < m_learners)
      throw Error(m_origin + ": one step takes train.batch_size x replicas x ranks = " + std::to_string(m_batch) +
                  " x " + std::to_string(m_learners) + " x " + std::to_string(m_ranks) +
                  " samples, more than an epoch's " + std::to_string(m_n_train) + " training samples");
    m_steps_per_epoch = m_batches_per_epoch / m_learners;
    m_total_steps = m_steps_per_epoch * cfg.train.epochs;
    if (cfg.train.max_steps > 0) m_total_steps = std::min(m_total_steps, cfg.train.max_steps);
    m_epochs = cfg.train.max_steps > 0 ? (m_total_steps + m_steps_per_epoch - 1) / m_steps_per_epoch
                                       : cfg.train.epochs;
    m_planned_steps = m_total_steps;
    m_planned_step_samples = m_batch * m_learners * m_ranks;
    // A central model that never synchronises is the initial one: evaluating it would say nothing.
    if (m_algorithm != Algorithm::ssgd) {
      const int64_t first_sync =
          (m_algorithm == Algorithm::local_sgd ? cfg.parallel.start_step : 0) + cfg.parallel.period;
      if (first_sync > m_total_steps)
        throw UsageError(m_origin + ": parallel.period = " + std::to_string(cfg.parallel.period) +
                         (m_algorithm == Algorithm::local_sgd
                              ? " after parallel.start_step = " + std::to_string(cfg.parallel.start_step)
                              : std::string()) +
                         " is longer than the run (" + std::to_string(m_total_steps) +
                         " steps: train.epochs, train.max_steps): the central model would never be synchronised and "
                         "the run would evaluate the initial model");
    }
  }

  // ---- the model, the backend, the learners and the loader ----
  void build() {
    const Config& cfg = m_cfg;
    const DatasetInfo& info = m_train->info();
    m_spec.name = cfg.model.name;
    m_spec.classes = cfg.model.classes > 0 ? cfg.model.classes : info.classes;
    m_spec.width = cfg.model.width;
    m_spec.depth = cfg.model.depth;
    m_spec.aspp_rates = cfg.model.aspp_rates;
    m_spec.dropout = static_cast<float>(cfg.model.dropout);
    if (cfg.model.in_channels > 0 && cfg.model.in_channels != info.sample.c())
      throw Error(m_origin + ": model.in_channels = " + std::to_string(cfg.model.in_channels) + " but the data has " +
                  std::to_string(info.sample.c()) + " channels");
    if (!cfg.data.class_weights.empty() && static_cast<int64_t>(cfg.data.class_weights.size()) != m_spec.classes)
      throw Error(m_origin + ": data.class_weights has " + std::to_string(cfg.data.class_weights.size()) +
                  " entries but the model has " + std::to_string(m_spec.classes) + " classes");
    // Ranks on one machine share its cores (unless the launcher pinned them), and a rank's
    // place among them picks its GPU (run.backend = cuda/auto).
    m_backend = nn::make_backend(cfg.run.backend, m_topo.host_rank(),
                                 cfg.run.threads > 0 ? static_cast<int>(cfg.run.threads)
                                                     : cpu::default_threads(m_topo.host_ranks()));
    m_stream = m_backend->create_stream();
    const nn::ModelSpec spec = m_spec;
    const nn::Shape sample = info.sample;
    auto make_graph = [spec, sample] { return nn::make_model(spec, sample); };

    mpi::AllreduceOptions ar_options;
    ar_options.stall_warn_s = m_options.stall_warn_s;
    ar_options.stall_abort_s = m_options.stall_abort_s;
    m_allreduce = std::make_unique<mpi::HierAllreduce>(m_topo, ar_options);
    m_reducer = std::make_unique<AllreduceReducer>(*m_allreduce, m_ranks);
    // parallel.device_allreduce: a CUDA job of several ranks may sum on the GPUs instead of
    // through pinned host memory (docs/allreduce.md, "On device buffers").
    if (cfg.parallel.device_allreduce != "host" && m_ranks > 1) {
      if (m_backend->name() != "cuda")
        throw UsageError(m_origin + ": parallel.device_allreduce = " + cfg.parallel.device_allreduce +
                         " sums GPU memory, but this job trains on the " + m_backend->name() +
                         " backend (set run.backend = cuda, or parallel.device_allreduce = host)");
      m_device_allreduce =
          mpi::make_device_allreduce(cfg.parallel.device_allreduce, m_topo, m_backend->device().index, ar_options);
      m_device_reducer = std::make_unique<DeviceReducer>(*m_device_allreduce, m_ranks);
    }

    LearnerGroupOptions lg;
    lg.algorithm = m_algorithm;
    lg.learners = m_learners;
    lg.ranks = m_ranks;
    lg.rank = m_rank;
    lg.period = cfg.parallel.period;
    lg.alpha = cfg.parallel.alpha;
    lg.centre_rate = cfg.parallel.centre_rate;
    lg.momentum = cfg.parallel.momentum;
    lg.start_step = cfg.parallel.start_step;
    lg.bucket_floats =
        std::max<size_t>(1, static_cast<size_t>(cfg.parallel.bucket_mb * double(1 << 20) / sizeof(float)));
    lg.seed = static_cast<uint64_t>(cfg.run.seed);
    lg.precision = precision_dtype(cfg.train.precision);
    lg.layout = resolve_layout(cfg.model.layout, m_backend->name(), lg.precision);
    lg.bf16_gradients = cfg.parallel.comm_precision == "bf16";
    lg.loss_scaling.dynamic = lg.precision == nn::DType::f16;
    lg.loss_scaling.initial = static_cast<float>(cfg.train.loss_scale);
    lg.loss_scaling.growth_interval = cfg.train.loss_scale_window;
    if (lg.precision != nn::DType::f32 && m_backend->name() == "cpu" && m_rank == 0)
      log::warn("train.precision = " + cfg.train.precision +
                " on the CPU backend: the reference numerics of reduced precision, computed by rounding f32 "
                "results (slower than fp32; train in reduced precision for speed on a GPU)");
    lg.graphs = cfg.parallel.cuda_graphs && m_backend->can_capture();
    if (cfg.parallel.cuda_graphs && !lg.graphs && m_rank == 0)
      log::warn("parallel.cuda_graphs has no effect on the " + m_backend->name() + " backend (nothing to capture)");
    std::vector<float> class_weights(cfg.data.class_weights.begin(), cfg.data.class_weights.end());
    const int64_t label_hw = info.per_pixel_labels ? info.sample.h() * info.sample.w() : 1;
    m_group = std::make_unique<LearnerGroup>(
        *m_backend, make_graph, m_batch, m_batch * label_hw, cfg.optimizer, class_weights, lg,
        m_ranks == 1         ? static_cast<Reducer&>(m_alone)
        : m_device_reducer ? static_cast<Reducer&>(*m_device_reducer)
                           : static_cast<Reducer&>(*m_reducer));
    // The linear scaling rule scales by the batch one update averages over: the global batch
    // under ssgd, a learner's own batch under sma and local-sgd.
    m_schedule = std::make_unique<Schedule>(cfg.schedule, cfg.optimizer.lr,
                                            m_algorithm == Algorithm::ssgd ? m_batch * m_learners * m_ranks : m_batch,
                                            m_steps_per_epoch);

    m_dev_labels = m_backend->allocate_labels(static_cast<size_t>(m_batch * label_hw), m_label_buf);
    m_dev_pred = m_backend->allocate_labels(static_cast<size_t>(m_batch * label_hw), m_pred_buf);
    if (!class_weights.empty()) {
      m_weight_buf = m_backend->allocate(class_weights.size());
      m_backend->copy_from_host(*m_stream, m_weight_buf.data(), class_weights.data(), class_weights.size());
      m_dev_weights = m_weight_buf.data();
    }
    io::LoaderOptions loader_options;
    loader_options.batch_size = m_batch;
    loader_options.workers = static_cast<int>(cfg.data.workers);
    loader_options.prefetch = std::max(static_cast<int>(cfg.data.prefetch), m_max_learners);
    loader_options.skip_bad = cfg.data.skip_bad_samples;
    m_loader = std::make_unique<io::Loader>(*m_train, loader_options);
    m_last_eval.cm = ConfusionMatrix(info.classes);
  }

  // ---- the timeline, the run directory, the opening lines ----
  void open_outputs() {
    m_world.barrier();
    m_timeline.set_origin(now_s());
    if (m_timeline.enabled()) {
      m_group->set_phase_hook([this](const char* phase, int learner, double t0, double t1) {
        m_timeline.add(phase, learner < 0 ? Timeline::k_rank_track : Timeline::learner_track(learner), t0, t1);
      });
      m_allreduce->set_level_hook([this](const char* level, double t0, double t1, size_t) {
        const std::string_view l(level);
        if (l == "node_reduce_scatter") m_timeline.add("node reduce-scatter", Timeline::k_allreduce_track + 1, t0, t1);
        else if (l == "cross_allreduce") m_timeline.add("cross-node allreduce", Timeline::k_allreduce_track + 2, t0, t1);
        else if (l == "node_allgather") m_timeline.add("node allgather", Timeline::k_allreduce_track + 3, t0, t1);
        else m_timeline.add("allreduce", Timeline::k_allreduce_track, t0, t1);
      });
    }
    // Rank 0 writes the run directory; no other rank needs it.
    m_dir = fs::path(m_cfg.run.dir);
    if (m_root) {
      std::error_code ec;
      fs::create_directories(m_dir, ec);
      if (ec) throw Error("run.dir = '" + m_cfg.run.dir + "': cannot create it: " + ec.message());
      write_atomic(m_dir / "config.toml", to_toml(m_cfg));
      m_metrics = std::make_unique<MetricsLog>(m_dir / "metrics.jsonl");
    }
    const DatasetInfo& info = m_train->info();
    log::info("squall train: " + m_spec.name + " (" + std::to_string(m_group->param_count()) + " parameters) on " +
              info.description + ", backend " + m_backend->name() +
                  (m_backend->device().index >= 0 ? " (" + m_backend->device().name + ", GPU " +
                                                        std::to_string(m_backend->device().index) + ")"
                                                  : std::string()) +
                  ", " + std::to_string(m_ranks) + " rank(s) on " +
              std::to_string(m_topo.nodes()) + " node(s) x " + std::to_string(m_learners) + " learner(s), " +
              algorithm_name(m_algorithm) + ", batch " + std::to_string(m_batch) + " per learner (global " +
              std::to_string(m_batch * m_learners * m_ranks) + "), " + std::to_string(m_total_steps) + " steps (" +
              std::to_string(m_steps_per_epoch) + " per epoch), optimizer " + m_group->optimizer_name() +
              ", " + m_cfg.train.precision + ", run dir " + m_cfg.run.dir);
    if (m_algorithm == Algorithm::sma) {
      const SmaCoefficients c = m_group->sma();
      char line[256];
      std::snprintf(line, sizeof(line),
                    "sma: %d learner(s) in the job, each pulled by alpha %g towards the central model, which moves "
                    "by beta %g%s towards their mean with momentum %g",
                    m_learners * m_ranks, c.alpha, c.beta,
                    m_cfg.parallel.centre_rate > 0 ? "" : " (min(alpha x learners, 1))", c.mu);
      log::info(line);
    }
  }

  // ---- the epochs ----
  void train() {
    m_progress = std::make_unique<Progress>(m_root && isatty(STDOUT_FILENO) != 0, m_cfg.train.log_every_steps);
    m_tuner = std::make_unique<AutoTuner>(m_cfg.parallel.autotune, m_cfg.parallel.autotune_threshold, m_max_learners,
                                          std::max<int64_t>(10, m_steps_per_epoch / 20));
    m_loop_start = Clock::now();
    for (int64_t epoch = 1; epoch <= m_epochs && m_step < m_total_steps; ++epoch) {
      std::vector<int64_t> indices =
          m_sampler->indices(m_cfg.data.shuffle ? epoch : 0, m_topo.node(), m_topo.local_rank());
      m_loader->start_epoch(std::move(indices), m_batches_per_epoch);
      int64_t used = 0;  // batches of this epoch handed to the learners
      while (used + m_learners <= m_batches_per_epoch && m_step < m_total_steps) {
        used += m_learners;
        train_step(epoch, used);
        if (m_cfg.train.eval_every_steps > 0 && m_step % m_cfg.train.eval_every_steps == 0 &&
            m_step != m_total_steps)
          evaluate(epoch);
      }
      if (m_cfg.train.eval_every_steps == 0 || m_step == m_total_steps) evaluate(epoch);
    }
    m_progress->finish();
    m_loop_s = seconds_since(m_loop_start);
  }

  // One step: a batch for every learner, the group's step, the logs, the auto-tuner.
  // `used`: the epoch's batches taken so far, this step's included.
  void train_step(int64_t epoch, int64_t used) {
    const double t_load = now_s();
    m_held.clear();
    m_inputs.clear();
    for (int j = 0; j < m_learners; ++j) {
      const io::Batch* data = m_loader->next();
      if (data == nullptr)
        throw Error("loader: epoch " + std::to_string(epoch) + " ended after " +
                    std::to_string(used - m_learners + j) + " of " + std::to_string(m_batches_per_epoch) + " batches");
      m_held.push_back(data);
      m_inputs.push_back({data->images, data->labels});
    }
    m_timeline.add("load", Timeline::k_rank_track, t_load, now_s());
    if (m_rank == m_fail_rank && m_step + 1 == m_fail_step)
      throw Error("SQUALL_FAIL_AT: rank " + std::to_string(m_rank) + " fails at step " + std::to_string(m_fail_step) +
                  " on purpose");

    // The schedule follows the samples trained on, counted in steps of the initial learner
    // count, so that the auto-tuner's changes keep warm-up, milestones and the cosine in place.
    const double lr = m_schedule->lr_at(std::min(m_samples_done / m_planned_step_samples, m_planned_steps - 1),
                                        m_planned_steps);
    const auto t_step = Clock::now();
    const std::vector<float> losses = m_group->step(m_inputs, m_step, static_cast<float>(lr));
    for (const io::Batch* b : m_held) m_loader->release(b);
    double loss = 0;
    for (float l : losses) {
      if (!std::isfinite(l)) {
        m_progress->finish();
        throw Error("training diverged: the loss is " + std::string(std::isnan(l) ? "NaN" : "infinite") +
                    " at step " + std::to_string(m_step + 1) + " (epoch " + std::to_string(epoch) + ", rank " +
                    std::to_string(m_rank) + ", learning rate " + std::to_string(lr) + "); " + divergence_hint());
      }
      loss += l;
    }
    loss /= static_cast<double>(losses.size());
    ++m_step;
    const int64_t step_samples = m_batch * m_learners * m_ranks;
    m_samples_done += step_samples;

    m_window_loss.add(loss);
    const double elapsed = seconds_since(m_loop_start);
    const double rate = static_cast<double>(m_samples_done) / std::max(elapsed, 1e-9);
    if (m_root)
      m_progress->update({m_step, m_total_steps, static_cast<int>(epoch), static_cast<int>(m_epochs),
                          m_window_loss.mean(), rate, elapsed});
    if (m_step % m_cfg.train.log_every_steps == 0 || m_step == m_total_steps) {
      m_last_train_loss = m_window_loss.mean();
      json record{{"kind", "train"}, {"step", m_step}, {"epoch", epoch}, {"loss", m_last_train_loss}, {"lr", lr},
                  {"learners", m_learners}, {"samples_per_s", rate}};
      if (m_group->options().loss_scaling.dynamic) {
        record["loss_scale"] = m_group->loss_scale();
        record["skipped_steps"] = m_group->skipped_steps();
      }
      log_metrics(record);
      m_window_loss.reset();
    }
    const int change = m_tuner->after_step(m_world, m_learners, step_samples, seconds_since(t_step));
    if (change != 0) reshape(change, epoch, used);
  }

  // The auto-tuner added (+1) or removed (-1) a learner. Each step now takes `m_learners`
  // batches, so the rest of the run takes fewer or more steps.
  void reshape(int change, int64_t epoch, int64_t used) {
    if (change > 0) m_group->add_learner(); else m_group->remove_learner();
    m_learners = m_group->learners();
    m_steps_per_epoch = m_batches_per_epoch / m_learners;
    const int64_t rest_of_epoch = (m_batches_per_epoch - used) / m_learners;
    if (m_cfg.train.max_steps == 0)
      m_total_steps = m_step + rest_of_epoch + (m_epochs - epoch) * m_steps_per_epoch;
    else
      m_epochs = epoch + (std::max<int64_t>(0, m_total_steps - m_step - rest_of_epoch) + m_steps_per_epoch - 1) /
                             m_steps_per_epoch;
    const json& d = m_tuner->decisions().back();
    log_metrics({{"kind", "autotune"}, {"step", m_step}, {"learners_before", d["learners"]},
                 {"samples_per_s", d["samples_per_s"]}, {"decision", d["decision"]}, {"learners", m_learners},
                 {"steps_per_epoch", m_steps_per_epoch}, {"total_steps", m_total_steps}});
    m_progress->finish();
    char line[256];
    std::snprintf(line, sizeof(line),
                  "autotune step %lld: %d learner(s) per device ran %.0f samples/s; %s (now %lld steps per epoch, "
                  "%lld in all)",
                  static_cast<long long>(m_step), d["learners"].get<int>(), d["samples_per_s"].get<double>(),
                  d["decision"].get<std::string>().c_str(), static_cast<long long>(m_steps_per_epoch),
                  static_cast<long long>(m_total_steps));
    log::info(line);
  }

  // The central model on the test samples, split over the ranks and summed.
  void evaluate(int64_t epoch) {
    const auto t0 = Clock::now();
    const double ts = now_s();
    nn::Graph& g = m_group->eval_graph();
    const int64_t begin = m_n_test * m_rank / m_ranks, end = m_n_test * (m_rank + 1) / m_ranks;
    // Rank 0 evaluates the first test samples: it draws a few of them.
    std::vector<PredictionSample> pictures(m_root && m_test->info().per_pixel_labels ? k_picture_samples : 0);
    m_last_eval = squall::train::evaluate(g, *m_backend, *m_stream, *m_test, begin, end, m_dev_labels, m_dev_pred,
                                          m_dev_weights, pictures.empty() ? nullptr : &pictures);
    if (!pictures.empty()) write_pictures(pictures, epoch);
    if (m_ranks > 1) {
      const auto counts = m_last_eval.cm.counts();  // a view of the matrix
      std::vector<double> sums(counts.size() + 2);
      for (size_t i = 0; i < counts.size(); ++i) sums[i] = static_cast<double>(counts[i]);
      sums[sums.size() - 2] = m_last_eval.loss_sum;
      sums.back() = m_last_eval.samples;
      m_world.allreduce_sum(std::span<double>(sums));
      for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int64_t>(sums[i]);
      m_last_eval.loss_sum = sums[sums.size() - 2];
      m_last_eval.samples = sums.back();
    }
    m_last_eval_loss = m_last_eval.samples > 0 ? m_last_eval.loss_sum / m_last_eval.samples : 0;
    const double secs = seconds_since(t0);
    m_timeline.add("eval", Timeline::k_rank_track, ts, now_s());
    m_eval_total_s += secs;
    const double elapsed = seconds_since(m_loop_start);
    json record{{"kind", "eval"}, {"step", m_step}, {"epoch", epoch}, {"test_loss", m_last_eval_loss},
                {"test_accuracy", m_last_eval.cm.accuracy()}, {"test_miou", m_last_eval.cm.mean_iou()},
                {"eval_s", secs}, {"elapsed_s", elapsed}, {"train_s", elapsed - m_eval_total_s},
                {"epochs_done", static_cast<double>(m_samples_done) / static_cast<double>(m_n_train)}};
    if (m_train->info().per_pixel_labels) record["test_iou_per_class"] = iou_per_class_json(m_last_eval.cm);
    log_metrics(record);
    m_progress->finish();
    char line[256];
    std::snprintf(line, sizeof(line), "eval  epoch %lld step %lld: test loss %.4f accuracy %.4f mIoU %.4f (%.1f s)",
                  static_cast<long long>(epoch), static_cast<long long>(m_step), m_last_eval_loss,
                  m_last_eval.cm.accuracy(), m_last_eval.cm.mean_iou(), secs);
    log::info(line);
  }

  // The likely causes of a divergence, naming the keys that govern them.
  std::string divergence_hint() const {
    std::string hint = "lower optimizer.lr or add schedule.warmup_steps";
    if (m_algorithm == Algorithm::sma) {
      const SmaCoefficients c = m_group->sma();
      char text[512];
      std::snprintf(text, sizeof(text),
                    "; sma with %d learner(s) in the job pulls each learner by parallel.alpha = %g and moves the "
                    "central model by beta = %g (parallel.centre_rate%s) with parallel.momentum = %g: a smaller "
                    "parallel.momentum or parallel.centre_rate damps the central model",
                    m_learners * m_ranks, c.alpha, c.beta,
                    m_cfg.parallel.centre_rate > 0 ? "" : " = 0: min(alpha x learners, 1)", c.mu);
      hint += text;
    }
    return hint;
  }

  // ---- the end: the same central model on every rank, the timeline, the summary ----
  TrainResult finish() {
    const double t_io = m_loader->io_wait_s();
    std::vector<float> host(m_group->param_count() + m_group->state_count());
    m_backend->copy_to_host(*m_stream, host.data(), m_group->central_params(), m_group->param_count());
    m_backend->copy_to_host(*m_stream, host.data() + m_group->param_count(), m_group->central_state(),
                            m_group->state_count());
    m_backend->synchronize(*m_stream);
    TrainResult r;
    r.model_checksum = fnv1a_hex(host.data(), host.size() * sizeof(float));
    const std::vector<std::string> sums = m_world.gather_strings(r.model_checksum);
    std::string mismatch;
    for (size_t i = 0; i < sums.size(); ++i)
      if (sums[i] != sums[0]) mismatch += (mismatch.empty() ? "" : ", ") + ("rank " + std::to_string(i) + " " + sums[i]);
    if (!mismatch.empty())
      throw Error("the ranks' central models differ at the end of training: rank 0 " + sums[0] + ", " + mismatch);

    if (m_timeline.enabled()) {
      if (m_timeline.dropped() > 0)
        log::warn("timeline: " + std::to_string(m_timeline.dropped()) + " events past the limit were dropped");
      const auto parts = m_world.gather_strings(m_timeline.events_json(m_rank, m_topo.host(), m_topo.node()));
      if (m_root) write_atomic(m_dir / "timeline.json", Timeline::document(parts));
    }

    const double t_compute = m_group->compute_seconds(), t_reduce = m_group->reduce_seconds();
    r.steps = m_step;
    r.train_loss = m_last_train_loss;
    r.test_accuracy = m_last_eval.cm.accuracy();
    r.test_loss = m_last_eval_loss;
    r.wall_s = seconds_since(m_start);
    r.samples_per_s = static_cast<double>(m_samples_done) / std::max(m_loop_s, 1e-9);
    if (m_root) write_atomic(m_dir / "summary.json", summary(r, t_compute, t_reduce, t_io).dump(2) + "\n");

    char line[400];
    std::snprintf(line, sizeof(line),
                  "done: %lld steps in %.1f s, %.0f samples/s on %d rank(s) x %d learner(s), train loss %.4f, test "
                  "accuracy %.4f (compute %.1f s, allreduce %.1f s, io_wait %.1f s); summary in %s",
                  static_cast<long long>(m_step), r.wall_s, r.samples_per_s, m_ranks, m_learners, r.train_loss,
                  r.test_accuracy, t_compute, t_reduce, t_io, (m_dir / "summary.json").c_str());
    log::info(line);
    if (m_train->info().per_pixel_labels) {  // segmentation: the held-out IoU, per class too
      const auto fixed = [](double v) {
        char b[32];
        std::snprintf(b, sizeof(b), "%.4f", v);
        return std::string(std::isnan(v) ? "-" : b);
      };
      const auto& names = m_train->info().class_names;
      const std::vector<double> per_class = m_last_eval.cm.iou_per_class();
      std::string iou = "test mean IoU " + fixed(m_last_eval.cm.mean_iou()) + " (";
      for (size_t k = 0; k < per_class.size(); ++k)
        iou += (k ? ", " : "") + (k < names.size() ? names[k] : "class " + std::to_string(k)) + " " + fixed(per_class[k]);
      log::info(iou + ")");
    }
    return r;
  }

  // predictions/epoch-N.png (a later evaluation in the same epoch replaces it). A picture
  // that cannot be written is a warning: it must not end a training run.
  void write_pictures(const std::vector<PredictionSample>& pictures, int64_t epoch) {
    const nn::Shape& s = m_test->info().sample;
    try {
      const fs::path dir = m_dir / "predictions";
      std::error_code ec;
      fs::create_directories(dir, ec);
      io::write_png((dir / ("epoch-" + std::to_string(epoch) + ".png")).string(),
                    prediction_picture(pictures, s.h(), s.w()));
    } catch (const Error& e) {
      log::warn(std::string("cannot write the predictions picture: ") + e.what());
    }
  }

  json summary(const TrainResult& r, double t_compute, double t_reduce, double t_io) const {
    json final_metrics{{"train_loss", r.train_loss}, {"test_loss", r.test_loss}};
    if (m_train->info().per_pixel_labels) {
      final_metrics["test_miou"] = m_last_eval.cm.mean_iou();
      final_metrics["test_iou_per_class"] = iou_per_class_json(m_last_eval.cm);
    } else {
      final_metrics["test_accuracy"] = r.test_accuracy;
    }
    json parallel{{"period", m_cfg.parallel.period}};
    if (m_algorithm == Algorithm::sma) {
      const SmaCoefficients c = m_group->sma();
      parallel["alpha"] = c.alpha;
      parallel["centre_rate"] = c.beta;
      parallel["momentum"] = c.mu;
    }
    if (m_algorithm == Algorithm::local_sgd) parallel["start_step"] = m_cfg.parallel.start_step;
    if (m_algorithm != Algorithm::sma && m_ranks > 1) {
      parallel["bucket_mb"] = m_cfg.parallel.bucket_mb;
      parallel["buckets"] = m_group->buckets();
      parallel["max_buckets_in_flight"] = m_group->max_buckets_in_flight();
    }
    if (m_group->options().graphs) parallel["captured_learners"] = m_group->captured_learners();
    if (m_device_allreduce) parallel["device_allreduce"] = m_device_allreduce->mode();
    parallel["comm_precision"] = m_cfg.parallel.comm_precision;
    if (m_cfg.parallel.autotune) parallel["autotune"] = m_tuner->decisions();
    return json{{"world_size", m_ranks}, {"nodes", m_topo.nodes()}, {"devices_per_rank", 1},
                {"replicas_per_device", m_learners}, {"algorithm", algorithm_name(m_algorithm)},
                {"parallel", parallel}, {"backend", m_backend->name()}, {"device", m_backend->device().name},
                {"threads", m_backend->threads()},
                {"model", m_spec.name}, {"parameters", m_group->param_count()},
                {"precision", m_cfg.train.precision}, {"layout", nn::layout_name(m_group->layout())},
                {"skipped_steps", m_group->skipped_steps()},
                {"optimizer", m_group->optimizer_name()}, {"global_batch", m_batch * m_learners * m_ranks},
                {"batch_per_learner", m_batch}, {"epochs", m_epochs}, {"steps", m_step}, {"wall_s", r.wall_s},
                {"train_loop_s", m_loop_s}, {"samples_per_s", r.samples_per_s},
                {"time_breakdown_s", {{"compute", t_compute}, {"allreduce", t_reduce}, {"io_wait", t_io},
                                      {"allreduce_overlapped", m_group->overlapped_reduce_seconds()}}},
                {"skipped_samples", m_loader->bad_samples()}, {"data", m_train->info().description},
                {"final", final_metrics}, {"model_checksum", r.model_checksum}, {"config", m_origin}};
  }

  // The job.
  const Config& m_cfg;
  const std::string& m_origin;
  const RunOptions& m_options;
  const Clock::time_point m_start;
  const mpi::Topology m_topo;
  const mpi::Communicator& m_world;
  const int m_rank, m_ranks;
  const bool m_root;
  const Algorithm m_algorithm;
  int m_fail_rank = -1;
  int64_t m_fail_step = 0;  // SQUALL_FAIL_AT

  // The data and the plan (steps change when the auto-tuner changes the learner count).
  std::unique_ptr<DataSource> m_train, m_test;
  int64_t m_n_train = 0, m_n_test = 0, m_batch = 0;
  int m_learners = 1, m_max_learners = 1;
  std::unique_ptr<io::Sampler> m_sampler;
  int64_t m_batches_per_epoch = 0, m_steps_per_epoch = 0, m_total_steps = 0, m_epochs = 0;
  int64_t m_planned_steps = 0, m_planned_step_samples = 1;  // the schedule's frame: the initial plan

  // The model and what trains it.
  nn::ModelSpec m_spec;
  std::unique_ptr<nn::Backend> m_backend;
  std::unique_ptr<nn::Stream> m_stream;
  std::unique_ptr<mpi::HierAllreduce> m_allreduce;
  std::unique_ptr<AllreduceReducer> m_reducer;
  std::unique_ptr<mpi::DeviceAllreduce> m_device_allreduce;  // parallel.device_allreduce (CUDA)
  std::unique_ptr<DeviceReducer> m_device_reducer;
  SingleRankReducer m_alone;
  std::unique_ptr<LearnerGroup> m_group;
  std::unique_ptr<Schedule> m_schedule;
  nn::Buffer m_label_buf, m_pred_buf, m_weight_buf;
  int32_t* m_dev_labels = nullptr;
  int32_t* m_dev_pred = nullptr;
  const float* m_dev_weights = nullptr;
  std::unique_ptr<io::Loader> m_loader;

  // The outputs.
  Timeline m_timeline;
  fs::path m_dir;
  std::unique_ptr<MetricsLog> m_metrics;
  std::unique_ptr<Progress> m_progress;
  std::unique_ptr<AutoTuner> m_tuner;

  // The loop's state.
  std::vector<const io::Batch*> m_held;
  std::vector<LearnerBatch> m_inputs;
  Clock::time_point m_loop_start;
  int64_t m_step = 0, m_samples_done = 0;
  RunningMean m_window_loss;
  double m_last_train_loss = 0, m_last_eval_loss = 0, m_eval_total_s = 0, m_loop_s = 0;
  EvalPart m_last_eval{ConfusionMatrix(1)};
};

}  // namespace

TrainResult run_training(const Config& cfg, const std::string& origin, const RunOptions& options) {
  return TrainingRun(cfg, origin, options).run();
}

}  // namespace squall::train
