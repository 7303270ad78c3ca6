// The step plan alone (src/train/step_plan.hpp): its counts against a walk of the loop that
// trainer.cpp runs, over many shapes, learner changes and resumes; evaluation and checkpoint
// steps; the schedule's frame.
#include <catch2/catch.hpp>

#include "src/train/step_plan.hpp"
#include "src/train/training_job.hpp"

using namespace squall::train;

namespace {

// The trainer's loop over epochs and steps, with the learner count changed to `change_to`
// after step `change_at` (0: never), started at `from` with `step` steps done. Returns the steps
// it takes and the epochs it enters.
struct Walk {
  int64_t steps = 0, last_epoch = 0;
};

Walk walk(StepPlan plan, int64_t change_at, int change_to, EpochPosition from = {1, 0}, int64_t step = 0) {
  Walk w;
  for (int64_t epoch = from.epoch; epoch <= plan.epochs && step < plan.total_steps; ++epoch) {
    int64_t used = epoch == from.epoch ? from.used : 0;
    w.last_epoch = epoch;
    while (epoch_has_step(plan, used) && step < plan.total_steps) {
      used += plan.learners;
      ++step;
      if (step == change_at) replan(plan, change_to, step, {epoch, used});
    }
  }
  w.steps = step;
  REQUIRE(step == plan.total_steps);  // the loop ends exactly where the plan says
  return w;
}

}  // namespace

TEST_CASE("a plan counts the steps of whole epochs", "[step_plan]") {
  const StepPlan p = plan_steps(100, 3, 2, 8, 2, 0);
  CHECK(p.steps_per_epoch == 33);  // the epoch's last batch is left: a step takes 3
  CHECK(p.total_steps == 66);
  CHECK(p.epochs == 2);
  CHECK(p.schedule_steps == 66);
  CHECK(p.schedule_step_samples == 8 * 3 * 2);
  CHECK(walk(p, 0, 0).last_epoch == 2);
}

TEST_CASE("max_steps cuts the run and sets the epochs it touches", "[step_plan]") {
  const StepPlan p = plan_steps(100, 3, 1, 8, 5, 70);
  CHECK(p.total_steps == 70);
  CHECK(p.epochs == 3);  // 33 + 33 + 4
  CHECK(walk(p, 0, 0).last_epoch == 3);
  // max_steps alone: as many epochs as it needs.
  const StepPlan q = plan_steps(100, 3, 1, 8, 0, 70);
  CHECK(q.total_steps == 70);
  CHECK(q.epochs == 3);
  // max_steps above the epochs' steps changes nothing.
  CHECK(plan_steps(100, 3, 1, 8, 2, 1000).total_steps == 66);
}

TEST_CASE("a step larger than an epoch plans no step", "[step_plan]") {
  CHECK(plan_steps(2, 3, 1, 8, 4, 0).steps_per_epoch == 0);
  CHECK(plan_steps(3, 3, 1, 8, 4, 0).steps_per_epoch == 1);
}

TEST_CASE("a changed learner count re-plans the rest of the run", "[step_plan]") {
  // Every change point and direction over a few shapes: the loop ends exactly at the plan's
  // last step and in its last epoch.
  for (const int64_t bpe : {17, 40, 101}) {
    for (const int from : {1, 2, 3}) {
      for (const int to : {1, 2, 4}) {
        for (const int64_t max_steps : {int64_t{0}, int64_t{23}, int64_t{1000}}) {
          const StepPlan p = plan_steps(bpe, from, 1, 4, 3, max_steps);
          // Whether the epochs end the run before max_steps does whatever the learners (1000
          // steps are more than any of these runs takes), or max_steps may (23).
          const bool epochs_bind = max_steps != 23;
          for (int64_t at = 1; at < p.total_steps; at += 3) {
            INFO("bpe " << bpe << " learners " << from << " -> " << to << " after step " << at << " max_steps "
                        << max_steps);
            StepPlan q = p;
            const Walk w = walk(q, at, to);
            // Where the epochs end the run, it still ends with the last of them, whole.
            if (epochs_bind) {
              CHECK(w.last_epoch == 3);
              CHECK(q.epochs == 3);
            }
            CHECK(w.last_epoch <= 3);  // never more than train.epochs
            if (max_steps > 0) CHECK(w.steps <= max_steps);
          }
        }
      }
    }
  }
  // By hand: 100 batches, 3 learners, 2 epochs; after 10 steps (30 batches) 4 learners.
  StepPlan p = plan_steps(100, 3, 1, 8, 2, 0);
  replan(p, 4, 10, {1, 30});
  CHECK(p.steps_per_epoch == 25);
  CHECK(p.total_steps == 10 + 17 + 25);
  // The schedule's frame does not move.
  CHECK(p.schedule_steps == 66);
  CHECK(p.schedule_step_samples == 24);
  CHECK(p.schedule_steps_per_epoch == 33);
}

