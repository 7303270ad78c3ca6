// The run directory, resuming and checkpoints of a training run (docs/training.md,
// "Checkpoints and restart").
#include <algorithm>
#include <cstdio>
#include <set>

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

// What elastic.batch made of the batch and the learning rate on a new shape, in words.
std::string shape_batch_text(const records::ShapeChange& c) {
  const auto batches = [&](const char* what, int64_t from, int64_t to) {
    return std::string(what) + (from == to ? " " + std::to_string(to) + " kept"
                                           : " " + std::to_string(from) + " -> " + std::to_string(to));
  };
  std::string text = "elastic.batch = " + c.keep + ": " + batches("global batch", c.from_global_batch, c.global_batch) +
                     ", " + batches("batch per learner", c.from_learner_batch, c.learner_batch);
  if (c.keep == "global" && c.global_batch != c.from_global_batch)
    text += " (" + std::to_string(c.from_global_batch) + " samples do not divide among " +
            std::to_string(c.global_batch / std::max<int64_t>(1, c.learner_batch)) + " learners: the nearest)";
  char rate[64];
  std::snprintf(rate, sizeof(rate), ", learning rate x %.4g (the linear scaling rule)", c.lr_scale);
  return text + (c.lr_scale == 1.0 ? std::string(", learning rate kept") : std::string(rate));
}

// The checkpoint's job seen through its groups (docs/training.md, "One sample across ranks"):
// its parallel.spatial ([1, 1] for an unsplit run, or a version before the split) and its
// groups, the data-parallel shape that its sampler, its plan of steps and its batches counted.
struct ThenGroups {
  nn::SpatialSplit split;
  int64_t groups = 1;
  std::vector<int> node_of_group;  // each group's node (its first rank's); empty: not recorded

  int64_t nodes() const {
    return static_cast<int64_t>(std::set<int>(node_of_group.begin(), node_of_group.end()).size());
  }
};

ThenGroups then_groups(const checkpoint::TrainerState& s, const config::Config& then) {
  ThenGroups t;
  t.split = config::spatial_split(then.parallel);
  t.groups = s.world_size / t.split.ranks();
  const std::vector<int> rank_nodes = checkpoint::rank_nodes_of(s);
  if (static_cast<int64_t>(rank_nodes.size()) != s.world_size) return t;
  for (int64_t g = 0; g < t.groups; ++g)
    t.node_of_group.push_back(rank_nodes[static_cast<size_t>(g * t.split.ranks())]);
  return t;
}

ThenGroups then_groups(const checkpoint::TrainerState& s) {
  return then_groups(s, config::parse_config(s.config, "the checkpoint's config"));
}

// Which part of a checkpoint a rank of group `group` takes (checkpoint::PartSource; the groups
// of parallel.spatial, or the ranks of a job of whole samples): every rank of a group holds the
// group's replicas, so it takes the part of the checkpoint's group of the same index (that
// group's first rank's), or none where the checkpoint's job had fewer groups (its replicas
// start from the centre, as a rank new to an elastic resume does). A checkpoint whose config
// cannot be read takes none: check_resumable refuses it, saying why.
checkpoint::PartSource part_of_group(int64_t group) {
  return [group](const checkpoint::CheckpointData& shared) -> int64_t {
    try {
      const ThenGroups then = then_groups(checkpoint::read_trainer_state(shared));
      return group < then.groups ? group * then.split.ranks() : -1;
    } catch (const std::exception&) {
      return -1;
    }
  };
}

// " with parallel.spatial = [2, 1] (2 group(s))" for a split job; for one of whole samples ""
// unless `either` (the other job of a resume is split), " with parallel.spatial = [1, 1]".
std::string split_text(const nn::SpatialSplit& split, int64_t groups, bool either) {
  if (!split.split()) return either ? " with parallel.spatial = " + split.str() : std::string();
  return " with parallel.spatial = " + split.str() + " (" + std::to_string(groups) + " group(s))";
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
// overwritten silently: --resume continues it, --overwrite replaces it (clear_earlier_run
// removes them, after the checks that follow).
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
  m_clear_earlier = true;
}

