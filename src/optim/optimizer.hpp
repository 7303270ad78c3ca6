#pragma once
// Optimizers over parameter groups (one group per parameter tensor). The Backend does the
// arithmetic with its fused multi-tensor updates (sgd_update, adam_update, larc_scale: one
// launch for every tensor on CUDA, per-tensor norms kept on the device), so that the same
// code updates host memory on the CPU backend and device memory on CUDA without a host sync.
//
// Groups are per tensor, although a model keeps all its parameters in one arena, because
// LARS/LARC and LAMB compute a trust ratio per tensor, and because biases and normalisation
// parameters may be excluded from weight decay (ParamGroup::weight_decay = false).
//
// Semantics follow PyTorch (torch.optim.SGD, Adam, AdamW) so that the peer tests can compare;
// LAMB follows You et al. 2020 (Algorithm 2, with bias correction, as NVIDIA's FusedLAMB);
// LARC follows NVIDIA apex's LARC wrapper.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/nn/backend.hpp"
#include "src/optim/options.hpp"

namespace squall::optim {

struct ParamGroup {
  float* w = nullptr;         // parameters (backend memory)
  float* g = nullptr;         // their gradient (backend memory); step() may modify it (LARC)
  size_t n = 0;               // element count
  bool weight_decay = true;   // false: biases and norm parameters when they are excluded
  std::string name;           // "conv1.weight", for errors and checkpoints
  nn::WeightMirror mirror{};  // a plan's copy of w that each update writes too (none: no data)
};

// One optimizer state buffer (all groups back to back, in group order), for checkpoints.
struct OptimizerState {
  std::string name;           // "momentum", "exp_avg", "exp_avg_sq"
  float* data = nullptr;      // backend memory
  size_t count = 0;           // floats
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every group with learning rate lr (the schedule's value for this step).
  virtual void step(nn::Backend& backend, nn::Stream& stream, float lr) = 0;
  virtual std::string name() const = 0;  // "sgd", "adam", "adamw", "lamb", "larc(sgd)"
  // Buffers to save and restore (copy through the backend); their contents are the whole
  // state together with steps().
  virtual std::vector<OptimizerState> state() = 0;
  // Updates done so far (Adam's bias correction uses it); restore with set_steps.
  virtual int64_t steps() const = 0;
  virtual void set_steps(int64_t steps) = 0;
  virtual const std::vector<ParamGroup>& groups() const = 0;
};

// Builds the optimizer the config names (sgd | adam | adamw | lamb), wrapped in LARC when
// config.larc. State buffers are allocated once, through backend.allocate, and zeroed.
// mirrors_written, when given, is called after each step has enqueued its update: the
// groups' mirrors then hold the new weights (nn::Graph::mark_mirrors_current).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& config, nn::Backend& backend,
                                          std::vector<ParamGroup> groups,
                                          std::function<void()> mirrors_written = {});

// The floats of state make_optimizer's optimizer of this kind keeps per parameter (its
// state() buffers over the parameter count): SGD's velocity (momentum 0 included), the two
// moments of Adam, AdamW and LAMB. LARC adds none. For planning memory before the optimizer
// exists (src/train/memory_need.hpp).
int64_t state_floats_per_parameter(OptimizerKind kind);

// Trust ratio ||w|| / ||u|| used by LAMB; 1 when either norm is 0.
double lamb_trust_ratio(double w_norm, double u_norm);
// LARC's factor on the gradient (the inner optimizer then runs at lr):
// local = eta ||w|| / (||g|| + wd ||w||); clip: min(local / lr, 1); else local.
// 1 when either norm is 0.
double larc_factor(double w_norm, double g_norm, double weight_decay, double eta, bool clip, double lr);

}  // namespace squall::optim
