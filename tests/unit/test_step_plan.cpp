// The step plan alone (src/train/step_plan.hpp): its counts against a walk of the loop that
// trainer.cpp runs, over many shapes, learner changes and resumes; evaluation and checkpoint
// steps; the schedule's frame.
#include <catch2/catch.hpp>

#include "src/train/step_plan.hpp"

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
        for (const int64_t max_steps : {int64_t{0}, int64_t{23}}) {
          const StepPlan p = plan_steps(bpe, from, 1, 4, 3, max_steps);
          for (int64_t at = 1; at < p.total_steps; at += 3) {
            INFO("bpe " << bpe << " learners " << from << " -> " << to << " after step " << at << " max_steps "
                        << max_steps);
            StepPlan q = p;
            const Walk w = walk(q, at, to);
            // With whole epochs the run still ends in its last epoch.
            if (max_steps == 0) CHECK(w.last_epoch == p.epochs);
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
  const ElasticFrom four{32, 2, 4, 1.0};
  const ElasticBatch two = elastic_batch(true, four, 32, 2, true, false);
  CHECK(two.learner_batch == 64);
  CHECK(two.kept);
  CHECK(two.lr_factor == 1.0);  // the same global batch: the same learning rate
  const ElasticBatch eight = elastic_batch(true, four, 32, 8, true, false);
  CHECK(eight.learner_batch == 16);
  CHECK(eight.kept);
  // 256 over 3 x 2 learners does not divide: the nearest batch, 43 (258 a step), and the
  // learning rate by the linear rule.
  const ElasticBatch three = elastic_batch(true, four, 32, 3, true, false);
  CHECK(three.learner_batch == 43);
  CHECK_FALSE(three.kept);
  CHECK(three.lr_factor == Approx(258.0 / 256.0));
  // From there back to 4 ranks: 258 over 8 learners is 32.25, so 32 again, and the factor
  // returns to 1 (it is counted from the first attempt).
  const ElasticBatch back = elastic_batch(true, {43, 2, 3, three.lr_factor}, 32, 4, true, false);
  CHECK(back.learner_batch == 32);
  CHECK(back.lr_factor == Approx(1.0));
  // The same shape keeps everything as it was.
  const ElasticBatch same = elastic_batch(true, four, 32, 4, true, false);
  CHECK(same.learner_batch == 32);
  CHECK(same.lr_factor == 1.0);
}

TEST_CASE("elastic.batch = learner keeps the batch per learner and scales the learning rate", "[step_plan][elastic]") {
  const ElasticFrom four{32, 1, 4, 1.0};
  // ssgd: one update averages over the global batch, 128 -> 96 on 3 ranks: lr x 0.75.
  const ElasticBatch ssgd = elastic_batch(false, four, 32, 3, true, false);
  CHECK(ssgd.learner_batch == 32);
  CHECK(ssgd.kept);
  CHECK(ssgd.lr_factor == Approx(0.75));
  // Twice: the factors multiply (6 ranks after 3: 192 / 128).
  CHECK(elastic_batch(false, {32, 1, 3, ssgd.lr_factor}, 32, 6, true, false).lr_factor == Approx(1.5));
  // sma and local-sgd: a learner's update averages over its own batch, which stays.
  CHECK(elastic_batch(false, four, 32, 3, false, false).lr_factor == 1.0);
  // ... but under elastic.batch = global a learner's batch changes, and its rate with it.
  const ElasticBatch sma = elastic_batch(true, four, 32, 2, false, false);
  CHECK(sma.learner_batch == 64);
  CHECK(sma.lr_factor == Approx(2.0));
  // schedule.scale_lr_with_batch: the schedule scales by the new batch itself.
  CHECK(elastic_batch(false, four, 32, 3, true, true).lr_factor == 1.0);
  // A batch of at least 1 however few samples a step had.
  CHECK(elastic_batch(true, {1, 1, 4, 1.0}, 1, 9, true, false).learner_batch == 1);
}
