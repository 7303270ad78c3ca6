// The two ends of a training run: what it is, said when it starts, and how it ended (the
// same central model on every rank, the timeline, the summary).
#include <csignal>
#include <cstdio>

#include "io/input/stage.hpp"
#include "io/records/run_files.hpp"
#include "src/core/durable.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/train/stop_signal.hpp"
#include "src/train/training_run.hpp"

#include <span>

namespace squall::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json normalization_json(const data::Normalization& n) {
  return {{"kind", n.kind}, {"mean", n.mean}, {"std", n.std}, {"input_scale", n.input_scale}, {"source", n.source}};
}

// When `squall stage` copied the training set (io/input/stage.hpp's record beside the files), the
// staging's start and stop, in ms since the epoch. A record that cannot be read costs the
// MLPerf log its staging lines and a warning, not the run.
std::optional<std::pair<int64_t, int64_t>> staging_of(const std::string& data_dir) {
  try {
    const std::optional<input::StageRecord> r = input::read_stage_record(data_dir);
    if (!r) return std::nullopt;
    return std::make_pair(r->start_ms, r->stop_ms);
  } catch (const Error& e) {
    log::warn(std::string("the MLPerf log leaves the staging out: ") + e.what());
    return std::nullopt;
  }
}

}  // namespace

records::RunFacts TrainingRun::run_facts() const {
  const parallel::LearnerGroup& g = *m_device.group;
  const nn::Backend& be = *m_device.backend;
  records::RunFacts f;
  f.model = m_data.spec.name;
  f.parameters = static_cast<int64_t>(g.parameter_count());
  f.data = m_data.train->info().description;
  f.backend = be.name();
  f.device = be.info().name;
  f.device_index = be.info().index;
  f.ranks = m_ranks;
  f.nodes = m_topo.nodes();
  f.learners = g.learners();
  f.algorithm = parallel::algorithm_name(m_algorithm);
  if (m_algorithm == parallel::Algorithm::sma) {
    const parallel::SmaCoefficients c = g.sma();
    char line[256];
    std::snprintf(line, sizeof(line),
                  "sma: %d learner(s) in the job, each pulled by alpha %g towards the central model, which moves by "
                  "beta %g%s towards their mean with momentum %g",
                  g.learners() * m_spatial.ranks, c.alpha, c.beta,
                  m_cfg.parallel.centre_rate > 0 ? "" : " (min(alpha x learners, 1))", c.mu);
    f.sma_line = line;
  }
  if (m_spatial.split_sample())
    f.spatial_line = m_spatial.text() + "; halos " +
                     (m_device.halo_exchange == "nccl" ? std::string("in GPU memory over NCCL")
                                                       : "through host memory over MPI" +
                                                             (m_device.halo_why_host.empty()
                                                                  ? std::string()
                                                                  : " (" + m_device.halo_why_host + ")"));
  f.memory_line = "memory: " + m_device.memory.text() +
                  (m_device.memory_limit > 0
                       ? "; limit " + bytes_text(m_device.memory_limit) + " (" + m_device.memory_limit_from + ")"
                       : std::string());
  if (!m_device.cross_rule.empty()) f.cross_line = "allreduce: cross-node stage " + m_device.cross_rule;
  if (const config::SyncPeriods p = config::sync_periods(m_cfg.parallel); p.by_level())
    f.periods_line = parallel::algorithm_name(m_algorithm) + std::string(" by level, parallel.periods = ") +
                     config::periods_text(p) + ": each node's ranks average every " + std::to_string(p.inside) +
                     " step(s) among themselves, " + "the " + std::to_string(m_topo.nodes()) + " node(s) every " +
                     std::to_string(p.across);
  if (m_algorithm == parallel::Algorithm::outer) {
    const optim::OuterOptions& o = m_cfg.parallel.outer;
    const int64_t start = g.options().outer.start_step;
    char qsr[160] = "";
    if (o.qsr > 0)
      std::snprintf(qsr, sizeof(qsr), " (QSR: max(%lld, floor((%g / lr)^2)) as the learning rate decays%s)",
                    static_cast<long long>(o.period), o.qsr,
                    g.options().outer.warmup_steps > 0 ? ", after the warm-up" : "");
    char line[480];
    std::snprintf(line, sizeof(line),
                  "outer: ssgd inside each of the %d node(s) every step, an outer step across them every %lld "
                  "step(s)%s%s, outer lr %g, momentum %g (%s)%s",
                  m_topo.nodes(), static_cast<long long>(o.period), qsr,
                  start > 0 ? (" after every step before step " + std::to_string(start + 1)).c_str() : "", o.lr,
                  o.momentum, o.nesterov ? "Nesterov" : "heavy ball",
                  o.streaming ? "; streamed: each outer sum runs under the next inner step" : "");
    f.periods_line = line;
  }
  f.batch = m_cfg.train.batch_size;
  f.global_batch = step_samples();
  f.total_steps = m_data.plan.total_steps;
  f.steps_per_epoch = m_data.plan.steps_per_epoch;
  f.epochs = m_data.plan.epochs;
  f.train_samples = m_data.n_train;
  f.test_samples = m_data.n_test;
  f.optimizer = g.optimizer_name();
  f.precision = config::k_precisions.name(m_cfg.train.precision);
  f.run_dir = m_cfg.run.dir;
  f.base_lr = m_device.schedule->peak_lr();
  f.warmup_steps = m_cfg.schedule.warmup_steps;
  f.weight_decay = m_cfg.optimizer.weight_decay;
  f.seed = m_cfg.run.seed;
  if (m_resumed_from) f.resumed_from = m_resumed_from->string();
  f.shape_change = m_reshaped_from;
  f.first_step = m_pos.first_step;
  if (m_root && m_cfg.run.mllog) f.staging_ms = staging_of(m_cfg.data.train);
  f.init_start_s = m_init_start_s;
  return f;
}

