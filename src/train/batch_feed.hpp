#pragma once
// A step's input: one batch from the loader for each learner, augmented when asked
// (data.augment_*), held until the step has used it. On a backend the host cannot read, the
// next step's batches are taken during this step too (look-ahead), so that the learners' copy
// streams move them to the device while this step computes (docs/design.md, "Input").
#include <cstdint>
#include <vector>

#include "io/input/loader.hpp"
#include "src/parallel/learner.hpp"
#include "src/data/augment.hpp"
#include "src/train/step_plan.hpp"

namespace squall::train {

class BatchFeed {
 public:
  // `sample`: one sample's shape; `seed` and `rank` key the augmentation's draws. Throws
  // squall::Error naming the augmentation's keys and parallel.spatial when `augment` is on and
  // the loader reads a window of each sample.
  BatchFeed(input::Loader& loader, const data::SphereAugment& augment, const nn::Shape& sample, uint64_t seed, int rank,
            bool lookahead);
  BatchFeed(const BatchFeed&) = delete;
  BatchFeed& operator=(const BatchFeed&) = delete;
  ~BatchFeed();

  // The batches of step `step` + 1, whose last batch is batch `used` of epoch `epoch` (so
  // this step's batches start at used - plan.learners). Throws squall::Error when the loader
  // ends the epoch early.
  const std::vector<parallel::LearnerBatch>& take(const StepPlan& plan, int64_t epoch, int64_t used, int64_t step);
  // The next step's batches, taken by take() when look-ahead applies to this step; else null.
  const std::vector<parallel::LearnerBatch>* next() const { return m_next_held.empty() ? nullptr : &m_next_inputs; }
  // This step's batches (their samples' indices: SQUALL_TRACE_SAMPLES).
  const std::vector<const input::Batch*>& held() const { return m_held; }
  // The step has used its batches: back to the loader.
  void release_step();
  // Everything held (a run stopped by a signal may hold a step it did not take).
  void release_all();

 private:
  void fill(std::vector<const input::Batch*>& held, std::vector<parallel::LearnerBatch>& inputs, int learners,
            int64_t epoch, int64_t taken, int64_t batches_per_epoch, int64_t step);

  input::Loader& m_loader;
  const data::SphereAugment& m_augment;
  nn::Shape m_sample;
  uint64_t m_seed;
  int m_rank;
  bool m_lookahead;
  std::vector<const input::Batch*> m_held, m_next_held;  // this step's batches, and the next step's
  std::vector<parallel::LearnerBatch> m_inputs, m_next_inputs;
};

}  // namespace squall::train