TEST_CASE("with train.epochs and train.max_steps both set, a re-plan keeps whichever ends the run first",
          "[step_plan][elastic]") {
  // 100 batches, 3 learners: 33 steps an epoch; 2 epochs (66 steps) come before max_steps = 1000.
  StepPlan p = plan_steps(100, 3, 1, 8, 2, 1000);
  REQUIRE(p.total_steps == 66);
  // After 10 steps (30 batches) 4 learners: the rest of epoch 1 is 17 steps, epoch 2 25: the run
  // still ends with its second epoch, not after 66 steps of 4 learners (a third epoch).
  replan(p, 4, 10, {1, 30});
  CHECK(p.total_steps == 10 + 17 + 25);
  CHECK(p.epochs == 2);
  // Back to 2 learners after step 20 (epoch 1's 70th batch): 15 more steps in it, 50 in epoch 2.
  replan(p, 2, 20, {1, 70});
  CHECK(p.total_steps == 20 + 15 + 50);
  CHECK(p.epochs == 2);
  // Where max_steps comes first it still ends the run, and the epochs follow.
  StepPlan q = plan_steps(100, 3, 1, 8, 4, 80);
  REQUIRE(q.total_steps == 80);
  replan(q, 1, 10, {1, 30});
  CHECK(q.total_steps == 80);
  CHECK(q.epochs == 1);  // 70 batches left in epoch 1 take the 70 steps left
  // A resume on another shape re-plans the new shape's plan (16 steps an epoch here) from where
  // the checkpoint's job stood: 40 steps done, epoch 3 with 33 of this job's batches taken. The
  // epochs bind: the run ends with epoch 3's last 5 steps, not at the new plan's 48.
  StepPlan r = plan_steps(50, 3, 2, 8, 3, 500);
  REQUIRE(r.total_steps == 48);
  replan(r, 3, 40, {3, 33});
  CHECK(r.total_steps == 40 + 5);
  CHECK(r.epochs == 3);
}

TEST_CASE("a place in the schedule's frame as a step of a run that changed shape", "[step_plan][elastic]") {
  // The first plan: steps of 32 samples. The warm-up's end at frame step 100 is 3200 samples.
  const StepPlan p = plan_steps(100, 2, 2, 8, 2, 0);
  REQUIRE(p.schedule_step_samples == 32);
  // One shape throughout: the frame's steps are the run's.
  CHECK(run_step_of(p, 100, 0, 0, 32) == 100);
  CHECK(run_step_of(p, 100, 40, 40 * 32, 32) == 100);
  CHECK(run_step_of(p, 30, 40, 40 * 32, 32) == 30);  // passed: where it was
  // After 40 steps of 32, steps of 64 (twice the learners): 1920 samples left, 30 steps.
  CHECK(run_step_of(p, 100, 40, 40 * 32, 64) == 70);
  // Steps of 48: 1920 / 48 = 40 steps; of 50, 38.4: the 39th step is the first at or past it.
  CHECK(run_step_of(p, 100, 40, 40 * 32, 48) == 80);
  CHECK(run_step_of(p, 100, 40, 40 * 32, 50) == 79);
  // A run that went faster than the frame (steps of 64 from the start) is past frame step 30
  // after 20 of its steps: the place is behind it.
  CHECK(run_step_of(p, 30, 20, 20 * 64, 64) == 20);
  CHECK(run_step_of(p, 0, 20, 20 * 64, 64) == 0);
}