// The central model's FNV-1a checksum (parameters then state, packed: of the model's values,
// not of the padding between them in memory), the same on every rank.
std::string TrainingRun::central_checksum() {
  parallel::LearnerGroup& g = *m_device.group;
  std::vector<float> params(g.param_arena_floats()), state(g.state_arena_floats());
  nn::Backend& be = *m_device.backend;
  be.copy_to_host(*m_device.stream, params.data(), g.central_params(), params.size());
  be.copy_to_host(*m_device.stream, state.data(), g.central_state(), state.size());
  be.synchronize(*m_device.stream);
  const nn::Graph& graph = g.replica_graph(0);
  std::vector<float> host = nn::pack_arena(params, graph.param_info());
  const std::vector<float> packed_state = nn::pack_arena(state, graph.state_info());
  host.insert(host.end(), packed_state.begin(), packed_state.end());
  return fnv1a_hex(host.data(), host.size() * sizeof(float));
}

// --resume of a run that had finished: nothing to train.
TrainResult TrainingRun::already_complete() {
  const std::string at = m_resumed_from.value_or(fs::path()).string();
  log::info("the run is complete: " + at + " is at step " + std::to_string(m_pos.step) + " of " +
            std::to_string(m_data.plan.total_steps) +
            (m_target ? ", where it reached train.target; nothing to do (raise train.target.value, or remove "
                                   "[train.target], to train further)"
                      : "; nothing to do (raise train.epochs or train.max_steps to train further: the steps "
                        "added run the schedule again, its warm-up and its decay, over themselves alone from step " +
                            std::to_string(m_pos.step) + ")"));
  TrainResult r;
  r.steps = m_pos.step;
  r.model_checksum = central_checksum();
  r.checkpoint = m_last_checkpoint.string();
  return r;
}

// A stop signal: the checkpoint is written; the job script requeues with --resume auto.
TrainResult TrainingRun::stopped() {
  const int sig = (m_stop_flags & k_flag_sigterm) != 0 ? SIGTERM : SIGUSR1;
  m_log->stopped(m_pos.step, m_data.plan.total_steps, signal_name(sig), m_last_checkpoint, k_exit_requeue);
  TrainResult r;
  r.steps = m_pos.step;
  r.stopped = true;
  r.stop_signal = sig;
  r.checkpoint = m_last_checkpoint.string();
  return r;
}

