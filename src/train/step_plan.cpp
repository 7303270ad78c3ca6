#include "src/train/step_plan.hpp"

#include <algorithm>

namespace squall::train {

StepPlan plan_steps(int64_t batches_per_epoch, int learners, int ranks, int64_t batch, int64_t epochs,
                    int64_t max_steps) {
  StepPlan p;
  p.batches_per_epoch = batches_per_epoch;
  p.learners = std::max(1, learners);
  p.max_steps = max_steps;
  p.train_epochs = epochs;
  p.steps_per_epoch = batches_per_epoch / p.learners;
  if (p.steps_per_epoch == 0) return p;
  p.total_steps = p.steps_per_epoch * epochs;
  if (max_steps > 0) {
    // max_steps alone (epochs = 0) runs as many epochs as it needs.
    p.total_steps = epochs > 0 ? std::min(p.total_steps, max_steps) : max_steps;
    p.epochs = (p.total_steps + p.steps_per_epoch - 1) / p.steps_per_epoch;
  } else {
    p.epochs = epochs;
  }
  p.schedule_steps = p.total_steps;
  p.schedule_step_samples = batch * p.learners * ranks;
  p.schedule_steps_per_epoch = p.steps_per_epoch;
  return p;
}

void replan(StepPlan& p, int learners, int64_t step, EpochPosition at) {
  p.learners = std::max(1, learners);
  p.steps_per_epoch = p.batches_per_epoch / p.learners;
  const int64_t rest_of_epoch = std::max<int64_t>(0, p.batches_per_epoch - at.used) / p.learners;
  // The last of train.epochs epochs at the new count; max_steps caps it (or alone decides).
  const int64_t by_epochs = step + rest_of_epoch + std::max<int64_t>(0, p.train_epochs - at.epoch) * p.steps_per_epoch;
  if (p.max_steps == 0) {
    p.total_steps = by_epochs;
    p.epochs = std::max(p.train_epochs, at.epoch);
    return;
  }
  p.total_steps = p.train_epochs > 0 ? std::min(by_epochs, p.max_steps) : p.max_steps;
  const int64_t after_this_epoch = std::max<int64_t>(0, p.total_steps - step - rest_of_epoch);
  p.epochs = at.epoch + (after_this_epoch + p.steps_per_epoch - 1) / p.steps_per_epoch;
}

SampleEnd fit_end_to_samples(StepPlan& p, int64_t step, EpochPosition at, int64_t samples_done) {
  if (p.max_steps > 0 || p.steps_per_epoch < 1) return SampleEnd::none;
  if (samples_done >= p.schedule_steps * p.schedule_step_samples) {
    if (step >= p.total_steps) return SampleEnd::none;
    p.total_steps = step;
    p.epochs = at.epoch;
    return SampleEnd::ended;
  }
  if (step < p.total_steps) return SampleEnd::none;
  const bool in_epoch = epoch_has_step(p, at.used);
  p.epochs = at.epoch + (in_epoch ? 0 : 1);
  p.total_steps = step + (in_epoch ? (p.batches_per_epoch - at.used) / p.learners : p.steps_per_epoch);
  return SampleEnd::extended;
}

int64_t schedule_step(const StepPlan& p, int64_t samples_done) {
  return std::min(samples_done / std::max<int64_t>(1, p.schedule_step_samples), p.schedule_steps - 1);
}

int64_t schedule_start(const StepPlan& p) { return p.schedule_segments.empty() ? 0 : p.schedule_segments.back(); }

int64_t schedule_end(const StepPlan& p, int64_t step, int64_t samples_done, int64_t step_samples) {
  const int64_t per = std::max<int64_t>(1, p.schedule_step_samples);
  const int64_t samples = samples_done + std::max<int64_t>(0, p.total_steps - step) * step_samples;
  return (samples + per - 1) / per;
}

int64_t run_step_of(const StepPlan& p, int64_t frame_step, int64_t step, int64_t samples_done,
                    int64_t step_samples) {
  const int64_t target = frame_step * std::max<int64_t>(1, p.schedule_step_samples);
  if (samples_done >= target) return std::min(frame_step, step);
  const int64_t per_step = std::max<int64_t>(1, step_samples);
  return step + (target - samples_done + per_step - 1) / per_step;
}

bool epoch_has_step(const StepPlan& p, int64_t used) { return used + p.learners <= p.batches_per_epoch; }

bool eval_after_step(const StepPlan& p, int64_t every, int64_t step) {
  return every > 0 && step % every == 0 && step != p.total_steps;
}

bool eval_at_epoch_end(const StepPlan& p, int64_t every, int64_t step) {
  return every == 0 || step == p.total_steps;
}

bool checkpoint_after_step(int64_t every, int64_t step) { return every > 0 && step % every == 0; }

int64_t first_synchronisation(int64_t period, int64_t start_step) { return start_step + period; }

double update_batch(UpdateBatch update, int64_t learner_batch, int64_t learners, int64_t ranks, int64_t nodes) {
  switch (update) {
    case UpdateBatch::global: return static_cast<double>(learner_batch * learners * ranks);
    case UpdateBatch::node:
      return static_cast<double>(learner_batch * learners * ranks) / static_cast<double>(std::max<int64_t>(1, nodes));
    case UpdateBatch::learner: break;
  }
  return static_cast<double>(learner_batch);
}

ElasticBatch elastic_batch(bool keep_global, const ElasticFrom& then, int64_t requested_batch, int64_t ranks,
                           int64_t nodes, UpdateBatch update, bool schedule_scales) {
  ElasticBatch out;
  const int64_t global_then = then.learner_batch * then.learners * then.ranks;
  if (keep_global) {
    const int64_t learners = then.learners * ranks;
    out.kept = global_then % learners == 0;
    out.learner_batch = std::max<int64_t>(1, (global_then + learners / 2) / learners);
  } else {
    out.learner_batch = requested_batch;
  }
  out.lr_factor = schedule_scales ? 1.0
                                  : then.lr_factor * update_batch(update, out.learner_batch, then.learners, ranks, nodes) /
                                        update_batch(update, then.learner_batch, then.learners, then.ranks, then.nodes);
  return out;
}

}  // namespace squall::train
