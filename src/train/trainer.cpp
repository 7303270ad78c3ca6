#include "src/train/trainer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "io/loader.hpp"
#include "io/png.hpp"
#include "io/sampler.hpp"
#include "mpi/agreement.hpp"
#include "mpi/make_allreduce.hpp"
#include "mpi/topology.hpp"
#include "src/core/durable.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/cpu/cpu_async_backend.hpp"
#include "src/cpu/cpu_info.hpp"
#include "src/nn/graph.hpp"
#include "src/train/augment.hpp"
#include "src/train/autotune.hpp"
#include "src/train/checkpoint.hpp"
#include "src/train/eval_checkpoint.hpp"
#include "src/train/datasets.hpp"
#include "src/train/evaluate.hpp"
#include "src/train/learners.hpp"
#include "src/train/metrics.hpp"
#include "src/train/model_spec.hpp"
#include "src/train/optimizer.hpp"
#include "src/train/predictions.hpp"
#include "src/train/progress.hpp"
#include "src/train/run_dir.hpp"
#include "src/train/schedule.hpp"
#include "src/train/stop_signal.hpp"
#include "src/train/timeline.hpp"

namespace squall::train {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// `fixed`: the training set's normalisation, for the test set (null for the training set).
// `raw`: unnormalised and uncached, only to look at its shape and classes.
std::unique_ptr<DataSource> open_source(const DataConfig& d, const std::string& split, const std::string& key,
                                        const data::Normalization* fixed = nullptr, bool raw = false) {
  const std::string& path = split == "train" ? d.train : d.test;
  try {
    if (raw) return open_dataset(path, split, false, d.normalization, 0, nullptr, d.netcdf_variables, d.netcdf_labels);
    return open_dataset(path, split, d.normalize, d.normalization, d.cache_mb, fixed, d.netcdf_variables,
                        d.netcdf_labels);
  } catch (const BadSample&) {
    throw;
  } catch (const Error& e) {
    throw Error("data." + key + ": " + e.what());
  }
}

// Appends one JSON object per line, each with one write(2), so a crashed run keeps what it
// logged and a full disk is an error naming the file, not a silent gap.
class MetricsLog {
 public:
  MetricsLog(const fs::path& path, bool append) : m_path(path) {
    m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (m_fd < 0) throw Error(path.string() + ": cannot open: " + errno_text());
  }
  ~MetricsLog() { ::close(m_fd); }
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const json& j) {
    write_all(m_fd, j.dump() + "\n", m_path);
    ++m_lines;
  }
  int64_t lines() const { return m_lines; }
  void set_lines(int64_t n) { m_lines = n; }

 private:
  fs::path m_path;
  int m_fd = -1;
  int64_t m_lines = 0;
};

// The [model] section of a config's TOML text (to_toml writes one table per section).
std::string model_section(const std::string& toml) {
  const size_t begin = toml.find("[model]");
  if (begin == std::string::npos) return {};
  const size_t end = toml.find("\n[", begin);
  return toml.substr(begin, end == std::string::npos ? std::string::npos : end + 1 - begin);
}

