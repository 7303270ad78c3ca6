#pragma once
// Learning-rate schedule: linear warm-up, then constant, multistep or cosine.
//
// With peak = scaled_peak_lr (optimizer.lr, x update_batch / reference_batch under the linear
// scaling rule, Goyal et al. 2017), W = warmup_steps, T = total_steps and s the 0-based step about to run:
//   s < W:      lr = peak * (s + 1) / W   (never 0: the first step already moves, and step W-1
//                                           runs at the peak)
//   constant:   lr = peak
//   multistep:  lr = peak * gamma^k, k = number of milestones <= s (milestones count steps
//               from the start of training, warm-up included; milestone_unit = "epochs"
//               multiplies them by steps_per_epoch)
//   cosine:     lr = min_lr + (peak - min_lr) * (1 + cos(pi * t)) / 2,
//               t = (s - W) / (T - W) clamped to [0, 1] (min_lr is not scaled with the batch)
//
// Segments (docs/training.md, "Extending a finished run"): a run that goes on after the end of
// its planned steps starts the schedule again at that step S, over the steps added alone: step s
// of the longer run is step s - S of a schedule of T - S steps (warm-up, milestones and the
// cosine all count from S). Otherwise the added steps would run at the decayed tail's rate.
#include <cstdint>
#include <string>
#include <vector>

#include "src/optim/options.hpp"

namespace squall::optim {

// The schedule's peak learning rate, the one place it is scaled: `base_lr` (optimizer.lr) x
// update_batch / reference_batch under the linear scaling rule (schedule.scale_lr_with_batch;
// update_batch: the samples one update averages over, the global batch under ssgd), x `factor`
// (elastic.batch's since the first attempt, train/step_plan.hpp: 1 when the rule scales).
// Neither scales min_lr.
double scaled_peak_lr(const ScheduleConfig& config, double base_lr, double update_batch, double factor = 1);

class Schedule {
 public:
  // peak_lr: scaled_peak_lr's. steps_per_epoch: only used when the milestones count epochs:
  // the steps of an epoch in the frame `step` counts in (lr_at), which a change of the job's
  // shape does not move.
  Schedule(const ScheduleConfig& config, double peak_lr, int64_t steps_per_epoch);

  double peak_lr() const { return m_peak; }
  // Learning rate of 0-based step `step` in a run of total_steps steps. Pure: no state.
  double lr_at(int64_t step, int64_t total_steps) const;
  // The same inside the segment that started at step `segment_start` (0: the first): the
  // schedule over steps segment_start .. total_steps alone. step >= segment_start.
  double lr_in_segment(int64_t step, int64_t segment_start, int64_t total_steps) const;
  // The schedule over `steps` steps in words, for the log: "warm-up 40 steps to 0.002, then
  // cosine to 0", "constant 0.1", "0.1, x 0.1 at steps 100, 200".
  std::string describe(int64_t steps) const;
  const std::vector<int64_t>& milestone_steps() const { return m_milestones; }

 private:
  ScheduleConfig m_config;
  double m_peak;
  std::vector<int64_t> m_milestones;  // in steps
};

}  // namespace squall::optim