// The earlier run's outputs go once the data, the model and the device have passed their checks
// (TrainingRun::run): a mistake in the new config leaves the earlier run whole.
void TrainingRun::clear_earlier_run() {
  if (!m_clear_earlier) return;
  remove_run_outputs(m_dir);
  m_clear_earlier = false;
  if (!m_options.resume.empty()) return;
  log::info("--overwrite: removed the earlier run's outputs from " + m_cfg.run.dir);
}

void TrainingRun::load_checkpoint() {
  m_store = std::make_unique<checkpoint::CheckpointStore>(m_dir, m_topo, m_cfg.checkpoint.keep,
                                                          part_of_group(m_spatial.rank));
  if (m_options.resume.empty()) return;
  std::optional<checkpoint::LoadedCheckpoint> ck =
      m_options.resume == "auto" ? m_store->load_newest() : m_store->load(fs::path(m_options.resume));
  if (!ck) {
    // Nothing to continue (the first attempt of a job that requeues itself): a fresh start.
    m_clear_earlier = m_root && !run_outputs(m_dir).empty();
    log::info("--resume auto: no checkpoint in " + (m_dir / "checkpoints").string() + ": starting from step 0");
    return;
  }
  mpi::run_agreed(m_world, [&] {
    m_checkpoint_state = checkpoint::read_trainer_state(ck->shared);
    check_resumable(*ck, m_checkpoint_state);
    fit_shape(m_checkpoint_state);
    // A part of an earlier version records its learner group's rank, not its group: the world
    // rank, or 0 in a split job of one group; either way over the ranks of a group, its group.
    if (ck->has_own && !ck->own.ints.count("group"))
      ck->own.ints["group"] = ck->own.integer("rank") / then_groups(m_checkpoint_state).split.ranks();
  });
  m_checkpoint = std::move(ck);
}

// The batch per learner the checkpoint's job trained at: recorded, or (a checkpoint of an
// earlier version) train.batch_size, which resume_incompatibility has found equal to this job's.
int64_t TrainingRun::trained_batch(const checkpoint::TrainerState& s) const {
  return s.learner_batch > 0 ? s.learner_batch : m_requested_batch;
}

