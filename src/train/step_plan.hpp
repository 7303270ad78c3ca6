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
#include <vector>

namespace squall::train {

struct StepPlan {
  int64_t batches_per_epoch = 0;  // this rank's batches in one epoch
  int learners = 1;               // batches one step takes on this rank
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;        // the step the run ends after
  int64_t epochs = 0;             // the epochs it touches (the last may be cut by max_steps)
  int64_t max_steps = 0;          // train.max_steps (0: whole epochs)
  int64_t train_epochs = 0;       // train.epochs (0: max_steps alone decides)
  // The schedule's frame, fixed by the first plan: the learning rate follows the samples
  // trained on, counted in steps of the initial learner count, so that the auto-tuner's
  // changes keep warm-up, milestones and the cosine where they were.
  int64_t schedule_steps = 0;
  int64_t schedule_step_samples = 1;  // samples per step over the job, in the first plan
  int64_t schedule_steps_per_epoch = 0;  // ... and its steps per epoch (milestones in epochs)
  // Where the schedule started again, in the frame's steps (optim/schedule.hpp, "Segments"): the
  // first step of each segment after the first, ascending; empty for one segment. The schedule
  // runs from the last of them to schedule_steps.
  std::vector<int64_t> schedule_segments;
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
// checkpoint written after it changed the count): the rest of the run at the new count. The
// run still ends with the last of train.epochs epochs, or after max_steps steps where that
// comes first (max_steps alone: after max_steps steps), and the epoch count follows.
void replan(StepPlan& plan, int learners, int64_t step, EpochPosition at);

// A run whose steps may train fewer samples than they take from the clock (train.epoch_quorum
// < 1: a node lets steps pass, pace.hpp) trains the samples its plan holds, the schedule's frame
// (schedule_steps x schedule_step_samples), however many steps that takes. After step `step`, at
// `at`, with `samples_done` trained over the job: once they are trained the run ends at this step
// (`ended`: it had more planned); where its planned steps ran out before that, it goes on to the
// end of the epoch it is in, or through one more (`extended`). Only where train.max_steps is 0:
// max_steps is a count of steps, and a run of it ends there.
enum class SampleEnd { none, ended, extended };
SampleEnd fit_end_to_samples(StepPlan& plan, int64_t step, EpochPosition at, int64_t samples_done);

// The schedule's 0-based step for a run that has trained `samples_done` samples over the job.
int64_t schedule_step(const StepPlan& plan, int64_t samples_done);

// The first step of the schedule's segment the run is in (0: the first segment).
int64_t schedule_start(const StepPlan& plan);

// Where the run of `plan` ends in the schedule's frame: the frame's steps of the samples it will
// have trained after its last step, having taken `step` steps and trained `samples_done` samples
// so far, `step_samples` a step from now on (rounded up: a part of a step is a step). A run of
// one shape throughout ends at its total_steps.
int64_t schedule_end(const StepPlan& plan, int64_t step, int64_t samples_done, int64_t step_samples);

// A place in the schedule's frame, `frame_step` steps of the first plan from the start of
// training (the end of the warm-up, outer's synchronous start), as a step of this run, which
// has taken `step` steps and trained `samples_done` samples so far and trains `step_samples`
// a step from now on: the first 0-based step whose schedule step (schedule_step of the samples
// before it) is frame_step or later. A place already passed gives min(frame_step, step), which
// a run of one shape throughout has too: frame_step is then a step of this run.
int64_t run_step_of(const StepPlan& plan, int64_t frame_step, int64_t step, int64_t samples_done,
                    int64_t step_samples);

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
// learner it trained at, its learners per rank, ranks, the factor its learning rate had been
// scaled by since the first attempt, and its nodes).
struct ElasticFrom {
  int64_t learner_batch = 0;
  int64_t learners = 1;
  int64_t ranks = 1;
  double lr_factor = 1;
  int64_t nodes = 1;
};
// The batch one update of the learning rate's optimizer averages over, which the linear
// scaling rule follows: the job's (ssgd), a node's (outer's inner steps: the global batch over
// the nodes, so that every node steps at one rate), or a learner's own (sma, local-sgd).
enum class UpdateBatch { global, node, learner };
struct ElasticBatch {
  int64_t learner_batch = 0;  // the new job's batch per learner
  double lr_factor = 1;       // its learning rate's factor since the first attempt
  bool kept = true;           // the batch asked to be kept is kept (false: the global batch did not divide)
};
// `keep_global`: keep the global batch by giving each of the new job's learners (then.learners
// per rank on `ranks` ranks, on `nodes` nodes) its share, the nearest where it does not divide;
// otherwise keep `requested_batch` per learner. The learning rate follows the batch one update
// averages over (`update`) by the linear rule. With `schedule_scales`
// (schedule.scale_lr_with_batch) the schedule does that itself from the new batch, and the
// factor stays 1.
ElasticBatch elastic_batch(bool keep_global, const ElasticFrom& then, int64_t requested_batch, int64_t ranks,
                           int64_t nodes, UpdateBatch update, bool schedule_scales);

// That batch: of `learner_batch` samples per learner, `learners` per rank, `ranks` ranks on
// `nodes` nodes (the node's as the job's mean: global / nodes).
double update_batch(UpdateBatch update, int64_t learner_batch, int64_t learners, int64_t ranks, int64_t nodes);

}  // namespace squall::train