TrainResult TrainingRun::finish() {
  const parallel::LearnerGroup& g = *m_device.group;
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
    if (m_root) write_file_atomic(m_dir / records::k_timeline_file.name, records::Timeline::document(parts));
  }

  r.steps = m_pos.step;
  r.train_loss = m_last_train_loss;
  r.test_accuracy = m_last_eval.cm.accuracy();
  r.test_loss = m_last_eval_loss;
  r.wall_s = m_wall.seconds();
  r.samples_per_s = static_cast<double>(m_pos.samples_done - m_pos.samples_at_start) / std::max(m_loop_s, 1e-9);

  records::RunSummary s;
  s.first_step = m_pos.first_step;
  s.steps = m_pos.step;
  s.wall_s = r.wall_s;
  s.loop_s = m_loop_s;
  s.samples_per_s = r.samples_per_s;
  s.steady = m_steady;
  s.compute_s = g.compute_seconds();
  s.allreduce_s = g.reduce_seconds();
  s.overlapped_s = g.overlapped_reduce_seconds();
  s.io_wait_s = m_device.loader->io_wait_s();
  s.samples_done = m_pos.samples_done;
  s.ranks = m_ranks;
  s.nodes = m_topo.nodes();
  s.learners = g.learners();
  s.threads = m_device.backend->capabilities().threads;
  s.algorithm = parallel::algorithm_name(m_algorithm);
  s.backend = m_device.backend->name();
  const nn::DeviceInfo device = m_device.backend->info();
  s.device = device.name;
  s.model = m_data.spec.name;
  s.precision = config::k_precisions.name(m_cfg.train.precision);
  s.layout = g.layout_text();
  s.optimizer = g.optimizer_name();
  s.data = m_data.train->info().description;
  s.config_origin = m_origin;
  // The CPU backend's streams as they ran (run.cpu_streams), read from the backend rather than
  // the config, so that a test can tell that a run really took the async path.
  if (s.backend == "cpu") {
    s.cpu_streams = device.cpu_streams;
    if (device.cpu_streams == "async") s.cpu_stream_jitter_us = device.cpu_stream_jitter_us;
  }
  s.parameters = static_cast<int64_t>(g.parameter_count());
  const data::DatasetInfo& info = m_data.train->info();
  s.input_c = info.sample.c();
  s.input_h = info.sample.h();
  s.input_w = info.sample.w();
  s.classes = m_data.spec.classes > 0 ? m_data.spec.classes : info.classes;
  s.global_batch = step_samples();
  s.batch = m_cfg.train.batch_size;
  s.epochs = m_data.plan.epochs;
  s.skipped_steps = g.skipped_steps();
  s.skipped_samples = m_device.loader->bad_samples();
  s.normalization = normalization_json(m_data.train->normalization());
  const config::SyncPeriods periods = config::sync_periods(m_cfg.parallel);
  s.parallel = {{"period", periods.across}, {"periods", {periods.inside, periods.across}}};
  if (m_algorithm == parallel::Algorithm::sma) {
    const parallel::SmaCoefficients c = g.sma();
    s.parallel["alpha"] = c.alpha;
    s.parallel["centre_rate"] = c.beta;
    s.parallel["momentum"] = c.mu;
  }
  if (m_algorithm == parallel::Algorithm::local_sgd) s.parallel["start_step"] = g.options().start_step;
  if (m_algorithm == parallel::Algorithm::outer) {
    const optim::OuterOptions& o = m_cfg.parallel.outer;
    s.parallel["period"] = o.period;
    s.parallel.erase("periods");
    s.parallel["outer"] = {{"period", o.period},
                           {"lr", o.lr},
                           {"momentum", o.momentum},
                           {"nesterov", o.nesterov},
                           {"start_step", g.options().outer.start_step},
                           {"qsr", o.qsr},
                           {"streaming", o.streaming},
                           {"outer_steps", g.outer_steps()}};
  }
  // The host's waits for the device inside a step (docs/design.md, "One host wait per step").
  s.parallel["host_waits_per_step"] =
      static_cast<double>(g.host_waits()) / static_cast<double>(std::max<int64_t>(1, m_group_steps));
  if (m_algorithm != parallel::Algorithm::sma && m_algorithm != parallel::Algorithm::outer && m_ranks > 1) {
    s.parallel["bucket_mb"] = m_device.bucket_mb;
    s.parallel["buckets"] = g.buckets();
    s.parallel["max_buckets_in_flight"] = g.max_buckets_in_flight();
  }
  if (g.options().graphs) s.parallel["captured_learners"] = g.captured_learners();
  {
    // What rank 0 was stated to need, and what every rank held at most: its peak resident
    // memory, and its growth over what it held before the learner group was built (the
    // libraries and MPI's buffers are in the first only; a data cache that fills as the run
    // reads, in both).
    const ProcessMemory now = process_memory();
    std::vector<double> mine(2 * static_cast<size_t>(m_ranks), 0.0);  // every rank's [peak, growth], summed
    mine[2 * static_cast<size_t>(m_rank)] = static_cast<double>(now.peak);
    mine[2 * static_cast<size_t>(m_rank) + 1] = static_cast<double>(now.peak - std::min(now.peak, m_device.rss_before_group));
    m_world.allreduce_sum(std::span<double>(mine));
    std::vector<int64_t> peaks, growth;
    for (int r = 0; r < m_ranks; ++r) {
      peaks.push_back(static_cast<int64_t>(mine[2 * static_cast<size_t>(r)]));
      growth.push_back(static_cast<int64_t>(mine[2 * static_cast<size_t>(r) + 1]));
    }
    json parts = json::object();
    for (const auto& [name, bytes] : m_device.memory.parts()) parts[name] = bytes;
    s.memory = {{"need_bytes", m_device.memory.total()},
                {"need", parts},
                {"tile", {m_device.memory.tile_h, m_device.memory.tile_w}},
                {"limit_bytes", m_device.memory_limit},
                {"limit_from", m_device.memory_limit_from},
                {"peak_rss_bytes", peaks},
                {"peak_growth_bytes", growth}};
  }
  if (m_spatial.split_sample()) {
    // The split, and this rank's halo exchanges in the training passes (not the evaluations'):
    // the seconds the graph waited for them (exposed) and those they travelled under its
    // compute (hidden).
    const nn::HaloTimes h = train_halo_times();
    s.parallel["spatial"] = {{"rows", m_spatial.split.rows},
                             {"cols", m_spatial.split.cols},
                             {"groups", m_spatial.ranks},
                             {"tile", {m_spatial.window->rows, m_spatial.window->cols}},
                             {"halo", {{"exchange", m_device.halo_exchange},
                                       {"exposed_s", h.exposed}, {"hidden_s", h.hidden},
                                       {"exchanges", h.exchanges}, {"bytes", h.bytes}}}};
  }
  if (m_cfg.parallel.algorithm == parallel::Algorithm::outer && m_cfg.parallel.outer.async) {
    // This rank's node's pushes to the asynchronous centre (its leader's; zero on the others).
    const parallel::AsyncOuterStats a = g.async_stats();
    s.parallel["outer_async"] = {{"max_staleness", m_cfg.parallel.outer.max_staleness},
                                 {"pushes", a.pushes},
                                 {"staleness_max", a.staleness_max},
                                 {"staleness_mean", a.pushes > 0 ? a.staleness_sum / static_cast<double>(a.pushes) : 0.0},
                                 {"wait_s", a.wait_s},
                                 {"wait_cpu_s", a.wait_cpu_s},
                                 {"serve_cpu_s", a.serve_cpu_s}};
    // Every node's (gather_pace_records): its leader's pushes, staleness, waits and the CPU
    // seconds of its shard's thread.
    if (!m_pace.node_async.empty()) s.parallel["outer_async"]["nodes"] = m_pace.node_async;
  }
  if (m_pace.on) {
    // Rounds fitted to speed: each node's steps trained and let pass over the run, its seconds
    // per trained step (this attempt's mean, its slowest rank's), the samples the slower nodes
    // had not reached when it ended, and the steps the run had planned and trained over the job
    // (it goes on past the plan until it has trained its samples: fit_paced_end).
    s.parallel["pace"] = {{"epoch_quorum", m_cfg.train.epoch_quorum},
                          {"planned_steps", m_pace.planned_steps},
                          {"steps", m_data.plan.total_steps},
                          {"samples_trained", m_pos.samples_done},
                          {"node_trained_steps", m_pace.node_trained},
                          {"node_idle_steps", m_pace.node_idle},
                          {"node_step_seconds", m_pace.node_step_s},
                          {"carried_samples", m_pace.carried_total}};
  }
  if (m_device.allreduce->memory() == mpi::Memory::device) s.parallel["device_allreduce"] = m_device.allreduce->mode();
  // The algorithms the cross-node stage ran (docs/allreduce.md, "The cross-node stage").
  if (const std::string cross = m_device.allreduce->cross_node(); !cross.empty()) s.parallel["cross_node"] = cross;
  s.parallel["comm_precision"] = config::k_comm_precisions.name(m_cfg.parallel.comm_precision);
  if (m_cfg.parallel.autotune) s.parallel["autotune"] = m_device.tuner->decisions();
  s.train_loss = r.train_loss;
  s.test_loss = r.test_loss;
  s.cm = &m_last_eval.cm;
  s.model_checksum = r.model_checksum;
  s.shape_change = m_reshaped_from;
  if (m_cfg.train.target.metric != config::TargetMetric::none) {
    s.target_metric = config::k_target_metrics.name(m_cfg.train.target.metric);
    s.target_value = m_cfg.train.target.value;
    s.target = m_target;
  }
  m_log->finished(s);
  return r;
}

}  // namespace squall::train