TEST_CASE("a resumed run walks to the same last step", "[step_plan]") {
  const StepPlan p = plan_steps(40, 3, 1, 4, 3, 0);  // 13 steps an epoch
  // Resumed after step 13, at the end of epoch 1 (39 of its batches used): epoch 1 has no step
  // left, epochs 2 and 3 run whole.
  CHECK_FALSE(epoch_has_step(p, 39));
  CHECK(walk(p, 0, 0, {1, 39}, 13).steps == 39);
  CHECK(walk(p, 0, 0, {2, 6}, 15).steps == 39);
}

TEST_CASE("evaluations and checkpoints fall on their steps", "[step_plan]") {
  const StepPlan p = plan_steps(120, 1, 1, 4, 1, 12);
  // eval_every_steps = 0: at each epoch's end only.
  for (int64_t s = 1; s <= 12; ++s) CHECK_FALSE(eval_after_step(p, 0, s));
  CHECK(eval_at_epoch_end(p, 0, 5));
  // Every 5 steps and after the last, never twice after one step.
  CHECK(eval_after_step(p, 5, 5));
  CHECK(eval_after_step(p, 5, 10));
  CHECK_FALSE(eval_after_step(p, 5, 7));
  CHECK_FALSE(eval_after_step(p, 5, 12));
  CHECK(eval_at_epoch_end(p, 5, 12));
  CHECK_FALSE(eval_at_epoch_end(p, 5, 10));
  const StepPlan q = plan_steps(120, 1, 1, 4, 1, 10);  // the last step is also an interval's
  CHECK_FALSE(eval_after_step(q, 5, 10));
  CHECK(eval_at_epoch_end(q, 5, 10));
  CHECK(checkpoint_after_step(4, 8));
  CHECK_FALSE(checkpoint_after_step(4, 6));
  CHECK_FALSE(checkpoint_after_step(0, 8));
}

TEST_CASE("the schedule follows the samples trained on, in the first plan's steps", "[step_plan]") {
  StepPlan p = plan_steps(100, 2, 2, 8, 1, 0);  // 50 steps of 32 samples
  CHECK(schedule_step(p, 0) == 0);
  CHECK(schedule_step(p, 32 * 7) == 7);
  CHECK(schedule_step(p, 32 * 7 + 31) == 7);
  CHECK(schedule_step(p, 32 * 500) == 49);  // never past the last step
  replan(p, 4, 10, {1, 20});
  CHECK(schedule_step(p, 32 * 10 + 64) == 12);  // a step of 4 learners counts as two of 2
}

TEST_CASE("sma and local-sgd synchronise first after period steps", "[step_plan]") {
  CHECK(first_synchronisation(4, 0) == 4);
  CHECK(first_synchronisation(4, 10) == 14);
}

TEST_CASE("elastic.batch = global keeps the global batch on a new number of ranks", "[step_plan][elastic]") {
  // 4 ranks x 2 learners x 32 = 256 samples a step.
  const ElasticFrom four{32, 2, 4, 1.0, 4};
  const ElasticBatch two = elastic_batch(true, four, 32, 2, 2, UpdateBatch::global, false);
  CHECK(two.learner_batch == 64);
  CHECK(two.kept);
  CHECK(two.lr_factor == 1.0);  // the same global batch: the same learning rate
  const ElasticBatch eight = elastic_batch(true, four, 32, 8, 8, UpdateBatch::global, false);
  CHECK(eight.learner_batch == 16);
  CHECK(eight.kept);
  // 256 over 3 x 2 learners does not divide: the nearest batch, 43 (258 a step), and the
  // learning rate by the linear rule.
  const ElasticBatch three = elastic_batch(true, four, 32, 3, 3, UpdateBatch::global, false);
  CHECK(three.learner_batch == 43);
  CHECK_FALSE(three.kept);
  CHECK(three.lr_factor == Approx(258.0 / 256.0));
  // From there back to 4 ranks: 258 over 8 learners is 32.25, so 32 again, and the factor
  // returns to 1 (it is counted from the first attempt).
  const ElasticBatch back = elastic_batch(true, {43, 2, 3, three.lr_factor, 3}, 32, 4, 4, UpdateBatch::global, false);
  CHECK(back.learner_batch == 32);
  CHECK(back.lr_factor == Approx(1.0));
  // The same shape keeps everything as it was.
  const ElasticBatch same = elastic_batch(true, four, 32, 4, 4, UpdateBatch::global, false);
  CHECK(same.learner_batch == 32);
  CHECK(same.lr_factor == 1.0);
}

