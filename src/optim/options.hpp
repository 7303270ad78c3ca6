#pragma once
// The options of the optimizers and of the learning-rate schedule: the config's [optimizer]
// and [schedule] sections (src/config/config.hpp holds them as they are), with the names of
// their enumerated keys.
#include <cstdint>
#include <vector>

#include "src/core/enum_table.hpp"

namespace squall::optim {

// optimizer.name
enum class OptimizerKind { sgd, adam, adamw, lamb };
inline constexpr auto k_optimizer_kinds = enum_table<OptimizerKind>({{"sgd", OptimizerKind::sgd},
                                                                     {"adam", OptimizerKind::adam},
                                                                     {"adamw", OptimizerKind::adamw},
                                                                     {"lamb", OptimizerKind::lamb}});

// schedule.kind, after the warm-up (schedule.hpp).
enum class ScheduleKind { constant, multistep, cosine };
inline constexpr auto k_schedule_kinds = enum_table<ScheduleKind>(
    {{"constant", ScheduleKind::constant}, {"multistep", ScheduleKind::multistep}, {"cosine", ScheduleKind::cosine}});

// schedule.milestone_unit: what schedule.milestones count.
enum class MilestoneUnit { steps, epochs };
inline constexpr auto k_milestone_units =
    enum_table<MilestoneUnit>({{"steps", MilestoneUnit::steps}, {"epochs", MilestoneUnit::epochs}});

struct OptimizerConfig {
  OptimizerKind name = OptimizerKind::sgd;  // sgd | adam | adamw | lamb
  double lr = 0.05;                  // peak learning rate (before the linear scaling rule)
  double momentum = 0.9;             // sgd
  bool nesterov = false;             // sgd
  double weight_decay = 0.0;         // L2 (sgd, adam) or decoupled (adamw, lamb)
  double beta1 = 0.9;                // adam, adamw, lamb
  double beta2 = 0.999;
  double eps = 1e-8;
  bool larc = false;                 // wrap the optimizer in LARC/LARS
  double larc_eta = 0.001;           // LARC trust coefficient
  bool larc_clip = true;             // LARC "clip" mode: local lr never exceeds the global lr
  bool decay_bias_and_norm = true;   // false: no weight decay on biases and norm parameters
  bool operator==(const OptimizerConfig&) const = default;
};

// Learning-rate schedule; see schedule.hpp for the exact formulas.
struct ScheduleConfig {
  int64_t warmup_steps = 0;          // linear warm-up to the peak lr
  ScheduleKind kind = ScheduleKind::constant;  // constant | multistep | cosine
  std::vector<int64_t> milestones;   // multistep: lr *= gamma at each milestone
  MilestoneUnit milestone_unit = MilestoneUnit::steps;  // steps | epochs: what the milestones count
  double gamma = 0.1;                // multistep factor
  double min_lr = 0.0;               // cosine: final lr
  bool scale_lr_with_batch = false;  // linear scaling rule: lr x global_batch / reference_batch
  int64_t reference_batch = 256;
  bool operator==(const ScheduleConfig&) const = default;
};

}  // namespace squall::optim