json normalization_json(const data::Normalization& n) {
  return {{"kind", n.kind}, {"mean", n.mean}, {"std", n.std}, {"input_scale", n.input_scale}, {"source", n.source}};
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

// SQUALL_FAIL_AT=RANK:STEP[:kill]: that rank fails at that step (fault tests): with an error,
// or killed by SIGKILL (what a crashed node looks like to the others). Rank -1 when unset.
struct FailAt {
  int rank = -1;
  int64_t step = 0;
  bool kill = false;
};

FailAt fail_at_from_env() {
  const char* env = std::getenv("SQUALL_FAIL_AT");
  if (env == nullptr || *env == '\0') return {};
  int rank = -1;
  long long step = -1;
  char mode[8] = {};
  const int got = std::sscanf(env, "%d:%lld:%7s", &rank, &step, mode);
  const std::string m(mode);
  if (got < 2 || rank < 0 || step < 1 || (got == 3 && m != "kill"))
    throw UsageError(std::string("SQUALL_FAIL_AT must be RANK:STEP or RANK:STEP:kill (a rank >= 0 and a step >= 1), got '") +
                     env + "'");
  return {rank, static_cast<int64_t>(step), m == "kill"};
}

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
    install_stop_handlers();
  }

  TrainResult run() {
    // A failure that only some ranks meet before training (a data folder missing on one node,
    // a run dir another node cannot write) ends every rank alike: each stage that may fail
    // locally runs under run_agreed, which leaves nobody waiting in a collective.
    m_node_of_rank = m_world.allgather(m_topo.node());
    mpi::run_agreed(m_world, [&] { plan(); });
    build();
    mpi::run_agreed(m_world, [&] { prepare_run_dir(); });
    resume();
    if (m_step >= m_total_steps) return already_complete();
    open_outputs();
    train();
    if (m_stop_flags != 0) return stopped();
    if (m_cfg.checkpoint.at_end && m_last_checkpoint_step != m_step) write_checkpoint();
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
    m_fail = fail_at_from_env();
    m_train = open_source(cfg.data, "train", "train");
    // The test set's shape and classes are checked against the training set's first, then it
    // is opened again normalised with the training set's statistics (docs/training.md,
    // "Normalisation").
    m_test = open_source(cfg.data, "test", "test", nullptr, true);
    check_model_and_data();
    m_test = open_source(cfg.data, "test", "test", &m_train->normalization());
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
    m_sampler = std::make_unique<io::Sampler>(io::parse_sampling(cfg.data.sampling), offsets,
                                              io::node_sizes_from(m_node_of_rank), static_cast<uint64_t>(cfg.run.seed));
    m_batches_per_epoch = m_sampler->steps_per_epoch(m_batch);
    if (m_batches_per_epoch < m_learners)  // the config and the job's shape: the user's to fix (exit 2)
      throw UsageError(m_origin + ": one step takes train.batch_size x replicas x ranks = " + std::to_string(m_batch) +
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

  // The model against the data, before anything is built: shapes and class counts that do not
  // match would otherwise fail at the first step, or at the first evaluation an epoch later.
  void check_model_and_data() {
    const Config& cfg = m_cfg;
    const DatasetInfo& info = m_train->info();
    const DatasetInfo& test = m_test->info();
    if (!(test.sample == info.sample) || test.classes != info.classes || test.per_pixel_labels != info.per_pixel_labels)
      throw UsageError(m_origin + ": data.test (" + cfg.data.test + ": " + test.description + ", " +
                       std::to_string(test.classes) + " classes) does not match data.train (" + cfg.data.train + ": " +
                       info.description + ", " + std::to_string(info.classes) + " classes)");
    m_spec = model_spec(cfg, info);
    if (const std::string why = model_data_mismatch(cfg, info); !why.empty())
      throw UsageError(m_origin + ": " + why + " (data.train = " + cfg.data.train + ")");
    try {
      (void)nn::make_model(m_spec, info.sample);  // an unknown model, or an input it cannot take
    } catch (const Error& e) {
      throw UsageError(m_origin + ": " + e.what());
    }
  }

  // ---- the model, the backend, the learners and the loader ----
  void build() {
    const Config& cfg = m_cfg;
    const DatasetInfo& info = m_train->info();
    // Ranks on one machine share its cores (unless the launcher pinned them), and a rank's
    // place among them picks its GPU (run.backend = cuda/auto).
    m_backend = nn::make_backend(cfg.run.backend, m_topo.host_rank(),
                                 cfg.run.threads > 0 ? static_cast<int>(cfg.run.threads)
                                                     : cpu::default_threads(m_topo.host_ranks()),
                                 cfg.run.cpu_streams);
    m_stream = m_backend->create_stream();
    const nn::ModelSpec spec = m_spec;
    const nn::Shape sample = info.sample;
    auto make_graph = [spec, sample] { return nn::make_model(spec, sample); };

    mpi::AllreduceOptions ar_options;
    ar_options.stall_warn_s = m_options.stall_warn_s;
    ar_options.stall_abort_s = m_options.stall_abort_s;
    // parallel.device_allreduce: a CUDA job of several ranks may sum on the GPUs instead of
    // through pinned host memory (docs/allreduce.md, "On device buffers").
    if (cfg.parallel.device_allreduce != "host" && m_ranks > 1 && m_backend->name() != "cuda")
      throw UsageError(m_origin + ": parallel.device_allreduce = " + cfg.parallel.device_allreduce +
                       " sums GPU memory, but this job trains on the " + m_backend->name() +
                       " backend (set run.backend = cuda, or parallel.device_allreduce = host)");
    m_allreduce = mpi::make_allreduce(cfg.parallel.device_allreduce, m_topo, m_backend->device().index, ar_options);
    if (cfg.parallel.comm_precision == "bf16" && !m_allreduce->takes(mpi::DType::bf16))
      throw UsageError(m_origin + ": parallel.comm_precision = bf16 needs parallel.device_allreduce = host (the " +
                       m_allreduce->mode() + " allreduce sums f32 only)");

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
    m_bucket_mb = bucket_mb_for(cfg.parallel, !m_backend->host_accessible());
    lg.bucket_floats = std::max<size_t>(1, static_cast<size_t>(m_bucket_mb * double(1 << 20) / sizeof(float)));
    lg.seed = static_cast<uint64_t>(cfg.run.seed);
    lg.precision = precision_dtype(cfg.train.precision);
    lg.layout = resolve_layout(cfg.model.layout, m_backend->name(), lg.precision);
    lg.bf16_gradients = cfg.parallel.comm_precision == "bf16";
    lg.skip_nonfinite = cfg.train.nonfinite == "skip";
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
        *m_allreduce);
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
    // A device backend, or asynchronous CPU streams, copy the batches from pinned host
    // memory: the copy then runs on the learner's stream, ordered like any other work, and
    // the host does not wait for it (a copy from pageable memory makes the host wait).
    const bool pinned = !m_backend->host_accessible() || cfg.run.cpu_streams == "async";
    if (pinned) {
      loader_options.host_alloc = [this](size_t bytes) {
        nn::Buffer b = m_backend->allocate_host((bytes + sizeof(float) - 1) / sizeof(float), nn::DType::f32);
        void* p = b.raw();
        m_pinned_batches.emplace(p, std::move(b));
        return p;
      };
      loader_options.host_free = [this](void* p) { m_pinned_batches.erase(p); };
    }
    if (!m_backend->host_accessible()) {
      // The next step's batches are taken from the loader before this step runs, so that
      // the learners copy them to the device while this step computes (LearnerGroup::step's
      // `next`): the loader must let a step's batches and the next step's be held at once.
      // Not with the auto-tuner, which changes the learner count between steps.
      m_lookahead = !cfg.parallel.autotune;
      if (m_lookahead) loader_options.prefetch = std::max(loader_options.prefetch, 2 * m_max_learners);
    }
    m_loader = std::make_unique<io::Loader>(*m_train, loader_options);
    m_augment = make_sphere_augment(cfg.data.augment_roll, cfg.data.augment_flip, info, m_train->normalization());
    m_last_eval.cm = ConfusionMatrix(info.classes);
    m_tuner = std::make_unique<AutoTuner>(cfg.parallel.autotune, cfg.parallel.autotune_threshold, m_max_learners,
                                          std::max<int64_t>(10, m_steps_per_epoch / 20));
  }

  // ---- the timeline, the run directory, the opening lines ----
  void open_outputs() {
    m_world.barrier();
    m_timeline.set_origin(now_s());
    if (m_timeline.enabled()) {
      m_group->set_phase_hook([this](const char* phase, int learner, double t0, double t1) {
        m_timeline.add(phase, learner < 0 ? Timeline::k_rank_track : Timeline::learner_track(learner), t0, t1);
      });
      m_allreduce->set_level_hook([this](mpi::Level level, double t0, double t1, size_t) {
        switch (level) {
          case mpi::Level::node_reduce_scatter:
            m_timeline.add("node reduce-scatter", Timeline::k_allreduce_track + 1, t0, t1);
            break;
          case mpi::Level::cross_allreduce:
            m_timeline.add("cross-node allreduce", Timeline::k_allreduce_track + 2, t0, t1);
            break;
          case mpi::Level::node_allgather:
            m_timeline.add("node allgather", Timeline::k_allreduce_track + 3, t0, t1);
            break;
          case mpi::Level::flat_allreduce:
            m_timeline.add(mpi::level_name(level), Timeline::k_allreduce_track, t0, t1);
            break;
        }
      });
    }
    // Rank 0 writes the run directory (prepare_run_dir made it); no other rank needs it.
    if (m_root) {
      write_file_atomic(m_dir / "config.toml", to_toml(m_cfg));
      const fs::path metrics = m_dir / "metrics.jsonl";
      // Resuming: the records written after the checkpoint are written again from here.
      if (m_resumed_from) keep_first_lines(metrics, m_metrics_lines_at_resume);
      m_metrics = std::make_unique<MetricsLog>(metrics, m_resumed_from.has_value());
      m_metrics->set_lines(m_resumed_from ? m_metrics_lines_at_resume : 0);
      if (m_resumed_from)
        log_metrics({{"kind", "resume"}, {"step", m_step}, {"checkpoint", m_resumed_from->string()}});
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

  // ---- the run directory and resuming (docs/training.md, "Checkpoints and restart") ----
  // Rank 0 makes the run dir and checks it can write there; an earlier run's outputs are never
  // overwritten silently: --resume continues it, --overwrite replaces it.
  void prepare_run_dir() {
    m_dir = fs::path(m_cfg.run.dir);
    if (!m_root) return;
    ensure_writable_dir(m_dir);
    const std::vector<std::string> found = run_outputs(m_dir);
    if (found.empty() || !m_options.resume.empty()) return;  // resume() decides
    if (!m_options.overwrite) {
      std::string list;
      for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
      throw UsageError("run.dir = '" + m_cfg.run.dir + "' already holds a run (" + list +
                       "): continue it with --resume auto, replace it with --overwrite, or choose another run.dir");
    }
    remove_run_outputs(m_dir);
    log::info("--overwrite: removed the earlier run's outputs from " + m_cfg.run.dir);
  }

  void resume() {
    m_store = std::make_unique<CheckpointStore>(m_dir, m_world, m_cfg.checkpoint.keep);
    if (m_options.resume.empty()) return;
    std::optional<LoadedCheckpoint> ck =
        m_options.resume == "auto" ? m_store->load_newest() : m_store->load(fs::path(m_options.resume));
    if (!ck) {
      // Nothing to continue (the first attempt of a job that requeues itself): a fresh start.
      mpi::run_agreed(m_world, [&] {
        if (m_root && !run_outputs(m_dir).empty()) remove_run_outputs(m_dir);
      });
      log::info("--resume auto: no checkpoint in " + (m_dir / "checkpoints").string() + ": starting from step 0");
      return;
    }
    mpi::run_agreed(m_world, [&] { check_resumable(*ck); });
    restore(*ck);
    log::info("resuming from " + ck->path.string() + ": step " + std::to_string(m_step) + " of " +
              std::to_string(m_total_steps) + ", epoch " + std::to_string(m_first_epoch));
  }

  // A checkpoint of another job is refused, naming what differs; keys that may change between
  // attempts (the learning rate, the epochs, the data's paths) are listed and accepted.
  void check_resumable(const LoadedCheckpoint& ck) const {
    const io::CheckpointData& d = ck.shared;
    const std::string where = ck.path.string();
    Config then;
    try {
      then = parse_config(d.text("config"), where + " (its config)");
    } catch (const Error& e) {
      throw Error(where + ": its config cannot be read: " + e.what());
    }
    std::vector<std::string> changed;
    const std::string refused = resume_incompatibility(m_cfg, then, changed);
    if (!refused.empty())
      throw UsageError(where + " is a checkpoint of another run: " + refused +
                       " (resume with the checkpoint's values, or train into a new run.dir)");
    if (d.integer("train_samples") != m_n_train)
      throw UsageError(where + " was trained on " + std::to_string(d.integer("train_samples")) +
                       " training samples; data.train (" + m_cfg.data.train + ") has " + std::to_string(m_n_train));
    if (d.integer("param_count") != static_cast<int64_t>(m_group->param_count()) ||
        d.integer("state_count") != static_cast<int64_t>(m_group->state_count()))
      throw UsageError(where + " holds a model of " + std::to_string(d.integer("param_count")) + " parameters; " +
                       m_spec.name + " here has " + std::to_string(m_group->param_count()));
    if (m_root && !changed.empty()) {
      std::string list;
      for (const auto& c : changed) list += (list.empty() ? "" : "; ") + c;
      log::info("resuming with changed keys: " + list);
    }
  }

  void restore(const LoadedCheckpoint& ck) {
    const io::CheckpointData& d = ck.shared;
    m_step = d.integer("step");
    m_first_epoch = m_epoch = d.integer("epoch");
    m_first_used = m_epoch_used = d.integer("epoch_batches");
    const auto learners = static_cast<int>(d.integer("learners"));
    if (learners != m_learners) {  // the auto-tuner had changed it
      while (m_group->learners() < learners) m_group->add_learner();
      while (m_group->learners() > learners) m_group->remove_learner();
      m_learners = learners;
      replan(m_first_epoch, m_first_used);
    }
    m_group->restore(d, ck.has_own ? &ck.own : nullptr);
    m_samples_done = m_samples_at_start = d.integer("samples_done");
    m_window_loss.restore(d.real("window_loss_sum"), d.real("window_loss_weight"));
    m_last_train_loss = d.real("last_train_loss");
    m_metrics_lines_at_resume = d.integer("metrics_lines");
    if (d.integer("tuner_done") != 0) m_tuner->stop();
    m_resumed_from = ck.path;
    m_last_checkpoint = ck.path;
    m_last_checkpoint_step = m_step;
  }

  // The steps after (epoch, used) for the current learner count (the auto-tuner changed it).
  void replan(int64_t epoch, int64_t used) {
    m_steps_per_epoch = m_batches_per_epoch / m_learners;
    const int64_t rest_of_epoch = (m_batches_per_epoch - used) / m_learners;
    if (m_cfg.train.max_steps == 0)
      m_total_steps = m_step + rest_of_epoch + (m_epochs - epoch) * m_steps_per_epoch;
    else
      m_epochs = epoch + (std::max<int64_t>(0, m_total_steps - m_step - rest_of_epoch) + m_steps_per_epoch - 1) /
                             m_steps_per_epoch;
  }

  // --resume of a run that had finished: nothing to train.
  TrainResult already_complete() {
    log::info("the run is complete: " + m_resumed_from.value_or(fs::path()).string() + " is at step " +
              std::to_string(m_step) + " of " + std::to_string(m_total_steps) +
              "; nothing to do (raise train.epochs or train.max_steps to train further)");
    TrainResult r;
    r.steps = m_step;
    r.model_checksum = central_checksum();
    r.checkpoint = m_last_checkpoint.string();
    return r;
  }

  // A stop signal: the checkpoint is written; the job script requeues with --resume auto.
  TrainResult stopped() {
    const int sig = (m_stop_flags & k_flag_sigterm) != 0 ? SIGTERM : SIGUSR1;
    log::info(std::string("stopped by ") + signal_name(sig) + " after step " + std::to_string(m_step) + " of " +
              std::to_string(m_total_steps) + ": checkpoint " + m_last_checkpoint.string() + "; exit " +
              std::to_string(k_exit_requeue) + ": requeue the job with --resume auto");
    TrainResult r;
    r.steps = m_step;
    r.stopped = true;
    r.stop_signal = sig;
    r.checkpoint = m_last_checkpoint.string();
    return r;
  }

  // train.nonfinite = stop: the step, the rank, the learner and the layer, then the job ends.
  [[noreturn]] void diverged(const NonFiniteStep& e, int64_t epoch, double lr) {
    char where[160];
    std::snprintf(where, sizeof(where), " (epoch %lld, learning rate %g)", static_cast<long long>(epoch), lr);
    if (!e.job_wide())  // only this rank knows: it ends the job (MPI_Abort at the top)
      throw Error("training diverged: " + std::string(e.what()) + where + "; " + divergence_hint());
    // Every rank found the same non-finite sum at this step: gather who produced it.
    const std::vector<std::string> culprits = m_world.gather_strings(e.culprit());
    std::string text;
    for (const auto& c : culprits)
      if (!c.empty()) text += (text.empty() ? "" : "; ") + c;
    text = m_world.broadcast_string(text);
    throw CollectiveError("training diverged: " + std::string(e.what()) + where + ": " +
                              (text.empty() ? "no learner's gradients were non-finite before the sum" : text) +
                              "; " + divergence_hint() + " (or train.nonfinite = skip to drop such steps)",
                          k_exit_failure);
  }

  // The central model's FNV-1a checksum (parameters then state), the same on every rank.
  std::string central_checksum() {
    std::vector<float> host(m_group->param_count() + m_group->state_count());
    m_backend->copy_to_host(*m_stream, host.data(), m_group->central_params(), m_group->param_count());
    m_backend->copy_to_host(*m_stream, host.data() + m_group->param_count(), m_group->central_state(),
                            m_group->state_count());
    m_backend->synchronize(*m_stream);
    return fnv1a_hex(host.data(), host.size() * sizeof(float));
  }

  // ---- the epochs ----
  void train() {
    m_progress = std::make_unique<Progress>(m_root && isatty(STDOUT_FILENO) != 0, m_cfg.train.log_every_steps);
    m_flags = std::make_unique<mpi::FlagAgreement>(m_world);
    m_last_time_checkpoint = Clock::now();
    m_loop_start = Clock::now();
    for (int64_t epoch = m_first_epoch; epoch <= m_epochs && m_step < m_total_steps; ++epoch) {
      std::vector<int64_t> indices =
          m_sampler->indices(m_cfg.data.shuffle ? epoch : 0, m_topo.node(), m_topo.local_rank());
      // A resumed run starts inside its checkpoint's epoch, at the batch after the checkpoint.
      const int64_t skip = epoch == m_first_epoch ? m_first_used : 0;
      int64_t used = skip;  // batches of this epoch handed to the learners
      if (m_batches_per_epoch - skip >= m_learners) {
        indices.erase(indices.begin(), indices.begin() + std::min<int64_t>(skip * m_batch, std::ssize(indices)));
        m_loader->start_epoch(std::move(indices), m_batches_per_epoch - skip);
      }
      while (used + m_learners <= m_batches_per_epoch && m_step < m_total_steps) {
        used += m_learners;
        train_step(epoch, used);
        if (m_cfg.train.eval_every_steps > 0 && m_step % m_cfg.train.eval_every_steps == 0 &&
            m_step != m_total_steps)
          evaluate(epoch);
        m_epoch = epoch;
        m_epoch_used = used;
        if (after_step()) break;
      }
      if (m_stop_flags != 0) break;
      if (m_cfg.train.eval_every_steps == 0 || m_step == m_total_steps) evaluate(epoch);
    }
    // A run stopped by a signal may hold the batches of a step it did not take.
    for (const io::Batch* b : m_next_held) m_loader->release(b);
    m_next_held.clear();
    m_next_inputs.clear();
    m_progress->finish();
    m_loop_s = seconds_since(m_loop_start);
  }

  // After each step the job agrees, one step late and without waiting (mpi/agreement.hpp), on
  // whether any rank received a stop signal and whether rank 0's clock says a timed
  // checkpoint is due; checkpoints by step count need no agreement. Writes the checkpoint when
  // one is due; returns true when the run must stop.
  bool after_step() {
    uint64_t mine = 0;
    if (const int sig = stop_signal(); sig != 0) mine |= sig == SIGUSR1 ? k_flag_sigusr1 : k_flag_sigterm;
    const double every_s = m_cfg.checkpoint.every_minutes * 60.0;
    if (m_root && every_s > 0 && seconds_since(m_last_time_checkpoint) >= every_s) {
      mine |= k_flag_timed;
      m_last_time_checkpoint = Clock::now();
    }
    const uint64_t agreed = m_flags->exchange(mine);
    // A signal after the last step changes nothing: the run ends, with its final checkpoint.
    const bool stop = (agreed & (k_flag_sigterm | k_flag_sigusr1)) != 0 && m_step < m_total_steps;
    const int64_t every = m_cfg.checkpoint.every_steps;
    const bool due = stop || (agreed & k_flag_timed) != 0 || (every > 0 && m_step % every == 0);
    const bool left_to_the_end = m_step == m_total_steps && m_cfg.checkpoint.at_end;
    if (due && !left_to_the_end) write_checkpoint();
    if (stop) m_stop_flags = agreed;
    return stop;
  }

  // The job's state at the end of step m_step, in <run dir>/checkpoints (checkpoint.hpp).
  void write_checkpoint() {
    const auto t0 = Clock::now();
    const double ts = now_s();
    io::CheckpointData shared, own;
    const bool per_rank = m_group->replicas_differ();
    if (m_root) {
      m_group->save_shared(shared);
      shared.ints["step"] = m_step;
      shared.ints["epoch"] = m_epoch;
      shared.ints["epoch_batches"] = m_epoch_used;
      shared.ints["samples_done"] = m_samples_done;
      shared.ints["world_size"] = m_ranks;
      shared.ints["per_rank_parts"] = per_rank ? 1 : 0;
      shared.ints["metrics_lines"] = m_metrics ? m_metrics->lines() : 0;
      shared.ints["train_samples"] = m_n_train;
      shared.ints["param_count"] = static_cast<int64_t>(m_group->param_count());
      shared.ints["state_count"] = static_cast<int64_t>(m_group->state_count());
      shared.ints["tuner_done"] = m_tuner->active() ? 0 : 1;
      shared.reals["window_loss_sum"] = m_window_loss.sum();
      shared.reals["window_loss_weight"] = m_window_loss.weight();
      shared.reals["last_train_loss"] = m_last_train_loss;
      shared.texts["config"] = to_toml(m_cfg);
      shared.texts["config_origin"] = m_origin;
      shared.texts["model"] = m_spec.name;
      shared.texts["algorithm"] = algorithm_name(m_algorithm);
      // The same central model by name, with what it needs to be used elsewhere.
      add_model_entries(shared, m_group->replica_graph(0), shared.arrays.at("central/params"),
                        shared.arrays.at("central/state"), m_spec, model_section(to_toml(m_cfg)), m_train->info(),
                        m_train->normalization());
    }
    if (per_rank) m_group->save_own(own);
    const fs::path path = m_store->save(m_step, shared, per_rank ? &own : nullptr);
    m_last_checkpoint_step = m_step;
    m_last_checkpoint = path;
    const double secs = seconds_since(t0);
    m_timeline.add("checkpoint", Timeline::k_rank_track, ts, now_s());
    log_metrics({{"kind", "checkpoint"}, {"step", m_step}, {"path", path.string()}, {"seconds", secs}});
    m_progress->finish();
    char line[160];
    std::snprintf(line, sizeof(line), "checkpoint step %lld: ", static_cast<long long>(m_step));
    log::info(line + path.string() + " (" + std::to_string(static_cast<int>(secs * 1000)) + " ms)");
  }

  // One step: a batch for every learner, the group's step, the logs, the auto-tuner.
  // `used`: the epoch's batches taken so far, this step's included.
  void train_step(int64_t epoch, int64_t used) {
    const double t_load = now_s();
    // `taken`: batches of the epoch taken from the loader before the ones asked for now.
    // `step`: the step the batches are for (data.augment_*: each sample's draw depends on it).
    auto take = [&](std::vector<const io::Batch*>& held, std::vector<LearnerBatch>& inputs, int64_t taken,
                    int64_t step) {
      held.clear();
      inputs.clear();
      for (int j = 0; j < m_learners; ++j) {
        const io::Batch* data = m_loader->next();
        if (data == nullptr)
          throw Error("loader: epoch " + std::to_string(epoch) + " ended after " + std::to_string(taken + j) +
                      " of " + std::to_string(m_batches_per_epoch) + " batches");
        if (m_augment.any()) {
          const nn::Shape& x = m_train->info().sample;
          augment_batch(m_augment, data->images, data->labels, data->size, x.c(), x.h(), x.w(),
                        static_cast<uint64_t>(m_cfg.run.seed), m_rank, j, step);
        }
        held.push_back(data);
        inputs.push_back({data->images, data->labels});
      }
    };
    if (!m_next_held.empty()) {  // taken during the step before
      std::swap(m_held, m_next_held);
      std::swap(m_inputs, m_next_inputs);
      m_next_held.clear();
      m_next_inputs.clear();
    } else {
      take(m_held, m_inputs, used - m_learners, m_step);
    }
    // The next step's batches, within this epoch, for the device to copy during this step.
    const bool ahead = m_lookahead && used + m_learners <= m_batches_per_epoch && m_step + 1 < m_total_steps;
    if (ahead) take(m_next_held, m_next_inputs, used, m_step + 1);
    m_timeline.add("load", Timeline::k_rank_track, t_load, now_s());
    if (m_rank == m_fail.rank && m_step + 1 == m_fail.step) {
      if (m_fail.kill) ::raise(SIGKILL);
      throw Error("SQUALL_FAIL_AT: rank " + std::to_string(m_rank) + " fails at step " + std::to_string(m_fail.step) +
                  " on purpose");
    }

    // The schedule follows the samples trained on, counted in steps of the initial learner
    // count, so that the auto-tuner's changes keep warm-up, milestones and the cosine in place.
    const double lr = m_schedule->lr_at(std::min(m_samples_done / m_planned_step_samples, m_planned_steps - 1),
                                        m_planned_steps);
    const auto t_step = Clock::now();
    std::vector<float> losses;
    try {
      losses = m_group->step(m_inputs, m_step, static_cast<float>(lr), ahead ? &m_next_inputs : nullptr);
      ++m_group_steps;
    } catch (const NonFiniteStep& e) {
      m_progress->finish();
      diverged(e, epoch, lr);
    }
    for (const io::Batch* b : m_held) m_loader->release(b);
    // train.nonfinite = skip: a learner whose loss was not finite took no update (the group
    // skipped it); its loss stays out of the mean. stop: the group has thrown above.
    double loss = 0;
    int finite = 0;
    for (float l : losses)
      if (std::isfinite(l)) loss += l, ++finite;
    if (finite == 0 && !(m_cfg.train.nonfinite == "skip"))
      throw Error("training diverged: the loss is not finite at step " + std::to_string(m_step + 1) + " (rank " +
                  std::to_string(m_rank) + ")");
    loss /= std::max(1, finite);
    ++m_step;
    const int64_t step_samples = m_batch * m_learners * m_ranks;
    m_samples_done += step_samples;

    if (finite > 0) m_window_loss.add(loss);
    const double elapsed = seconds_since(m_loop_start);
    const double rate = static_cast<double>(m_samples_done - m_samples_at_start) / std::max(elapsed, 1e-9);
    if (m_root)
      m_progress->update({m_step, m_total_steps, static_cast<int>(epoch), static_cast<int>(m_epochs),
                          m_window_loss.mean(), rate, elapsed});
    if (m_step % m_cfg.train.log_every_steps == 0 || m_step == m_total_steps) {
      m_last_train_loss = m_window_loss.mean();
      json record{{"kind", "train"}, {"step", m_step}, {"epoch", epoch}, {"loss", m_last_train_loss}, {"lr", lr},
                  {"learners", m_learners}, {"samples_per_s", rate}};
      if (m_group->options().loss_scaling.dynamic) record["loss_scale"] = m_group->loss_scale();
      if (m_group->options().loss_scaling.dynamic || m_group->options().skip_nonfinite)
        record["skipped_steps"] = m_group->skipped_steps();
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
    replan(epoch, used);
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
    m_last_eval = evaluate_range(g, *m_backend, *m_stream, *m_test, begin, end, m_dev_labels, m_dev_pred, m_dev_weights,
                                 pictures.empty() ? nullptr : &pictures);
    if (!pictures.empty()) write_pictures(pictures, epoch);
    sum_over_ranks(m_last_eval, m_world);
    m_last_eval_loss = m_last_eval.loss();
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
    TrainResult r;
    r.model_checksum = central_checksum();
    r.checkpoint = m_last_checkpoint.string();
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
      if (m_root) write_file_atomic(m_dir / "timeline.json", Timeline::document(parts));
    }

    const double t_compute = m_group->compute_seconds(), t_reduce = m_group->reduce_seconds();
    r.steps = m_step;
    r.train_loss = m_last_train_loss;
    r.test_accuracy = m_last_eval.cm.accuracy();
    r.test_loss = m_last_eval_loss;
    r.wall_s = seconds_since(m_start);
    r.samples_per_s = static_cast<double>(m_samples_done - m_samples_at_start) / std::max(m_loop_s, 1e-9);
    if (m_root) write_file_atomic(m_dir / "summary.json", summary(r, t_compute, t_reduce, t_io).dump(2) + "\n");

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
    // The host's waits for the device inside a step (docs/design.md, "One host wait per step").
    parallel["host_waits_per_step"] =
        static_cast<double>(m_group->host_waits()) / static_cast<double>(std::max<int64_t>(1, m_group_steps));
    if (m_algorithm != Algorithm::sma && m_ranks > 1) {
      parallel["bucket_mb"] = m_bucket_mb;
      parallel["buckets"] = m_group->buckets();
      parallel["max_buckets_in_flight"] = m_group->max_buckets_in_flight();
    }
    if (m_group->options().graphs) parallel["captured_learners"] = m_group->captured_learners();
    if (m_allreduce->memory() == mpi::Memory::device) parallel["device_allreduce"] = m_allreduce->mode();
    parallel["comm_precision"] = m_cfg.parallel.comm_precision;
    if (m_cfg.parallel.autotune) parallel["autotune"] = m_tuner->decisions();
    json out{{"world_size", m_ranks}, {"nodes", m_topo.nodes()}, {"devices_per_rank", 1},
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
                {"normalization", normalization_json(m_train->normalization())},
                {"final", final_metrics}, {"model_checksum", r.model_checksum}, {"config", m_origin}};
    // The CPU backend's streams as they ran (run.cpu_streams): a bare CpuBackend runs every
    // call inline; the async one queues them on a worker per stream, delayed at random by
    // SQUALL_CPU_STREAM_JITTER. Read from the backend, not the config, so that a test can
    // tell that a run really took the async path.
    if (m_backend->name() == "cpu") {
      const auto* async = dynamic_cast<const cpu::AsyncCpuBackend*>(m_backend.get());
      const bool is_async = async != nullptr && async->is_async();
      out["cpu_streams"] = is_async ? "async" : "inline";
      if (is_async) out["cpu_stream_jitter_us"] = async->jitter().max_us;
    }
    return out;
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
  FailAt m_fail;  // SQUALL_FAIL_AT

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
  // The job's sums (parallel.device_allreduce; one rank: none to do), made by make_allreduce.
  std::unique_ptr<mpi::Allreduce> m_allreduce;
  double m_bucket_mb = 0;  // parallel.bucket_mb as used (bucket_mb_for)
  std::unique_ptr<LearnerGroup> m_group;
  std::unique_ptr<Schedule> m_schedule;
  nn::Buffer m_label_buf, m_pred_buf, m_weight_buf;
  int32_t* m_dev_labels = nullptr;
  int32_t* m_dev_pred = nullptr;
  const float* m_dev_weights = nullptr;
  // A device backend's loader fills pinned buffers of its own (allocate_host), so that the
  // learners copy batches to the device asynchronously without an extra host copy; the
  // buffers live here, by address, as long as the loader.
  std::map<void*, nn::Buffer> m_pinned_batches;
  SphereAugment m_augment;  // data.augment_roll / augment_flip (off: nothing)
  std::unique_ptr<io::Loader> m_loader;

  // The outputs.
  Timeline m_timeline;
  fs::path m_dir;
  std::unique_ptr<MetricsLog> m_metrics;
  std::unique_ptr<Progress> m_progress;
  std::unique_ptr<AutoTuner> m_tuner;

  // Checkpoints, resuming and stopping.
  std::vector<int> m_node_of_rank;                // every rank's node, for the sampler
  std::unique_ptr<CheckpointStore> m_store;
  std::unique_ptr<mpi::FlagAgreement> m_flags;    // stop signals and timed checkpoints, agreed per step
  static constexpr uint64_t k_flag_sigterm = 1, k_flag_sigusr1 = 2, k_flag_timed = 4;
  uint64_t m_stop_flags = 0;                      // the agreed flags that stopped the run (0: running)
  Clock::time_point m_last_time_checkpoint;
  int64_t m_first_epoch = 1, m_first_used = 0;    // where training starts (a checkpoint's position)
  int64_t m_epoch = 1, m_epoch_used = 0;          // where it is: the epoch, its batches used
  int64_t m_samples_at_start = 0, m_metrics_lines_at_resume = 0, m_last_checkpoint_step = -1;
  std::optional<fs::path> m_resumed_from;
  fs::path m_last_checkpoint;

  // The loop's state.
  std::vector<const io::Batch*> m_held, m_next_held;  // this step's batches, and the next step's (m_lookahead)
  std::vector<LearnerBatch> m_inputs, m_next_inputs;
  bool m_lookahead = false;  // a device backend: the next step's batches copied during this step
  Clock::time_point m_loop_start;
  int64_t m_step = 0, m_samples_done = 0;
  int64_t m_group_steps = 0;  // steps this process ran (a resumed run starts past 0)
  RunningMean m_window_loss;
  double m_last_train_loss = 0, m_last_eval_loss = 0, m_eval_total_s = 0, m_loop_s = 0;
  EvalPart m_last_eval{ConfusionMatrix(1)};
};

}  // namespace

TrainResult run_training(const Config& cfg, const std::string& origin, const RunOptions& options) {
  return TrainingRun(cfg, origin, options).run();
}

}  // namespace squall::train