TEST_CASE("elastic.batch = learner keeps the batch per learner and scales the learning rate", "[step_plan][elastic]") {
  const ElasticFrom four{32, 1, 4, 1.0, 4};
  // ssgd: one update averages over the global batch, 128 -> 96 on 3 ranks: lr x 0.75.
  const ElasticBatch ssgd = elastic_batch(false, four, 32, 3, 3, UpdateBatch::global, false);
  CHECK(ssgd.learner_batch == 32);
  CHECK(ssgd.kept);
  CHECK(ssgd.lr_factor == Approx(0.75));
  // Twice: the factors multiply (6 ranks after 3: 192 / 128).
  CHECK(elastic_batch(false, {32, 1, 3, ssgd.lr_factor, 3}, 32, 6, 6, UpdateBatch::global, false).lr_factor == Approx(1.5));
  // sma and local-sgd: a learner's update averages over its own batch, which stays.
  CHECK(elastic_batch(false, four, 32, 3, 3, UpdateBatch::learner, false).lr_factor == 1.0);
  // ... but under elastic.batch = global a learner's batch changes, and its rate with it.
  const ElasticBatch sma = elastic_batch(true, four, 32, 2, 2, UpdateBatch::learner, false);
  CHECK(sma.learner_batch == 64);
  CHECK(sma.lr_factor == Approx(2.0));
  // schedule.scale_lr_with_batch: the schedule scales by the new batch itself.
  CHECK(elastic_batch(false, four, 32, 3, 3, UpdateBatch::global, true).lr_factor == 1.0);
  // A batch of at least 1 however few samples a step had.
  CHECK(elastic_batch(true, {1, 1, 4, 1.0, 4}, 1, 9, 9, UpdateBatch::global, false).learner_batch == 1);
}

TEST_CASE("elastic.batch under outer: the inner steps' rate follows a node's batch, the outer step's is kept",
          "[step_plan][elastic][outer]") {
  const UpdateBatch outer = update_batch_of(squall::parallel::Algorithm::outer);
  REQUIRE(outer == UpdateBatch::node);
  CHECK(update_batch_of(squall::parallel::Algorithm::ssgd) == UpdateBatch::global);
  CHECK(update_batch_of(squall::parallel::Algorithm::sma) == UpdateBatch::learner);
  CHECK(update_batch_of(squall::parallel::Algorithm::local_sgd) == UpdateBatch::learner);
  // 4 ranks on 2 nodes, 1 learner each, 32 samples: a node's inner step averages over 64.
  const ElasticFrom four{32, 1, 4, 1.0, 2};
  // On 2 ranks, one per node, keeping the global batch: 64 per learner, still 64 a node: the
  // same rate (a learner's batch doubled, which the learner's rule would have followed).
  const ElasticBatch global = elastic_batch(true, four, 32, 2, 2, outer, false);
  CHECK(global.learner_batch == 64);
  CHECK(global.lr_factor == Approx(1.0));
  // Keeping each learner's 32: a node's batch halves, and its rate with it.
  const ElasticBatch learner = elastic_batch(false, four, 32, 2, 2, outer, false);
  CHECK(learner.learner_batch == 32);
  CHECK(learner.lr_factor == Approx(0.5));
  // The same ranks per node on more nodes: a node's batch, and the rate, stay.
  CHECK(elastic_batch(false, four, 32, 6, 3, outer, false).lr_factor == Approx(1.0));
  // Unequal nodes (5 ranks on 3 nodes) count the job's mean node: every node steps at one rate.
  CHECK(update_batch(UpdateBatch::node, 32, 1, 5, 3) == Approx(160.0 / 3.0));
  CHECK(elastic_batch(false, four, 32, 5, 3, outer, false).lr_factor == Approx((160.0 / 3.0) / 64.0));
}

