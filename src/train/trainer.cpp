// The training loop (docs/design.md, "The trainer"): every rank drives its learner group
// through the epochs; the run log writes what happens, the checkpoint code keeps it.
#include "src/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>

#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "io/pictures/prediction_picture.hpp"
#include "io/records/progress.hpp"
#include "src/config/setup.hpp"
#include "src/train/stop_signal.hpp"
#include "src/train/training_run.hpp"

namespace squall::train {
namespace {

// Records the group's phases (forward, backward, the sums, the update, the host's waits) and
// the allreduce's levels on their tracks.
void attach_timeline(records::Timeline& timeline, parallel::LearnerGroup& group, mpi::Allreduce& allreduce) {
  records::Timeline* t = &timeline;
  group.set_phase_hook([t](const char* phase, int learner, double t0, double t1) {
    t->add(phase, learner < 0 ? records::Timeline::k_rank_track : records::Timeline::learner_track(learner), t0, t1);
  });
  allreduce.set_level_hook([t](mpi::Level level, double t0, double t1, size_t) {
    switch (level) {
      case mpi::Level::node_reduce_scatter:
        t->add("node reduce-scatter", records::Timeline::k_allreduce_track + 1, t0, t1);
        break;
      case mpi::Level::cross_allreduce:
        t->add("cross-node allreduce", records::Timeline::k_allreduce_track + 2, t0, t1);
        break;
      case mpi::Level::node_allgather:
        t->add("node allgather", records::Timeline::k_allreduce_track + 3, t0, t1);
        break;
      case mpi::Level::flat_allreduce:
        t->add(mpi::level_name(level), records::Timeline::k_allreduce_track, t0, t1);
        break;
    }
  });
}


// train.target's metric in the evaluation (nullopt: no target).
std::optional<double> target_metric(const config::TargetConfig& t, const nn::ConfusionMatrix& cm) {
  switch (t.metric) {
    case config::TargetMetric::none: break;
    case config::TargetMetric::accuracy: return cm.accuracy();
    case config::TargetMetric::miou: return cm.mean_iou();
  }
  return std::nullopt;
}

}  // namespace

std::string fnv1a_hex(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

TrainingRun::TrainingRun(const config::Config& cfg, const std::string& origin, const RunOptions& options)
    : m_cfg(cfg),
      m_requested_batch(cfg.train.batch_size),
      m_origin(origin),
      m_options(options),
      m_init_start_s(system_seconds()),
      m_topo(mpi::Topology::create(options.ranks_per_node)),
      m_world(m_topo.world()),
      m_rank(m_topo.rank()),
      m_ranks(m_topo.world_size()),
      m_root(m_rank == 0),
      m_algorithm(cfg.parallel.algorithm),
      m_timeline(options.timeline) {
  install_stop_handlers();
}

// In the order it happens. A failure that only some ranks meet before training (a data folder
// missing on one node, a run dir another node cannot write) ends every rank alike: each stage
// that may fail locally runs under run_agreed, which leaves nobody waiting in a collective.
TrainResult TrainingRun::run() {
  m_node_of_rank = m_world.allgather(m_topo.node());
  m_spatial = make_spatial_job(m_cfg, m_origin, m_topo, m_node_of_rank);
  mpi::run_agreed(m_world, [&] { setup_pace(); });
  mpi::run_agreed(m_world, [&] {
    m_fault = FaultInjection::from_env();
    // The sampler, the plan and the schedule see one rank per spatial group.
    m_data = open_training_data(m_cfg, m_origin, m_spatial.node_of_rank);
    place_tiles(m_spatial, m_cfg, m_origin, m_data.spec, m_data.train->info());
  });
  mpi::run_agreed(m_world, [&] { prepare_run_dir(); });
  load_checkpoint();  // and fit the batch to this job's shape (elastic.batch)
  read_init_weights();  // train.init_from, for a run that does not resume
  m_device = build_training_device(m_cfg, m_origin, m_options, m_topo, m_spatial, m_data, m_lr_factor);
  if (m_init) {
    mpi::run_agreed(m_world, [&] { start_from_init_weights(); });
    m_init.reset();
  }
  mpi::run_agreed(m_world, [&] { clear_earlier_run(); });
  if (m_checkpoint) {
    restore(*m_checkpoint, m_checkpoint_state);
    m_checkpoint.reset();
  }
  if (m_pace.on) fit_paced_end();  // a paced run resumed past its planned steps goes on
  if (m_pos.step >= m_data.plan.total_steps || m_target) return already_complete();
  mpi::run_agreed(m_world, [&] { m_trace = SampleTrace::from_env(m_rank, m_pos.attempt); });
  m_feed = std::make_unique<BatchFeed>(*m_device.loader, m_device.augment, m_spatial.tile_sample(m_data.train->info().sample),
                                       static_cast<uint64_t>(m_cfg.run.seed), m_rank,
                                       m_device.lookahead && !m_pace.on);  // a paced step may take no batch
  train();
  if (m_stop_flags != 0) return stopped();
  if (m_cfg.checkpoint.at_end && m_last_checkpoint_step != m_pos.step) write_checkpoint();
  return finish();
}

// The epochs: a step at a time, evaluating and checkpointing when due, until the last step, a
// stop signal or the target.
void TrainingRun::train() {
  m_world.barrier();
  m_timeline.set_origin(steady_seconds());
  if (m_timeline.enabled()) attach_timeline(m_timeline, *m_device.group, *m_device.allreduce);
  records::RunLogOptions lo = config::run_log_options(m_cfg);
  lo.root = m_root;
  lo.attempt = m_pos.attempt;
  lo.keep_metrics_lines = m_metrics_lines_at_resume;
  lo.earlier_s = m_pos.earlier_s;
  lo.earlier_eval_s = m_pos.earlier_eval_s;
  lo.live_progress = records::progress_redraws(m_ranks);
  lo.per_pixel = m_data.train->info().per_pixel_labels;
  lo.class_names = m_data.train->info().class_names;
  m_log = std::make_unique<records::RunLog>(lo);
  m_log->opened(run_facts());
  m_flags = std::make_unique<mpi::FlagAgreement>(m_world);
  m_since_time_checkpoint.restart();
  const StepPlan& plan = m_data.plan;
  m_steady.start(plan.total_steps - m_pos.step);
  bool stop = false;
  for (int64_t epoch = m_pos.start.epoch; epoch <= plan.epochs && m_pos.step < plan.total_steps && !stop; ++epoch) {
    // A resumed run starts inside its checkpoint's epoch, at the batch after the checkpoint.
    // One resumed after its epoch's last step has no step left in it, only the evaluation.
    const bool first = epoch == m_pos.start.epoch;
    int64_t used = first ? m_pos.start.used : 0;
    if (m_pace.on) {
      start_paced_epoch(epoch, used, first);
    } else if (epoch_has_step(plan, used)) {
      std::vector<int64_t> indices = sampler_list(epoch, first ? m_pos.start_position : 0);
      const int64_t skip =
          std::min<int64_t>((used - (first ? m_pos.start_batches : 0)) * m_cfg.train.batch_size, std::ssize(indices));
      indices.erase(indices.begin(), indices.begin() + skip);
      m_device.loader->start_epoch(std::move(indices), plan.batches_per_epoch - used);
    }
    m_log->epoch_started(epoch);
    while (!stop && epoch_has_step(plan, used) && m_pos.step < plan.total_steps) {
      used += plan.learners;
      // Under rounds that agree once a round (pace.hpp), the step may be one this node lets
      // pass, and the job agrees on its flags only at the round's end.
      bool round_end = true;
      if (m_pace.flags_per_round)
        round_end = round_step(epoch, used);
      else
        train_step(epoch, used);
      if (m_pace.on) fit_paced_end();  // the run ends when it has trained its samples
      // The last step: the job synchronises once more (the streamed outer step in flight, the
      // final outer step, local-sgd's average, sma's centre), so that the final evaluation and
      // the model hold every step.
      if (m_pos.step == plan.total_steps) m_device.group->complete();
      if (eval_after_step(plan, m_cfg.train.eval_every_steps, m_pos.step)) {
        evaluate(epoch);
        if (m_target) complete_at_target(epoch);
      }
      stop = after_step(round_end) || m_target.has_value();
    }
    if (m_pace.on) end_paced_epoch(epoch, !epoch_has_step(plan, used) || m_pos.step == plan.total_steps);
    // A finished run extended (docs/training.md, "Extending a finished run") resumes after the
    // evaluation of its last epoch: that model was evaluated already.
    const bool evaluated = first && m_pos.step == m_pos.first_step && m_last_eval_step == m_pos.step;
    if (!stop && !evaluated && eval_at_epoch_end(plan, m_cfg.train.eval_every_steps, m_pos.step)) {
      evaluate(epoch);
      if (m_target) complete_at_target(epoch);
    }
    stop = stop || m_target.has_value();
    m_log->epoch_ended(epoch);
  }
  m_feed->release_all();
  if (m_pace.on || m_pace.flags_per_round) gather_pace_records();
  if (!m_classes_checked) check_classes();  // a run of fewer batches than the check looks at
  m_log->end_progress();
  m_loop_s = m_log->clock().attempt_s();
}

// Rank 0 counts the classes of the labels in the first k_class_batches batches its learners
// take (docs/training.md, "A training set of one class"): deterministic for a seed, and cheap.
void TrainingRun::watch_classes(const std::vector<parallel::LearnerBatch>& inputs) {
  if (!m_root) {
    m_classes_checked = true;
    return;
  }
  const data::DatasetInfo& info = m_data.train->info();
  const nn::Shape sample = m_spatial.tile_sample(info.sample);
  const int64_t labels = m_cfg.train.batch_size * (info.per_pixel_labels ? sample.h() * sample.w() : 1);
  m_class_counts.resize(static_cast<size_t>(std::max<int64_t>(info.classes, 1)), 0);
  for (const parallel::LearnerBatch& b : inputs) {
    if (b.labels == nullptr || m_class_batches == k_class_batches) continue;
    for (int64_t i = 0; i < labels; ++i)
      if (b.labels[i] >= 0 && b.labels[i] < info.classes) ++m_class_counts[static_cast<size_t>(b.labels[i])];
    ++m_class_batches;
  }
  if (m_class_batches == k_class_batches) check_classes();
}

// Warns when every label counted by watch_classes is of one class.
void TrainingRun::check_classes() {
  m_classes_checked = true;
  int64_t present = 0, only = -1, total = 0;
  for (size_t c = 0; c < m_class_counts.size(); ++c)
    if (m_class_counts[c] > 0) ++present, only = static_cast<int64_t>(c), total += m_class_counts[c];
  if (!m_root || present != 1 || m_class_counts.size() < 2) return;
  const std::vector<std::string>& names = m_data.train->info().class_names;
  const std::string name = static_cast<size_t>(only) < names.size() ? " (" + names[static_cast<size_t>(only)] + ")" : "";
  m_log->warn("data.train = " + m_cfg.data.train + ": all " + std::to_string(total) + " labels of the first " +
              std::to_string(m_class_batches) + " training batches are class " + std::to_string(only) + name +
              ", one class of " + std::to_string(m_class_counts.size()) +
              ": a model trained on them learns to predict that class everywhere; check the data's labels "
              "(squall data inspect counts them; squall data label labels climate files)");
}

// train.target was reached before the last step: the run ends here, so the job synchronises
// once more (LearnerGroup::complete), and where that moved the central model the final model is
// evaluated again (the target stays the evaluation's that reached it) and a checkpoint already
// written at this step is written again: the summary, the checksum and the final checkpoint are
// of the final model.
void TrainingRun::complete_at_target(int64_t epoch) {
  if (!m_device.group->complete()) return;
  evaluate(epoch, true);
  if (m_last_checkpoint_step == m_pos.step) {
    const Stopwatch t;
    write_checkpoint();
    m_steady.exclude(t.seconds());
  }
}

// One step: a batch for every learner, the group's step, the logs, the auto-tuner. `used`: the
// epoch's batches taken so far, this step's included.
void TrainingRun::train_step(int64_t epoch, int64_t used) {
  const double t_load = steady_seconds();
  const std::vector<parallel::LearnerBatch>& inputs = m_feed->take(m_data.plan, epoch, used, m_pos.step);
  if (!m_classes_checked) watch_classes(inputs);
  if (m_trace.on()) {
    std::vector<int64_t> indices;
    for (const input::Batch* b : m_feed->held()) indices.insert(indices.end(), b->indices.begin(), b->indices.end());
    m_trace.step(epoch, m_pos.step + 1, indices);
  }
  m_timeline.add("load", records::Timeline::k_rank_track, t_load, steady_seconds());
  m_fault.before_step(m_rank, m_pos.step + 1);
  const double lr = lr_at_samples(m_pos.samples_done);
  const Stopwatch step_time;
  std::vector<float> losses;
  try {
    losses = m_device.group->step(inputs, m_pos.step, static_cast<float>(lr), m_feed->next());
    // step() returns after the host's wait for the losses: the device's work is done.
    m_steady.step_ended(steady_seconds(), step_samples());
    ++m_group_steps;
  } catch (const parallel::NonFiniteStep& e) {
    m_log->end_progress();
    diverged(e, epoch, lr);
  }
  m_feed->release_step();
  ++m_pos.step;
  m_pos.at = {epoch, used};
  // A paced step counts the samples the job trained in it (nodes may let it pass).
  m_pos.samples_done += m_pace.on ? m_pace.step_trained : step_samples();
  log_step(epoch, lr, losses, step_time.seconds());
}

// The step's loss into the logging window, the progress line, the window's record every
// log_every steps; then the auto-tuner, which may change the learner count.
void TrainingRun::log_step(int64_t epoch, double lr, const std::vector<float>& losses, double step_s) {
  // train.nonfinite = skip: a learner whose loss was not finite took no update (the group
  // skipped it); its loss stays out of the mean. stop: the group has thrown already.
  double loss = 0;
  int finite = 0;
  for (float l : losses)
    if (std::isfinite(l)) loss += l, ++finite;
  // An idle step (train.epoch_quorum) has no loss: nothing diverged.
  if (finite == 0 && !losses.empty() && m_cfg.train.nonfinite != config::NonFinitePolicy::skip)
    throw Error("training diverged: the loss is not finite at step " + std::to_string(m_pos.step) + " (rank " +
                std::to_string(m_rank) + ")");
  if (finite > 0) m_window_loss.add(loss / finite);
  const double elapsed = m_log->clock().attempt_s();
  const double rate = static_cast<double>(m_pos.samples_done - m_pos.samples_at_start) / std::max(elapsed, 1e-9);
  const StepPlan& plan = m_data.plan;
  m_log->progress({m_pos.step, plan.total_steps, static_cast<int>(epoch), static_cast<int>(plan.epochs),
                   m_window_loss.mean(), rate, elapsed, m_pos.step - m_pos.first_step});
  if (m_pos.step % m_cfg.train.log_every_steps == 0 || m_pos.step == plan.total_steps) {
    m_last_train_loss = m_window_loss.mean();
    const parallel::LearnerGroup& g = *m_device.group;
    records::TrainWindow w;
    w.step = m_pos.step;
    w.epoch = epoch;
    w.loss = m_last_train_loss;
    w.lr = lr;
    w.learners = g.learners();
    w.samples_per_s = rate;
    w.steady_samples_per_s = m_steady.samples_per_s();
    w.compute_s = g.compute_seconds();
    w.allreduce_s = g.reduce_seconds();
    w.io_wait_s = m_device.loader->io_wait_s();
    if (g.options().loss_scaling.dynamic) w.loss_scale = g.loss_scale();
    if (g.options().loss_scaling.dynamic || g.options().skip_nonfinite) w.skipped_steps = g.skipped_steps();
    if (m_spatial.split_sample()) {
      const nn::HaloTimes h = train_halo_times();
      w.halo_exposed_s = h.exposed;
      w.halo_hidden_s = h.hidden;
    }
    m_log->train_window(w);
    m_window_loss.reset();
  }
  if (const int change = m_device.tuner->after_step(m_world, plan.learners, step_samples(), step_s); change != 0) {
    const Stopwatch t;
    reshape(change);
    m_steady.exclude(t.seconds());
  }
}

// After each step the job agrees, one step late and without waiting (mpi/agreement.hpp), on
// whether any rank received a stop signal and whether rank 0's clock says a timed checkpoint is
// due; checkpoints by step count need no agreement. Writes the checkpoint when one is due;
// returns true when the run must stop.
bool TrainingRun::after_step(bool exchange) {
  uint64_t agreed = 0;
  if (exchange) {
    uint64_t mine = 0;
    if (const int sig = stop_signal(); sig != 0) mine |= sig == SIGUSR1 ? k_flag_sigusr1 : k_flag_sigterm;
    const double every_s = m_cfg.checkpoint.every_minutes * 60.0;
    if (m_root && every_s > 0 && m_since_time_checkpoint.seconds() >= every_s) {
      mine |= k_flag_timed;
      m_since_time_checkpoint.restart();
    }
    if (m_pace.on) {
      // This rank's seconds per trained step (the mean of its last ones, those that ended a
      // round with the outer step's wait left out), gathered beside the flags; the previous
      // round's come back, one round late like the flags, and fit the next round (pace.hpp).
      std::vector<double> all;
      agreed = m_flags->exchange(mine, m_pace.step_times.mean(), all);
      if (!m_pace.forced.empty()) {
        m_pace.node_seconds = m_pace.forced;
      } else if (!all.empty()) {
        m_pace.node_seconds.assign(static_cast<size_t>(m_pace.nodes), 0.0);
        for (size_t r = 0; r < all.size(); ++r) {
          double& n = m_pace.node_seconds[static_cast<size_t>(m_node_of_rank[r])];
          n = std::max(n, all[r]);
        }
      }
    } else {
      agreed = m_flags->exchange(mine);
    }
  }
  // A signal after the last step changes nothing: the run ends, with its final checkpoint.
  const bool last = m_pos.step == m_data.plan.total_steps || m_target.has_value();
  const bool stop = (agreed & (k_flag_sigterm | k_flag_sigusr1)) != 0 && !last;
  const bool due = stop || (agreed & k_flag_timed) != 0 || checkpoint_after_step(m_cfg.checkpoint.every_steps, m_pos.step);
  if (due && !(last && m_cfg.checkpoint.at_end)) {
    const Stopwatch t;
    write_checkpoint();
    m_steady.exclude(t.seconds());
  }
  if (stop) m_stop_flags = agreed;
  return stop;
}

// The auto-tuner added (+1) or removed (-1) a learner: each step now takes more or fewer
// batches, so the rest of the run takes fewer or more steps.
void TrainingRun::reshape(int change) {
  parallel::LearnerGroup& g = *m_device.group;
  if (change > 0) g.add_learner(); else g.remove_learner();
  replan(m_data.plan, g.learners(), m_pos.step, m_pos.at);
  m_log->autotuned(m_pos.step, m_device.tuner->decisions().back(), g.learners(), m_data.plan.steps_per_epoch,
                   m_data.plan.total_steps);
}

// The central model on the test samples, split over the ranks and summed; then the target.
void TrainingRun::evaluate(int64_t epoch, bool final_model) {
  const Stopwatch t;
  if (!final_model) m_log->eval_started(epoch);
  const data::DataSource& test = *m_data.test;
  // Each spatial group evaluates its share of the samples, each of its ranks its tile of them.
  const int64_t groups = m_spatial.ranks, group = m_spatial.rank;
  const int64_t n = m_data.n_test, begin = n * group / groups, end = n * (group + 1) / groups;
  // Rank 0 evaluates the first test samples: it draws a few of them.
  std::vector<pictures::PredictionSample> pictures(m_root && test.info().per_pixel_labels ? eval::k_picture_samples
                                                                                          : 0);
  eval::EvalTile tile;
  if (m_spatial.split_sample()) {
    tile.window = &*m_spatial.window;
    tile.comm = m_spatial.tile_comm();
    tile.class_weights.assign(m_cfg.data.class_weights.begin(), m_cfg.data.class_weights.end());
  }
  const nn::HaloTimes halo_before = tile.comm != nullptr ? tile.comm->halo_times() : nn::HaloTimes{};
  m_last_eval = eval::evaluate_range(m_device.group->eval_graph(), *m_device.backend, *m_device.stream, test, begin,
                                     end, m_device.labels, m_device.predictions, m_device.class_weights,
                                     pictures.empty() ? nullptr : &pictures, tile);
  if (tile.comm != nullptr) {
    const nn::HaloTimes after = tile.comm->halo_times();
    m_eval_halo.exposed += after.exposed - halo_before.exposed;
    m_eval_halo.hidden += after.hidden - halo_before.hidden;
    m_eval_halo.exchanges += after.exchanges - halo_before.exchanges;
    m_eval_halo.bytes += after.bytes - halo_before.bytes;
  }
  if (!pictures.empty()) {
    const std::string why =
        pictures::write_prediction_picture(m_dir, epoch, pictures, m_spatial.tile_sample(test.info().sample));
    if (!why.empty()) m_log->warn(why);
  }
  eval::sum_over_ranks(m_last_eval, m_world);
  m_last_eval_loss = m_last_eval.loss();
  m_last_eval_step = m_pos.step;
  m_timeline.add("eval", records::Timeline::k_rank_track, t.started_at(), steady_seconds());
  const double epochs_done = static_cast<double>(m_pos.samples_done) / static_cast<double>(m_data.n_train);
  m_log->evaluated({m_pos.step, epoch, &m_last_eval.cm, m_last_eval_loss, t.seconds(), epochs_done, final_model});
  m_steady.exclude(t.seconds());
  const std::optional<double> value = target_metric(m_cfg.train.target, m_last_eval.cm);
  if (!value || *value < m_cfg.train.target.value || m_target) return;
  m_target = records::TargetFacts{config::k_target_metrics.name(m_cfg.train.target.metric),
                                  m_cfg.train.target.value,
                                  *value,
                                  m_pos.step,
                                  epoch,
                                  m_log->clock().run_s()};
  m_log->target_reached(*m_target);
}

// The learning rate of the step after `samples_done` samples: the schedule's segment it is in
// (optim/schedule.hpp), whose peak holds elastic.batch's factor (make_schedule).
double TrainingRun::lr_at_samples(int64_t samples_done) const {
  const StepPlan& p = m_data.plan;
  return m_device.schedule->lr_in_segment(schedule_step(p, samples_done), schedule_start(p), p.schedule_steps);
}

// train.nonfinite = stop: the step, the rank, the learner and the layer, then the job ends.
void TrainingRun::diverged(const parallel::NonFiniteStep& e, int64_t epoch, double lr) {
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
                            (text.empty() ? "no learner's gradients were non-finite before the sum" : text) + "; " +
                            divergence_hint() + " (or train.nonfinite = skip to drop such steps)",
                        k_exit_failure);
}

// The likely causes of a divergence, naming the keys that govern them.
std::string TrainingRun::divergence_hint() const {
  std::string hint = "lower optimizer.lr or add schedule.warmup_steps";
  if (m_algorithm != parallel::Algorithm::sma) return hint;
  const parallel::SmaCoefficients c = m_device.group->sma();
  char text[512];
  std::snprintf(text, sizeof(text),
                "; sma with %d learner(s) in the job pulls each learner by parallel.alpha = %g and moves the central "
                "model by beta = %g (parallel.centre_rate%s) with parallel.momentum = %g: a smaller parallel.momentum "
                "or parallel.centre_rate damps the central model",
                m_device.group->learners() * m_spatial.ranks, c.alpha, c.beta,
                m_cfg.parallel.centre_rate > 0 ? "" : " = 0: min(alpha x learners, 1)", c.mu);
  return hint + text;
}

TrainResult run_training(const config::Config& cfg, const std::string& origin, const RunOptions& options) {
  return TrainingRun(cfg, origin, options).run();
}

nn::HaloTimes TrainingRun::train_halo_times() const {
  nn::HaloTimes h = m_spatial.comm->halo_times();
  h.exposed -= m_eval_halo.exposed;
  h.hidden -= m_eval_halo.hidden;
  h.exchanges -= m_eval_halo.exchanges;
  h.bytes -= m_eval_halo.bytes;
  return h;
}

}  // namespace squall::train
