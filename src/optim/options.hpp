#pragma once
// The options of the optimizers, of the learning-rate schedule and of the outer optimizer
// across nodes: the config's [optimizer], [schedule] and [parallel.outer] sections
// (src/config/config.hpp holds them as they are), with the names of their enumerated keys.
#include <algorithm>
#include <cmath>
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

// What an optimizer's update uses besides the step's learning rate, which the schedule gives
// each step (Optimizer::step): the optimizers and the learner group carry this, not the lr.
struct OptimizerOptions {
  OptimizerKind name = OptimizerKind::sgd;  // sgd | adam | adamw | lamb
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
  bool operator==(const OptimizerOptions&) const = default;
};

// The config's [optimizer]: the options and the learning rate, which only the schedule reads
// (scaled_peak_lr, schedule.hpp).
struct OptimizerConfig : OptimizerOptions {
  double lr = 0.05;                  // peak learning rate (before the linear scaling rule)
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

// parallel.algorithm = outer (docs/training.md, "The outer optimizer"): ssgd inside each node
// every step, and every `period` steps an outer step across nodes that moves the centre by the
// nodes' progress with an outer learning rate and (Nesterov) momentum, DiLoCo's and SlowMo's
// rule. The config's [parallel.outer] as it is, which the learner group
// (src/parallel/learners.hpp) steps by once start_step and warmup_steps are steps of the run.
struct OuterOptions {
  int64_t period = 8;      // H: inner steps between outer steps across nodes
  // The defaults, H = 8, eta = 1, mu = 0 (each outer step the nodes' mean), are what
  // bench/RESULTS.md, "The outer optimizer against tuned ssgd", found best over slow links.
  double lr = 1.0;         // eta: the outer learning rate, > 0 (1 with momentum 0: the nodes' mean)
  double momentum = 0.0;   // mu: the outer momentum, [0, 1) (DiLoCo's 0.9 with lr 0.7)
  bool nesterov = true;    // Nesterov momentum (DiLoCo's); false: heavy ball (SlowMo's)
  int64_t start_step = 0;  // an outer step after every step before this one (post-local SGD's
                           // synchronous start); the group reads this one alone
  double start_fraction = 0;  // ... or before this fraction of the run's steps, [0, 1) (start_at)
  double qsr = 0;          // QSR's growing period (Gu et al., ICLR 2024): a round after start_step
                           // that starts after the warm-up lasts max(period, floor((qsr / lr)^2))
                           // steps, lr the inner rate of its first step; 0: every round lasts period
  bool streaming = false;  // the outer sum runs under the next inner step and is applied after it
                           // (Streaming DiLoCo's overlap of one step)
  // Asynchronous outer steps (mpi/async_centre.hpp): each node pushes its progress to the
  // centre and takes the newest without waiting for the others, its push weighted by
  // 1 / (1 + staleness); max_staleness B >= 0 lets a node run at most B rounds ahead of the
  // slowest (0: synchronous), < 0 never waits.
  bool async = false;
  int64_t max_staleness = -1;
  // Not a key of [parallel.outer]: the learning rate's warm-up (schedule.warmup_steps, as steps
  // of this run); its steps are those before this one. QSR's rounds that start in it last
  // period, as the paper's do.
  int64_t warmup_steps = 0;

  // The step before which every step ends with an outer step, in a run of total_steps.
  int64_t start_at(int64_t total_steps) const {
    return start_fraction > 0 ? static_cast<int64_t>(start_fraction * static_cast<double>(total_steps)) : start_step;
  }
  // The steps of a round whose first step is `first` (0-based), at inner learning rate `lr`:
  // period without QSR or during the warm-up (whose small rates would make a round longer than
  // any run), else max(period, floor((qsr / lr)^2)).
  int64_t round_length(int64_t first, double lr) const {
    if (qsr <= 0 || first < warmup_steps) return period;
    constexpr double k_longest = double{int64_t{1} << 40};  // lr -> 0: no outer step for the rest of any run
    const double h = lr > 0 ? std::floor((qsr / lr) * (qsr / lr)) : k_longest;
    return std::max(period, static_cast<int64_t>(std::min(h, k_longest)));
  }
  // Whether step `step` (0-based) ends with an outer step, for a fixed period (qsr = 0).
  bool outer_step_after(int64_t step) const {
    const int64_t done = step + 1;
    return done <= start_step || (done - start_step) % period == 0;
  }
  bool operator==(const OuterOptions&) const = default;
};

}  // namespace squall::optim
