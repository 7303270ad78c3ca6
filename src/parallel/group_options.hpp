#pragma once
// The learner group's options (docs/design.md, "Learners and the training algorithms"), in the
// group's own types: what src/config fills in from a config (src/config/setup.hpp) and the
// tests set by hand, without the group itself (learners.hpp includes this header).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "src/nn/tensor.hpp"
#include "src/parallel/algorithm.hpp"
#include "src/parallel/loss_scaler.hpp"

namespace squall::parallel {

// parallel.algorithm = outer (docs/training.md, "The outer optimizer"): ssgd inside each node
// every step, and every `period` steps an outer step across nodes that moves the centre by the
// nodes' progress with an outer learning rate and (Nesterov) momentum, DiLoCo's and SlowMo's rule.
struct OuterOptions {
  int64_t period = 8;      // H: inner steps between outer steps (parallel.outer.period)
  double lr = 1.0;         // eta: the outer learning rate (parallel.outer.lr)
  double momentum = 0.0;   // mu: the outer momentum, [0, 1) (parallel.outer.momentum)
  bool nesterov = true;    // Nesterov's form of it (parallel.outer.nesterov)
  int64_t start_step = 0;  // an outer step after every step before this one (post-local SGD's
                           // synchronous start; parallel.outer.start_step)
  double qsr = 0;          // QSR's growing period (Gu et al., ICLR 2024): a round after start_step
                           // that starts after the warm-up lasts max(period, floor((qsr / lr)^2))
                           // steps, lr the inner rate of its first step; 0: every round lasts
                           // period (parallel.outer.qsr)
  bool streaming = false;  // the outer sum runs under the next inner step and is applied after it
                           // (Streaming DiLoCo's overlap of one step; parallel.outer.streaming)
  int64_t warmup_steps = 0;  // the learning rate's warm-up: its steps are those before this one
                             // (schedule.warmup_steps, as steps of this run); QSR's rounds that
                             // start in it last period, as the paper's do

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
};

struct LearnerGroupOptions {
  Algorithm algorithm = Algorithm::ssgd;
  int learners = 1;             // replicas on this device
  int ranks = 1;                // ranks in the job (all with the same learner count)
  int rank = 0;                 // this rank in the job (salts the learners' random streams)
  int64_t period = 1;           // sma / local-sgd: steps between the job's synchronisations
  int64_t inside_period = 0;    // ... and between averages inside each node (parallel.periods'
                                // inside; a divisor of period); 0 = period: no node level
  int node_ranks = 1;           // ranks on this rank's node (the node level's sum runs over them)
  double alpha = 0.1;           // sma: pull of each learner towards the central model
  double centre_rate = 0;       // sma: beta; 0 = min(alpha * job learners, 1)
  double momentum = 0.9;        // sma: mu on the central model
  int64_t start_step = 0;       // local-sgd: ssgd before this step
  OuterOptions outer;           // outer: its period, learning rate and momentum
  uint64_t seed = 1;            // parameter initialisation (the same on every learner)
  int threads = 0;              // compute threads for the whole group (0: the backend's)
  size_t bucket_floats = size_t{1} << 18;  // ssgd across ranks: gradients reduced in buckets of
                                           // at least this many floats (1 MiB; parallel.bucket_mb)
                                           // during the backward pass, several in flight at once
  nn::DType precision = nn::DType::f32;  // the activations' type (train.precision)
  nn::Layout layout = nn::Layout::nchw;  // their memory order (model.layout, resolved)
  LossScaling loss_scaling;     // fp16: dynamic loss scaling
  bool bf16_gradients = false;  // parallel.comm_precision = bf16: gradient sums across ranks in
                                // bf16 (half the bytes); model sums and BatchNorm statistics stay f32
  bool skip_nonfinite = false;  // train.nonfinite = skip: a step with non-finite gradients is not
                                // applied (counted in skipped_steps); false: step() throws
                                // NonFiniteStep naming the rank, learner and layer
  bool graphs = false;          // capture each learner's pass once (after its first, eager, pass) and replay
                                // it (a CUDA graph); steps with a timeline or per-layer buckets run
                                // eagerly. Needs a backend that can_capture() and a model without dropout.
  // Whether there is a node level between the job's synchronisations (parallel.periods).
  bool by_level() const { return inside_period != 0 && inside_period != period; }
  // Whether the group sums over its node as well as over the job: parallel.periods' node
  // level, or outer's inner steps.
  bool node_level() const { return by_level() || algorithm == Algorithm::outer; }
};

}  // namespace squall::parallel