// elastic.batch on a new shape (docs/training.md, "Elastic resume"): the batch per learner
// this job trains at and its learning rate's factor, from the checkpoint's job
// (step_plan.hpp's elastic_batch); the steps are planned again at a new batch. On the
// checkpoint's own shape it gives the checkpoint's batch and factor back.
void TrainingRun::fit_shape(const checkpoint::TrainerState& s) {
  const int64_t then_batch = trained_batch(s);
  // The checkpoint's groups (its ranks, unsplit) and their nodes; a checkpoint that does not
  // record its nodes had this job's (its node-level state, which outer needs, would not carry
  // over: check_resumable).
  const ThenGroups then = then_groups(s);
  const int64_t then_nodes = then.nodes() > 0                      ? then.nodes()
                             : s.nodes > 0 && !then.split.split() ? s.nodes
                                                                  : m_spatial.nodes;
  const ElasticBatch e =
      elastic_batch(m_cfg.elastic.batch == config::ElasticBatch::global,
                    {then_batch, s.learners, then.groups, s.lr_factor, then_nodes}, m_requested_batch,
                    m_spatial.ranks, m_spatial.nodes, update_batch_of(m_algorithm), m_cfg.schedule.scale_lr_with_batch);
  m_lr_factor = e.lr_factor;
  if (e.learner_batch == m_cfg.train.batch_size) return;
  m_cfg.train.batch_size = e.learner_batch;
  m_data.plan = plan_training(m_cfg, m_origin, m_data, m_spatial.ranks);
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
  // Another split resumes as another number of ranks does: every rank of a group holds the
  // whole model, and the groups are the job's data-parallel ranks, which the checks below count.
  // A part per rank (the replicas of sma, local-sgd and outer) belongs to its group, and each
  // group takes the part of the checkpoint's group of its index (part_of_group).
  const ThenGroups then_split = then_groups(then_state, then);
  const nn::SpatialSplit& now_split = m_spatial.split;
  const bool split = then_split.split.split() || now_split.split();
  if (then_state.train_samples != m_data.n_train)
    throw UsageError(where + " was trained on " + std::to_string(then_state.train_samples) +
                     " training samples; data.train (" + m_cfg.data.train + ") has " + std::to_string(m_data.n_train));
  // The data-parallel shape: ranks, or a split job's groups (the sampler's "ranks").
  const std::string unit = split ? " group(s)" : " rank(s)";
  if (then_split.groups != m_spatial.ranks) {
    // Another shape (docs/training.md, "Elastic resume"): the epoch goes on at the sample of
    // its order where the checkpoint's job stood, which global sampling alone defines.
    const std::string was = "a job of " + std::to_string(then_state.world_size) + " rank(s)" +
                            split_text(then_split.split, then_split.groups, split);
    const std::string now = std::to_string(m_ranks) + " rank(s)" + split_text(now_split, m_spatial.ranks, split);
    if (m_data.sampler->mode() != input::Sampling::global || then.data.sampling != input::Sampling::global)
      throw UsageError(where + " was written by " + was + " and this job has " + now +
                       ": with data.sampling = local each node reads the shard staged on it, which another "
                       "number of" + unit + " would cut differently; resume with " + std::to_string(then_split.groups) +
                       unit + ", or train with data.sampling = global");
    if (then_state.epoch_position < 0)
      throw UsageError(where + " was written by " + was + " before squall recorded where an epoch's reading "
                       "stands: resume it with " + std::to_string(then_split.groups) + unit);
  }
  // With node-local sampling each node reads the samples of its own range of the data, which the
  // nodes' layout of the ranks (a split job's groups) cuts (io/input/sampler.hpp): the same ranks
  // on other nodes would read the rest of the epoch from other ranges, some samples twice and
  // others not at all.
  if (then_split.groups == m_spatial.ranks &&
      (m_data.sampler->mode() == input::Sampling::local || then.data.sampling == input::Sampling::local)) {
    const std::vector<int>& then_nodes = then_split.node_of_group;
    if (!then_nodes.empty() && input::node_sizes_from(then_nodes) != input::node_sizes_from(m_spatial.node_of_rank)) {
      const auto layout = [&](const std::vector<int>& nodes) {
        std::string text;
        for (const int n : input::node_sizes_from(nodes)) text += (text.empty() ? "" : ", ") + std::to_string(n);
        return std::to_string(input::node_sizes_from(nodes).size()) + " node(s) of " + text + unit;
      };
      throw UsageError(where + " was written by a job of " + std::to_string(then_state.world_size) + " rank(s)" +
                       split_text(then_split.split, then_split.groups, split) + " on " + layout(then_nodes) +
                       "; this job's" + (split ? " groups" : " ranks") + " are on " + layout(m_spatial.node_of_rank) +
                       ": with data.sampling = local each node reads its own range of the training samples, which "
                       "another node layout cuts differently (epoch " + std::to_string(then_state.epoch) +
                       " would read some samples twice and others not at all); resume on the checkpoint's layout "
                       "(the same ranks per node, --ranks-per-node where nodes are emulated), or train with "
                       "data.sampling = global");
    }
  }
  // outer's nodes each hold one model: a node of this job may not mix the groups (the ranks,
  // unsplit) of two of the checkpoint's nodes, nor of one and new groups (sma's node centres
  // start from the job's centre instead: restore). A group lies inside one node under outer
  // (make_spatial_job), so its node is its first rank's.
  if (then_state.per_rank_parts && m_algorithm == parallel::Algorithm::outer &&
      !checkpoint::nodes_carry_over(then_split.node_of_group, m_spatial.node_of_rank)) {
    const int64_t then_nodes = then_split.nodes() > 0 ? then_split.nodes() : then_state.nodes;
    const std::string units = split ? " groups" : " ranks";
    throw UsageError(where + " was written by a job of " + std::to_string(then_state.world_size) + " rank(s)" +
                     split_text(then_split.split, then_split.groups, split) + " on " + std::to_string(then_nodes) +
                     " node(s) with a model per node (outer); this job's nodes would mix the" + units + " of its "
                     "nodes: resume with the same" + units + " per node, in rank order (" +
                     (then_nodes > 0 ? std::to_string(then_split.groups / then_nodes) : std::string("?")) +
                     " per node)");
  }
  if (m_root && !changed.empty()) {
    std::string list;
    for (const auto& c : changed) list += (list.empty() ? "" : "; ") + c;
    log::info("resuming with changed keys: " + list);
  }
}

