// The run directory, resuming and checkpoints of a training run (docs/training.md,
// "Checkpoints and restart").
#include <algorithm>

#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "io/checkpoint/named_weights.hpp"
#include "src/train/run_dir.hpp"
#include "src/train/training_run.hpp"

namespace squall::train {
namespace {

namespace fs = std::filesystem;

// The [model] section of a config's TOML text (to_toml writes one table per section).
std::string model_section(const std::string& toml) {
  const size_t begin = toml.find("[model]");
  if (begin == std::string::npos) return {};
  const size_t end = toml.find("\n[", begin);
  return toml.substr(begin, end == std::string::npos ? std::string::npos : end + 1 - begin);
}

}  // namespace

// The checkpoint's run reached its train.target; whether the config's target is still met by
// that: the same metric, and a value no higher (a raised value or a removed target trains on).
bool TrainingRun::target_still_reached(const checkpoint::TrainerState& s) const {
  const config::TargetConfig& now = m_cfg.train.target;
  if (now.metric == config::TargetMetric::none) return false;
  const config::TargetConfig then = config::parse_config(s.config, "the checkpoint's config").train.target;
  return then.metric == now.metric && now.value <= then.value;
}

// Rank 0 makes the run dir and checks it can write there; an earlier run's outputs are never
// overwritten silently: --resume continues it, --overwrite replaces it.
void TrainingRun::prepare_run_dir() {
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

void TrainingRun::resume() {
  m_store = std::make_unique<checkpoint::CheckpointStore>(m_dir, m_topo, m_cfg.checkpoint.keep);
  if (m_options.resume.empty()) return;
  std::optional<checkpoint::LoadedCheckpoint> ck =
      m_options.resume == "auto" ? m_store->load_newest() : m_store->load(fs::path(m_options.resume));
  if (!ck) {
    // Nothing to continue (the first attempt of a job that requeues itself): a fresh start.
    mpi::run_agreed(m_world, [&] {
      if (m_root && !run_outputs(m_dir).empty()) remove_run_outputs(m_dir);
    });
    log::info("--resume auto: no checkpoint in " + (m_dir / "checkpoints").string() + ": starting from step 0");
    return;
  }
  checkpoint::TrainerState then;
  mpi::run_agreed(m_world, [&] {
    then = checkpoint::read_trainer_state(ck->shared);
    check_resumable(*ck, then);
  });
  restore(*ck, then);
}

// A checkpoint of another job is refused, naming what differs; keys that may change between
// attempts (the learning rate, the epochs, the data's paths) are listed and accepted.
void TrainingRun::check_resumable(const checkpoint::LoadedCheckpoint& ck,
                                  const checkpoint::TrainerState& then_state) const {
  const std::string where = ck.path.string();
  config::Config then;
  try {
    then = config::parse_config(then_state.config, where + " (its config)");
  } catch (const Error& e) {
    throw Error(where + ": its config cannot be read: " + e.what());
  }
  std::vector<std::string> changed;
  const std::string refused = resume_incompatibility(m_cfg, then, changed);
  if (!refused.empty())
    throw UsageError(where + " is a checkpoint of another run: " + refused +
                     " (resume with the checkpoint's values, or train into a new run.dir)");
  if (then_state.train_samples != m_data.n_train)
    throw UsageError(where + " was trained on " + std::to_string(then_state.train_samples) +
                     " training samples; data.train (" + m_cfg.data.train + ") has " + std::to_string(m_data.n_train));
  if (then_state.world_size != m_ranks) {
    // Another shape (docs/training.md, "Elastic resume"): the epoch goes on at the sample of
    // its order where the checkpoint's job stood, which global sampling alone defines.
    const std::string was = "a job of " + std::to_string(then_state.world_size) + " rank(s)";
    if (m_data.sampler->mode() != input::Sampling::global || then.data.sampling != input::Sampling::global)
      throw UsageError(where + " was written by " + was + " and this job has " + std::to_string(m_ranks) +
                       ": with data.sampling = local each node reads the shard staged on it, which another "
                       "number of ranks would cut differently; resume with " + std::to_string(then_state.world_size) +
                       " rank(s), or train with data.sampling = global");
    if (then_state.epoch_position < 0)
      throw UsageError(where + " was written by " + was + " before squall recorded where an epoch's reading "
                       "stands: resume it with " + std::to_string(then_state.world_size) + " rank(s)");
    // Each rank's part carries over to the rank of the same number; a node's models do not
    // (the nodes are other groups of ranks).
    if (then_state.per_rank_parts && m_device.group->options().node_level())
      throw UsageError(where + " was written by " + was + " with a model per node (" + then_state.algorithm +
                       (m_algorithm == parallel::Algorithm::outer ? "" : " with parallel.periods' node level") +
                       "), which another number of ranks would group otherwise: resume with " +
                       std::to_string(then_state.world_size) + " rank(s)");
  }
  const parallel::LearnerGroup& g = *m_device.group;
  if (then_state.param_count != static_cast<int64_t>(g.parameter_count()) ||
      then_state.state_count != static_cast<int64_t>(g.state_value_count()))
    throw UsageError(where + " holds a model of " + std::to_string(then_state.param_count) + " parameters; " +
                     m_data.spec.name + " here has " + std::to_string(g.parameter_count()));
  if (m_root && !changed.empty()) {
    std::string list;
    for (const auto& c : changed) list += (list.empty() ? "" : "; ") + c;
    log::info("resuming with changed keys: " + list);
  }
}

void TrainingRun::restore(const checkpoint::LoadedCheckpoint& ck, const checkpoint::TrainerState& s) {
  parallel::LearnerGroup& g = *m_device.group;
  m_pos.step = m_pos.first_step = s.step;
  const bool reshaped = s.world_size != m_ranks;
  if (!reshaped) {  // the same lists, at the same batch: bit for bit
    m_pos.at = m_pos.start = {s.epoch, s.epoch_batches};
    m_pos.start_position = s.epoch_start_position;
    m_pos.start_batches = s.epoch_start_batches;
  } else {
    // Another number of ranks: this job's lists of the epoch begin at the checkpoint's position
    // of its order, and the batches they leave count as the epoch's last ones.
    const int64_t batch = m_cfg.train.batch_size;
    const int64_t left = m_data.sampler->steps_per_epoch(batch, s.epoch_position);
    const int64_t used = std::max<int64_t>(0, m_data.plan.batches_per_epoch - left);
    m_pos.at = m_pos.start = {s.epoch, used};
    m_pos.start_position = s.epoch_position;
    m_pos.start_batches = used;
  }
  // The schedule's frame of the first attempt: the learning rate stays where it was in samples.
  if (s.schedule_steps > 0 && s.schedule_step_samples > 0) {
    m_data.plan.schedule_steps = s.schedule_steps;
    m_data.plan.schedule_step_samples = s.schedule_step_samples;
  }
  if (s.learners != g.learners() || reshaped) {  // the auto-tuner had changed it, or the job's shape changed
    while (g.learners() < s.learners) g.add_learner();
    while (g.learners() > s.learners) g.remove_learner();
    replan(m_data.plan, g.learners(), m_pos.step, m_pos.at);
  }
  if (reshaped) {
    m_reshaped_from = records::ShapeChange{s.step, s.world_size, s.nodes, m_ranks, m_topo.nodes(), s.epoch,
                                           s.epoch_position};
    if (m_root)
      log::info("resuming step " + std::to_string(s.step) + " of a job of " + std::to_string(s.world_size) +
                " rank(s)" + (s.nodes > 0 ? " on " + std::to_string(s.nodes) + " node(s)" : std::string()) + " on " +
                std::to_string(m_ranks) + " rank(s) on " + std::to_string(m_topo.nodes()) + " node(s): epoch " +
                std::to_string(s.epoch) + " goes on at sample " + std::to_string(s.epoch_position) + " of its " +
                std::to_string(m_data.n_train) + ", " + std::to_string(m_data.plan.total_steps - s.step) +
                " step(s) of " + std::to_string(step_samples()) + " samples to go");
    const auto ranks_text = [](int64_t first, int64_t last) {
      return first == last ? "rank " + std::to_string(first)
                           : "ranks " + std::to_string(first) + " to " + std::to_string(last);
    };
    if (m_root && s.per_rank_parts)
      log::info(m_ranks > s.world_size
                    ? ranks_text(s.world_size, m_ranks - 1) +
                          (m_ranks - 1 == s.world_size ? " starts its" : " start their") +
                          " replicas from the central model; the others keep theirs"
                    : "the replicas of " + ranks_text(m_ranks, s.world_size - 1) + " are dropped; the others keep theirs");
  }
  g.restore(ck.shared, ck.has_own ? &ck.own : nullptr, ck.from_centre);
  m_pos.samples_done = m_pos.samples_at_start = s.samples_done;
  m_pos.attempt = s.attempt + 1;
  m_pos.earlier_s = s.elapsed_s;
  m_pos.earlier_eval_s = s.eval_elapsed_s;
  m_window_loss.restore(s.window_loss_sum, s.window_loss_weight);
  m_last_train_loss = s.last_train_loss;
  m_metrics_lines_at_resume = s.metrics_lines;
  if (s.tuner_done) m_device.tuner->stop();
  // A run that reached its train.target is complete, unless the target now asks for more.
  if (s.target_reached && target_still_reached(s)) m_target = records::TargetFacts{};
  m_resumed_from = ck.path;
  m_last_checkpoint = ck.path;
  m_last_checkpoint_step = m_pos.step;
}

checkpoint::TrainerState TrainingRun::trainer_state() const {
  const parallel::LearnerGroup& g = *m_device.group;
  checkpoint::TrainerState s;
  s.step = m_pos.step;
  s.epoch = m_pos.at.epoch;
  s.epoch_batches = m_pos.at.used;
  // The epoch's reading position: the lists of this attempt began at (start_position,
  // start_batches) in its start epoch, at (0, 0) in every later one (io/input/sampler.hpp).
  const bool start_epoch = m_pos.at.epoch == m_pos.start.epoch;
  s.epoch_start_position = start_epoch ? m_pos.start_position : 0;
  s.epoch_start_batches = start_epoch ? m_pos.start_batches : 0;
  s.epoch_position = m_data.sampler->mode() == input::Sampling::global
                         ? s.epoch_start_position +
                               (m_pos.at.used - s.epoch_start_batches) * m_cfg.train.batch_size * m_ranks
                         : -1;
  s.samples_done = m_pos.samples_done;
  s.learners = g.learners();
  s.tuner_done = !m_device.tuner->active();
  s.window_loss_sum = m_window_loss.sum();
  s.window_loss_weight = m_window_loss.weight();
  s.last_train_loss = m_last_train_loss;
  // The checkpoint's own record follows it in metrics.jsonl; a resume keeps the lines before.
  s.metrics_lines = m_log ? m_log->metrics_lines() : 0;
  s.attempt = m_pos.attempt;
  s.elapsed_s = m_log ? m_log->clock().run_s() : m_pos.earlier_s;
  s.eval_elapsed_s = m_log ? m_log->clock().eval_s() : m_pos.earlier_eval_s;
  s.target_reached = m_target.has_value();
  s.world_size = m_ranks;
  s.nodes = m_topo.nodes();
  s.schedule_steps = m_data.plan.schedule_steps;
  s.schedule_step_samples = m_data.plan.schedule_step_samples;
  s.per_rank_parts = g.replicas_differ();
  s.train_samples = m_data.n_train;
  s.param_count = static_cast<int64_t>(g.parameter_count());
  s.state_count = static_cast<int64_t>(g.state_value_count());
  s.config = to_toml(m_cfg);
  s.config_origin = m_origin;
  s.model = m_data.spec.name;
  s.algorithm = parallel::algorithm_name(m_algorithm);
  return s;
}

// The job's state at the end of step m_pos.step, in <run dir>/checkpoints (checkpoint.hpp).
void TrainingRun::write_checkpoint() {
  const Stopwatch t;
  parallel::LearnerGroup& g = *m_device.group;
  checkpoint::CheckpointData shared, own;
  const checkpoint::TrainerState state = trainer_state();
  if (m_root) {
    g.save_shared(shared);
    checkpoint::write_trainer_state(state, shared);
    // The same central model by name, with what it needs to be used elsewhere.
    checkpoint::add_model_entries(shared, g.replica_graph(0), shared.arrays.at("central/params"),
                                  shared.arrays.at("central/state"), m_data.spec, model_section(state.config),
                                  m_data.train->info(), m_data.train->normalization());
  }
  if (state.per_rank_parts) g.save_own(own);
  const fs::path path = m_store->save(m_pos.step, shared, state.per_rank_parts ? &own : nullptr);
  m_last_checkpoint_step = m_pos.step;
  m_last_checkpoint = path;
  m_timeline.add("checkpoint", records::Timeline::k_rank_track, t.started_at(), steady_seconds());
  if (m_log) m_log->checkpoint_written(m_pos.step, path, t.seconds());
}

}  // namespace squall::train
