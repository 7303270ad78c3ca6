#pragma once
// The learner group's options (docs/design.md, "Learners and the training algorithms"), in the
// group's own types: what src/config fills in from a config (src/config/setup.hpp) and the
// tests set by hand, without the group itself (learners.hpp includes this header).
#include <cstddef>
#include <cstdint>

#include "mpi/comm.hpp"
#include "src/nn/spatial.hpp"
#include "src/nn/tensor.hpp"
#include "src/optim/options.hpp"
#include "src/parallel/algorithm.hpp"
#include "src/parallel/loss_scaler.hpp"

namespace squall::parallel {

// What a node's asynchronous outer steps saw (parallel.outer.async): its pushes, the
// staleness of their deltas (outer steps of the centre since the node took it), and the
// seconds it waited for the centre's answers (the network, and the staleness bound).
struct AsyncOuterStats {
  int64_t pushes = 0;
  int64_t staleness_max = 0;
  double staleness_sum = 0;
  double wait_s = 0;
  double wait_cpu_s = 0;   // the CPU seconds the leader's thread spent in those waits (its looks)
  double serve_cpu_s = 0;  // the CPU seconds of the thread serving the node's shard of the centre
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
  optim::OuterOptions outer;    // outer: its period, learning rate and momentum (start_step
                                // and warmup_steps as steps of this run)
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
  // parallel.spatial: the group of ranks that splits each sample, this rank's tile of it
  // (null: no split; it must outlive the group). Its ranks are consecutive ranks of the job:
  // `ranks` counts every rank, spatial_ranks those of one group.
  nn::TileComm* tile = nullptr;
  // parallel.outer.async: the node leaders (one rank per node, in node order) on this node's
  // leader, null on the other ranks of a node (they take the centre from it over the node).
  const mpi::Communicator* leaders = nullptr;
  double stall_abort_s = 0;  // ... how long a node waits for the centre before ending the job (0: for ever)
  int spatial_ranks = 1;
  bool graphs = false;          // capture each learner's pass once (after its first, eager, pass) and replay
                                // it (a CUDA graph); steps with a timeline or per-layer buckets run
                                // eagerly. Needs a backend that can capture
                                // (Capabilities::can_capture) and a model without dropout.
  // Whether there is a node level between the job's synchronisations (parallel.periods).
  bool by_level() const { return inside_period != 0 && inside_period != period; }
  // Whether the group sums over its node as well as over the job: parallel.periods' node
  // level, or outer's inner steps.
  bool node_level() const { return by_level() || algorithm == Algorithm::outer; }
};

}  // namespace squall::parallel