void TrainingRun::restore(const checkpoint::LoadedCheckpoint& ck, const checkpoint::TrainerState& s) {
  parallel::LearnerGroup& g = *m_device.group;
  mpi::run_agreed(m_world, [&] {
    if (s.param_count != static_cast<int64_t>(g.parameter_count()) ||
        s.state_count != static_cast<int64_t>(g.state_value_count()))
      throw UsageError(ck.path.string() + " holds a model of " + std::to_string(s.param_count) + " parameters; " +
                       m_data.spec.name + " here has " + std::to_string(g.parameter_count()));
  });
  m_pos.step = m_pos.first_step = s.step;
  const int64_t then_batch = trained_batch(s);
  const ThenGroups then = then_groups(s);
  // Another number of data-parallel ranks (a split job's groups), or another batch per learner
  // (elastic.batch, fit_shape): the epoch's lists are cut again. Another split of as many
  // groups reads the same lists; it and another number of ranks are a change of shape all the
  // same, said and recorded.
  const bool relisted = then.groups != m_spatial.ranks || then_batch != m_cfg.train.batch_size;
  const bool reshaped = relisted || s.world_size != m_ranks || then.split != m_spatial.split;
  const bool split = then.split.split() || m_spatial.split_sample();
  if (!relisted) {  // the same lists, at the same batch: bit for bit
    m_pos.at = m_pos.start = {s.epoch, s.epoch_batches};
    m_pos.start_position = s.epoch_start_position;
    m_pos.start_batches = s.epoch_start_batches;
  } else {
    // Another number of ranks (groups): this job's lists of the epoch begin at the checkpoint's
    // position of its order, and the batches they leave count as the epoch's last ones.
    const int64_t batch = m_cfg.train.batch_size;
    const int64_t left = m_data.sampler->steps_per_epoch(batch, s.epoch_position);
    const int64_t used = std::max<int64_t>(0, m_data.plan.batches_per_epoch - left);
    m_pos.at = m_pos.start = {s.epoch, used};
    m_pos.start_position = s.epoch_position;
    m_pos.start_batches = used;
  }
  // The schedule's frame of the first attempt: the learning rate stays where it was in samples,
  // milestones in epochs too (counted in the first plan's steps per epoch; a checkpoint that
  // does not record them had, with global sampling, its samples over its step's samples).
  if (s.schedule_steps > 0 && s.schedule_step_samples > 0) {
    m_data.plan.schedule_steps = s.schedule_steps;
    m_data.plan.schedule_step_samples = s.schedule_step_samples;
    if (s.schedule_steps_per_epoch > 0)
      m_data.plan.schedule_steps_per_epoch = s.schedule_steps_per_epoch;
    else if (m_data.sampler->mode() == input::Sampling::global)
      m_data.plan.schedule_steps_per_epoch = m_data.n_train / s.schedule_step_samples;
    m_device.schedule =
        make_schedule(m_cfg, m_spatial.ranks, m_spatial.nodes, m_data.plan.schedule_steps_per_epoch, m_lr_factor);
  }
  if (s.learners != g.learners() || reshaped) {  // the auto-tuner had changed it, or the job's shape changed
    while (g.learners() < s.learners) g.add_learner();
    while (g.learners() > s.learners) g.remove_learner();
    replan(m_data.plan, g.learners(), m_pos.step, m_pos.at);
  }
  m_pos.samples_done = m_pos.samples_at_start = s.samples_done;
  continue_schedule(s);
  if (reshaped) {
    records::ShapeChange& c = m_reshaped_from.emplace();
    c.step = s.step;
    c.from_ranks = s.world_size;
    c.from_nodes = s.nodes;
    c.ranks = m_ranks;
    c.nodes = m_topo.nodes();
    c.from_spatial_rows = then.split.rows;
    c.from_spatial_cols = then.split.cols;
    c.spatial_rows = m_spatial.split.rows;
    c.spatial_cols = m_spatial.split.cols;
    c.epoch = s.epoch;
    c.epoch_position = s.epoch_position;
    c.keep = config::k_elastic_batches.name(m_cfg.elastic.batch);
    c.from_learner_batch = then_batch;
    c.learner_batch = m_cfg.train.batch_size;
    c.from_global_batch = then_batch * s.learners * then.groups;
    c.global_batch = step_samples();
    c.lr_scale = m_lr_factor / s.lr_factor;
    if (m_root) {
      log::info("resuming step " + std::to_string(s.step) + " of a job of " + std::to_string(s.world_size) +
                " rank(s)" + (s.nodes > 0 ? " on " + std::to_string(s.nodes) + " node(s)" : std::string()) +
                split_text(then.split, then.groups, split) + " on " + std::to_string(m_ranks) + " rank(s) on " +
                std::to_string(m_topo.nodes()) + " node(s)" + split_text(m_spatial.split, m_spatial.ranks, split) +
                ": epoch " + std::to_string(s.epoch) +
                // Node-local sampling records no position: as many groups read the same lists.
                (s.epoch_position >= 0 ? " goes on at sample " + std::to_string(s.epoch_position) + " of its " +
                                             std::to_string(m_data.n_train)
                                       : std::string(" goes on with the same lists")) +
                ", " + std::to_string(m_data.plan.total_steps - s.step) +
                " step(s) of " + std::to_string(step_samples()) + " samples to go");
      log::info(shape_batch_text(c));
    }
    // The replicas go by group (the ranks of a job of whole samples): each group keeps the
    // checkpoint's group of its index (every rank of it the same; part_of_group).
    const std::string unit = split ? "group" : "rank";
    const auto ranks_text = [&](int64_t first, int64_t last) {
      return first == last ? unit + " " + std::to_string(first)
                           : unit + "s " + std::to_string(first) + " to " + std::to_string(last);
    };
    const int64_t were = then.groups, groups = m_spatial.ranks;
    if (m_root && s.per_rank_parts && groups > were)
      log::info(ranks_text(were, groups - 1) + (groups - 1 == were ? " starts its" : " start their") +
                " replicas from the central model; the others keep theirs");
    else if (m_root && s.per_rank_parts && groups < were)
      log::info("the replicas of " + ranks_text(groups, were - 1) + " are dropped; the others keep theirs");
    else if (m_root && s.per_rank_parts && split)
      log::info("each group keeps the replicas of the checkpoint's group of its number");
  }
  // What the checkpoint keeps per node (sma's node centres under parallel.periods) carries
  // over where this job's nodes are the checkpoint's (outer's always is: check_resumable),
  // node by node of the groups (the ranks, unsplit).
  const bool regrouped = s.per_rank_parts && !checkpoint::nodes_carry_over(then.node_of_group, m_spatial.node_of_rank);
  if (regrouped && m_root && config::sync_periods(m_cfg.parallel).by_level())
    log::info("this job's nodes group the checkpoint's ranks otherwise: the node centres start from the job's");
  g.restore(ck.shared, ck.has_own ? &ck.own : nullptr, ck.from_centre, regrouped);
  restore_pace(ck, relisted || reshaped);
  m_last_eval_step = s.last_eval_step;
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
  place_synchronous_start();
}

