#pragma once
// Learning-rate schedule: linear warm-up, then constant, multistep or cosine.
//
// With peak = optimizer.lr (x update_batch / reference_batch under the linear scaling rule,
// Goyal et al. 2017), W = warmup_steps, T = total_steps and s the 0-based step about to run:
//   s < W:      lr = peak * (s + 1) / W   (never 0: the first step already moves, and step W-1
//                                           runs at the peak)
//   constant:   lr = peak
//   multistep:  lr = peak * gamma^k, k = number of milestones <= s (milestones count steps
//               from the start of training, warm-up included; milestone_unit = "epochs"
//               multiplies them by steps_per_epoch)
//   cosine:     lr = min_lr + (peak - min_lr) * (1 + cos(pi * t)) / 2,
//               t = (s - W) / (T - W) clamped to [0, 1] (min_lr is not scaled with the batch)
#include <cstdint>
#include <vector>

#include "src/optim/options.hpp"

namespace squall::optim {

class Schedule {
 public:
  // update_batch: the samples one update averages over (the linear scaling rule's batch: the
  // global batch under ssgd). steps_per_epoch: only used when the milestones count epochs: the
  // steps of an epoch in the frame `step` counts in (lr_at), which a change of the job's shape
  // does not move.
  Schedule(const ScheduleConfig& config, double base_lr, double update_batch, int64_t steps_per_epoch);

  double peak_lr() const { return m_peak; }
  // Learning rate of 0-based step `step` in a run of total_steps steps. Pure: no state.
  double lr_at(int64_t step, int64_t total_steps) const;
  const std::vector<int64_t>& milestone_steps() const { return m_milestones; }

 private:
  ScheduleConfig m_config;
  double m_peak;
  std::vector<int64_t> m_milestones;  // in steps
};

}  // namespace squall::optim
