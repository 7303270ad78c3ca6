#pragma once
// The arithmetic of a run's steps (docs/training.md, "Steps and epochs"): how many steps an
// epoch has and the run takes, where a resumed or re-shaped run goes on, which steps end in an
// evaluation or a checkpoint, and where the learning-rate schedule stands. Pure functions of
// their arguments: no MPI, no clock, no files (tests/unit/test_step_plan.cpp).
//
// A rank reads `batches_per_epoch` batches of each epoch (its share, io/input/sampler.hpp) and each
// step hands one batch to each of its `learners`: a step takes `learners` batches, and the
// batches left over at the end of an epoch (fewer than a step needs) are not used.
#include <cstdint>

namespace squall::train {

struct StepPlan {
  int64_t batches_per_epoch = 0;  // this rank's batches in one epoch
  int learners = 1;               // batches one step takes on this rank
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;        // the step the run ends after
  int64_t epochs = 0;             // the epochs it touches (the last may be cut by max_steps)
  int64_t max_steps = 0;          // train.max_steps (0: whole epochs)
  // The schedule's frame, fixed by the first plan: the learning rate follows the samples
  // trained on, counted in steps of the initial learner count, so that the auto-tuner's
  // changes keep warm-up, milestones and the cosine where they were.
  int64_t schedule_steps = 0;
  int64_t schedule_step_samples = 1;  // samples per step over the job, in the first plan
};

// Where a run stands: the epoch it is in and the batches of that epoch already used.
struct EpochPosition {
  int64_t epoch = 1;
  int64_t used = 0;
};

// The plan of a run of `epochs` epochs (capped at `max_steps` steps when > 0) in which every
// step takes `learners` batches of `batch` samples on each of `ranks` ranks. Returns a plan
// with steps_per_epoch = 0 when an epoch holds fewer batches than one step needs (the caller
// says which keys to change).
StepPlan plan_steps(int64_t batches_per_epoch, int learners, int ranks, int64_t batch, int64_t epochs,
                    int64_t max_steps);

// The learner count became `learners` after `step` steps, at `at` (the auto-tuner, or a
// checkpoint written after it changed the count): the rest of the run at the new count. With
// whole epochs the run still ends with the last epoch; with max_steps it still ends after
// max_steps steps and the epoch count follows.
void replan(StepPlan& plan, int learners, int64_t step, EpochPosition at);

// The schedule's 0-based step for a run that has trained `samples_done` samples over the job.
int64_t schedule_step(const StepPlan& plan, int64_t samples_done);

// Whether epoch `epoch`, entered with `used` of its batches taken, has a step left.
bool epoch_has_step(const StepPlan& plan, int64_t used);

// train.eval_every_steps = `every`: whether the central model is evaluated after step `step`
// (counted from 1) inside an epoch, and at the end of an epoch that ended after step `step`.
// With every = 0 the run evaluates at each epoch's end; otherwise every `every` steps and
// after the last step (never twice after one step).
bool eval_after_step(const StepPlan& plan, int64_t every, int64_t step);
bool eval_at_epoch_end(const StepPlan& plan, int64_t every, int64_t step);

// checkpoint.every_steps = `every` (0: never by count): whether step `step` ends in one.
bool checkpoint_after_step(int64_t every, int64_t step);

// The first step at which sma or local-sgd synchronise the central model (period after
// start_step); a run shorter than that would evaluate the initial model.
int64_t first_synchronisation(int64_t period, int64_t start_step);

// A resume on another shape (elastic.batch, docs/training.md, "Elastic resume"): the batch per
// learner and the learning rate of the new job. `then`: the checkpoint's job (the batch per
// learner it trained at, its learners per rank, ranks, and the factor its learning rate had been
// scaled by since the first attempt).
struct ElasticFrom {
  int64_t learner_batch = 0;
  int64_t learners = 1;
  int64_t ranks = 1;
  double lr_factor = 1;
};
struct ElasticBatch {
  int64_t learner_batch = 0;  // the new job's batch per learner
  double lr_factor = 1;       // its learning rate's factor since the first attempt
  bool kept = true;           // the batch asked to be kept is kept (false: the global batch did not divide)
};
// `keep_global`: keep the global batch by giving each of the new job's learners (then.learners
// per rank on `ranks` ranks) its share, the nearest where it does not divide; otherwise keep
// `requested_batch` per learner. The learning rate follows the batch one update averages over
// by the linear rule: the global batch when `update_is_global` (ssgd), a learner's batch
// otherwise (sma, local-sgd). With `schedule_scales` (schedule.scale_lr_with_batch) the schedule
// does that itself from the new batch, and the factor stays 1.
ElasticBatch elastic_batch(bool keep_global, const ElasticFrom& then, int64_t requested_batch, int64_t ranks,
                           bool update_is_global, bool schedule_scales);

}  // namespace squall::train