// How the schedule goes on from a checkpoint (docs/training.md, "Extending a finished run").
// Resuming a finished run (its checkpoint at the end of the steps it had planned) with more steps
// starts a new segment of the schedule there, over the steps added (optim/schedule.hpp); its
// segments are kept in every later checkpoint, so that a resume inside one goes on with it.
// Resuming an unfinished run with another length (train.epochs, train.max_steps) stretches the
// segment it is in to the new end. Otherwise the checkpoint's frame is kept as it was.
void TrainingRun::continue_schedule(const checkpoint::TrainerState& s) {
  StepPlan& p = m_data.plan;
  const std::string where = m_checkpoint ? m_checkpoint->path.string() : std::string("the checkpoint");
  p.schedule_segments = checkpoint::schedule_segments_of(s.schedule_segments, where);
  // A checkpoint of an earlier version without a frame: the frame is this plan's already.
  if (s.schedule_steps <= 0 || s.schedule_step_samples <= 0) return;
  if (m_pos.step >= p.total_steps) return;  // nothing left to train: already_complete says so
  const int64_t end = schedule_end(p, m_pos.step, m_pos.samples_done, step_samples());
  const int64_t per = std::max<int64_t>(1, p.schedule_step_samples);
  // Finished: at the end of its plan (earlier versions: its schedule spent).
  const bool finished = s.planned_steps > 0 ? s.step >= s.planned_steps
                                            : s.samples_done >= s.schedule_steps * s.schedule_step_samples;
  if (finished) {
    const int64_t start = m_pos.samples_done / per;
    if (end <= start || (!p.schedule_segments.empty() && start <= p.schedule_segments.back())) return;
    p.schedule_segments.push_back(start);
    p.schedule_steps = end;
    if (m_root)
      log::info("resuming a finished run at step " + std::to_string(s.step) + " of " +
                std::to_string(s.planned_steps > 0 ? s.planned_steps : s.step) + ": a new schedule segment over steps " +
                std::to_string(s.step) + ".." + std::to_string(p.total_steps) + " (" +
                std::to_string(p.total_steps - s.step) + " steps): " + m_device.schedule->describe(end - start));
    return;
  }
  const config::Config then = config::parse_config(s.config, where + " (its config)");
  if (then.train.epochs == m_cfg.train.epochs && then.train.max_steps == m_cfg.train.max_steps) return;
  if (end == p.schedule_steps) return;
  const int64_t start = schedule_start(p);
  const int64_t was = p.schedule_steps;
  const double before = lr_at_samples(m_pos.samples_done);
  p.schedule_steps = end;
  const double after = lr_at_samples(m_pos.samples_done);
  if (!m_root) return;
  std::string keys;
  const auto changed = [&](const char* key, int64_t was_value, int64_t value) {
    if (was_value != value)
      keys += (keys.empty() ? "" : ", ") + std::string(key) + " " + std::to_string(was_value) + " -> " +
              std::to_string(value);
  };
  changed("train.epochs", then.train.epochs, m_cfg.train.epochs);
  changed("train.max_steps", then.train.max_steps, m_cfg.train.max_steps);
  char rates[96];
  std::snprintf(rates, sizeof(rates), "from %.4g to %.4g", before, after);
  log::info("resuming step " + std::to_string(s.step) + " with " + keys + ": the schedule" +
            (start > 0 ? "'s segment from step " + std::to_string(start) : std::string()) + " now spans " +
            std::to_string(end - start) + " steps (was " + std::to_string(was - start) +
            "), and the learning rate at step " + std::to_string(s.step + 1) + " goes " + rates);
}