// The loop of a paced run (train.epoch_quorum < 1): each step trains `trained(step)` samples of
// the job's step_samples, and the run's end follows the samples trained (fit_end_to_samples).
struct PacedWalk {
  int64_t steps = 0, last_epoch = 0, samples = 0;
};
template <typename Trained>
PacedWalk paced_walk(StepPlan plan, Trained trained) {
  PacedWalk w;
  for (int64_t epoch = 1; epoch <= plan.epochs && w.steps < plan.total_steps; ++epoch) {
    int64_t used = 0;
    w.last_epoch = epoch;
    while (epoch_has_step(plan, used) && w.steps < plan.total_steps) {
      used += plan.learners;
      ++w.steps;
      w.samples += trained(w.steps);
      fit_end_to_samples(plan, w.steps, {epoch, used}, w.samples);
    }
  }
  return w;
}

TEST_CASE("a paced run trains its epochs' samples, however many steps of the clock that takes", "[step_plan][pace]") {
  const StepPlan p = plan_steps(16, 1, 2, 64, 3, 0);  // 2 ranks of 16 batches an epoch: 48 steps of 128 samples
  REQUIRE(p.total_steps == 48);
  // Every step trains its samples: the plan as it was.
  const PacedWalk whole = paced_walk(p, [](int64_t) { return 128; });
  CHECK(whole.steps == 48);
  CHECK(whole.last_epoch == 3);
  // One of the two ranks trains 2 steps of each 4 (tests/mpi/launch_quorum.cpp's job): 96
  // samples a step, so 16 steps more, one epoch.
  const PacedWalk half = paced_walk(p, [](int64_t s) { return (s - 1) % 4 < 2 ? 128 : 64; });
  CHECK(half.steps == 64);
  CHECK(half.last_epoch == 4);
  CHECK(half.samples == 48 * 128);
  // Ending inside the added epoch: a rank trains 1 step of each 4 (80 samples a step, 77 steps),
  // and the run ends at the step at which the samples are trained, not at its epoch's end.
  const PacedWalk quarter = paced_walk(p, [](int64_t s) { return (s - 1) % 4 < 1 ? 128 : 64; });
  CHECK(quarter.steps == 77);
  CHECK(quarter.last_epoch == 5);
  CHECK(quarter.samples == 19 * 320 + 128);  // 19 rounds of 320 samples fall short of 6144
}

TEST_CASE("fit_end_to_samples ends, extends or leaves a plan", "[step_plan][pace]") {
  StepPlan p = plan_steps(10, 1, 1, 8, 2, 0);  // 20 steps of 8 samples
  // Inside the plan, samples short: nothing to change.
  CHECK(fit_end_to_samples(p, 12, {2, 2}, 80) == SampleEnd::none);
  // The planned steps ran out at an epoch's end with 40 samples to go: one epoch more.
  CHECK(fit_end_to_samples(p, 20, {2, 10}, 120) == SampleEnd::extended);
  CHECK(p.total_steps == 30);
  CHECK(p.epochs == 3);
  // The samples trained inside it: the run ends there.
  CHECK(fit_end_to_samples(p, 26, {3, 6}, 160) == SampleEnd::ended);
  CHECK(p.total_steps == 26);
  CHECK(p.epochs == 3);
  CHECK(fit_end_to_samples(p, 26, {3, 6}, 160) == SampleEnd::none);
  // A resume inside an epoch the plan no longer holds (the run's own added one): to its end.
  StepPlan q = plan_steps(10, 1, 1, 8, 2, 0);
  CHECK(fit_end_to_samples(q, 23, {3, 3}, 130) == SampleEnd::extended);
  CHECK(q.total_steps == 30);
  CHECK(q.epochs == 3);
  // train.max_steps is a count of steps: its run ends there, whatever it trained.
  StepPlan m = plan_steps(10, 1, 1, 8, 0, 20);
  CHECK(fit_end_to_samples(m, 20, {2, 10}, 100) == SampleEnd::none);
  CHECK(m.total_steps == 20);
}