// outer's synchronous start (parallel.outer.start_step, or start_fraction of the first plan's
// steps) and the end of the learning rate's warm-up, and local-sgd's synchronous start
// (parallel.start_step), are places in the schedule's frame: as steps of this run they move
// where an earlier attempt trained on another shape (step_plan.hpp, run_step_of). A run of one
// shape throughout keeps the steps the config gives.
void TrainingRun::place_synchronous_start() {
  const StepPlan& p = m_data.plan;
  if (m_algorithm == parallel::Algorithm::local_sgd)
    m_device.group->set_local_start_step(
        run_step_of(p, m_cfg.parallel.start_step, m_pos.step, m_pos.samples_done, step_samples()));
  if (m_algorithm != parallel::Algorithm::outer) return;
  // start_fraction is of the first segment: a segment added later does not start again
  // synchronously; its warm-up does count as one (outer's QSR keeps its rounds at H through it).
  const int64_t first_span = p.schedule_segments.empty() ? p.schedule_steps : p.schedule_segments.front();
  const int64_t start = m_cfg.parallel.outer.start_at(first_span);
  m_device.group->set_outer_steps(run_step_of(p, start, m_pos.step, m_pos.samples_done, step_samples()),
                                  run_step_of(p, schedule_start(p) + m_cfg.schedule.warmup_steps, m_pos.step,
                                              m_pos.samples_done, step_samples()));
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
                               (m_pos.at.used - s.epoch_start_batches) * m_cfg.train.batch_size * m_spatial.ranks
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
  s.rank_nodes = checkpoint::rank_nodes_text(m_node_of_rank);
  s.schedule_steps = m_data.plan.schedule_steps;
  s.schedule_step_samples = m_data.plan.schedule_step_samples;
  s.schedule_steps_per_epoch = m_data.plan.schedule_steps_per_epoch;
  s.schedule_segments = checkpoint::schedule_segments_text(m_data.plan.schedule_segments);
  s.planned_steps = m_data.plan.total_steps;
  s.last_eval_step = m_last_eval_step;
  s.learner_batch = m_cfg.train.batch_size;
  s.lr_factor = m_lr_factor;
  s.per_rank_parts = g.replicas_differ();
  s.train_samples = m_data.n_train;
  s.param_count = static_cast<int64_t>(g.parameter_count());
  s.state_count = static_cast<int64_t>(g.state_value_count());
  // The config as the user gave it: a later attempt compares its own with it (check_resumable).
  config::Config asked = m_cfg;
  asked.train.batch_size = m_requested_batch;
  s.config = to_toml(asked);
  s.config_origin = m_origin;
  s.model = m_data.spec.name;
  s.algorithm = parallel::algorithm_name(m_algorithm);
  return s;
}

// train.epoch_quorum: this rank's stream from its part, where this job reads the checkpoint's
// lists (the same shape); otherwise its carried samples come again in the sampler's order of
// the next epochs, said so. Counts of steps carry over either way.
void TrainingRun::restore_pace(const checkpoint::LoadedCheckpoint& ck, bool other_shape) {
  const checkpoint::CheckpointData& own = ck.own;
  const bool has = ck.has_own && own.ints.count("pace/ranges") != 0;
  const int64_t carried = has ? own.integer("pace/carried") : 0;
  const bool keep = has && m_pace.on && !other_shape && !ck.from_centre;
  // Collective on every rank, a part or not.
  const int64_t dropped = m_world.allreduce_sum(keep ? 0 : carried);
  if (m_root && dropped > 0)
    log::info(std::to_string(dropped) + " samples the checkpoint's slower nodes carried (train.epoch_quorum) are " +
              (m_pace.on ? "read in this job's order of the next epochs: this job's ranks read other lists"
                         : "not carried on: this run has train.epoch_quorum = 1, so its nodes train every step"));
  if (!has) return;
  m_pace.trained_steps = own.integer("pace/trained_steps");
  m_pace.idle_steps = own.integer("pace/idle_steps");
  if (!keep) return;
  std::vector<SampleRange> ranges;
  for (int64_t i = 0; i < own.integer("pace/ranges"); ++i) {
    const std::string k = "pace/range/" + std::to_string(i) + "/";
    ranges.push_back({own.integer(k + "epoch"), own.integer(k + "from"), own.integer(k + "begin"),
                      own.integer(k + "end")});
  }
  m_pace.stream = SampleStream(std::move(ranges));
  m_pace.carried = carried;
  m_pace.restored = true;
}

// The job's state at the end of step m_pos.step, in <run dir>/checkpoints (checkpoint.hpp).
void TrainingRun::write_checkpoint() {
  const Stopwatch t;
  parallel::LearnerGroup& g = *m_device.group;
  g.prepare_checkpoint();  // every rank: asynchronous nodes agree on one centre first
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
  if (m_pace.on && state.per_rank_parts) {
    // This rank's stream (pace.hpp): the samples it has not trained yet, carried ones first.
    const std::vector<SampleRange>& ranges = m_pace.stream.ranges();
    own.ints["pace/ranges"] = std::ssize(ranges);
    for (size_t i = 0; i < ranges.size(); ++i) {
      const std::string k = "pace/range/" + std::to_string(i) + "/";
      own.ints[k + "epoch"] = ranges[i].epoch;
      own.ints[k + "from"] = ranges[i].from;
      own.ints[k + "begin"] = ranges[i].begin;
      own.ints[k + "end"] = ranges[i].end;
    }
    own.ints["pace/carried"] = m_pace.carried;
    own.ints["pace/trained_steps"] = m_pace.trained_steps;
    own.ints["pace/idle_steps"] = m_pace.idle_steps;
  }
  const fs::path path = m_store->save(m_pos.step, shared, state.per_rank_parts ? &own : nullptr);
  m_last_checkpoint_step = m_pos.step;
  m_last_checkpoint = path;
  m_timeline.add("checkpoint", records::Timeline::k_rank_track, t.started_at(), steady_seconds());
  if (m_log) m_log->checkpoint_written(m_pos.step, path, t.seconds());
}

}  // namespace squall::train
