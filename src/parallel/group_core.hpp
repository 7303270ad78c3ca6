#pragma once
// What the pieces of a learner group share (docs/design.md, "The learner group"): the
// learners, the group stream and its event, the fused sum, the loss scaler, the options, the
// phase hook, and the step's bookkeeping. The group (learners.hpp) owns it; the
// synchronisation algorithms (sync_algorithm.hpp) work on it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
#include "src/core/clock.hpp"
#include "src/nn/backend.hpp"
#include "src/parallel/fused_sum.hpp"
#include "src/parallel/learner.hpp"
#include "src/parallel/learners.hpp"
#include "src/parallel/loss_scaler.hpp"
#include "src/parallel/replica_set.hpp"

namespace squall::parallel {

// A thread that polls work in flight: after a poll that moved nothing it yields, and after 64
// such polls in a row it sleeps 20 us between them.
class IdleBackoff {
 public:
  void operator()(bool moved);

 private:
  int m_idle = 0;
};

struct GroupCore {
  GroupCore(nn::Backend& backend, const LearnerGroupOptions& options);

  nn::Backend& backend;
  const LearnerGroupOptions& options;  // the group's (set_job_ranks changes ranks)
  LearnerSetup setup;
  std::unique_ptr<nn::Stream> stream;     // the group's: sums and central updates
  std::unique_ptr<nn::Event> group_event;  // the group stream's last work on the replicas; a
                                           // learner's stream waits for it before its own
  std::unique_ptr<ReplicaSet> replicas;
  std::unique_ptr<FusedSum> sum;
  // A node level (parallel.periods, options.by_level()): the sum over this node's ranks, on
  // the node's allreduce (own_node when the node is this one rank). Null otherwise.
  std::unique_ptr<mpi::Allreduce> own_node;
  std::unique_ptr<FusedSum> node_sum;
  std::unique_ptr<LossScaler> scaler;
  nn::Buffer class_weights;  // backend copy of the class weights (or empty)
  size_t params = 0, state = 0;
  PhaseHook hook;
  // Work the caller's thread drives while the learners' passes run on theirs (run_passes
  // without start_only): a sum in flight that no pass reads (outer's streamed sum). Returns
  // whether it moved; empty when there is none.
  std::function<bool()> drive;

  // The step's bookkeeping: seconds waiting for the allreduce (exposed) and hidden behind
  // the passes, the most gradient buckets in flight, and the host's waits for the device.
  double reduce_s = 0, overlapped_s = 0;
  int max_buckets_in_flight = 0;
  int64_t host_waits = 0;

  // The job's learners, counting each rank of a spatial group (whose models are one): what a
  // sum of models or of whole-sample gradients over the job is divided by.
  int job_learners() const { return options.ranks * replicas->size(); }
  // The job's distinct learners: a spatial group counts once (parallel.spatial). What a sum of
  // the tiles' gradient shares over the job (ssgd under a split) is divided by, and the L of
  // sma's coefficients.
  int distinct_learners() const { return options.ranks / options.spatial_ranks * replicas->size(); }
  int node_learners() const { return options.node_ranks * replicas->size(); }
  // Which average ends the `done`-th step (1, 2, ...) of an algorithm's synchronising phase:
  // the job's every period steps, the node's every inside_period steps in between.
  enum class Level { none, node, job };
  Level sync_level(int64_t done) const {
    if (done % options.period == 0) return Level::job;
    if (options.by_level() && done % options.inside_period == 0) return Level::node;
    return Level::none;
  }
  // Whether a non-finite step is dropped (fp16's loss scaling, or train.nonfinite = skip).
  bool skips_nonfinite() const { return options.loss_scaling.dynamic || options.skip_nonfinite; }
  void phase(const char* name, int learner, double t0, double t1) const {
    if (hook) hook(name, learner, t0, t1);
  }
  // The rest of the calling scope as the group's phase `name`, its seconds also added to
  // *seconds when given (reduce_s: the step waited for the allreduce that long).
  auto phase_scope(const char* name, double* seconds = nullptr) const {
    return ScopedSpan([this, name, seconds](double t0, double t1) {
      phase(name, -1, t0, t1);
      if (seconds != nullptr) *seconds += t1 - t0;
    });
  }
  // The host waits for the group stream: counted, and shown on the timeline as "host_wait".
  void host_wait();
  // The group stream's later work waits for every learner's pass (and local update).
  void after_learners();
  // Every learner's pass of this step on its thread, with the group's pass options.
  void run_passes(const std::vector<LearnerBatch>& batches, int64_t step, const std::vector<LearnerBatch>* next,
                  bool marks, bool start_only);
  // Whether learner l's update may go ahead: false when its gradients are not finite and the
  // step is skipped (then l.overflow is set); throws NonFiniteStep under train.nonfinite =
  // stop. Reads l's sum of squares: call after the step's host wait.
  bool local_update_ok(Learner& l, int64_t step);
  // A learner's own update (sma, local-sgd), unscaled by the loss scale, on its stream.
  void local_update(Learner& l, float lr);
  // Checkpoints: n floats of backend memory copied to the host on the group stream (read
  // them after a wait), and a checkpoint's array `name` of n floats into backend memory.
  std::vector<float> to_host(const float* data, size_t n);
  void from_host(float* data, const checkpoint::CheckpointData& from, const std::string& name, size_t n);
  // A whole parameter or state arena (params or state floats of backend memory, laid out as
  // the replicas' graphs) as checkpoints keep it, packed without the padding between tensors
  // (src/nn/param_arena.hpp; ready when it returns), and such an array back into an arena.
  enum class Arena { params, state };
  std::vector<float> arena_to_host(const float* data, Arena which);
  void arena_from_host(float* data, const checkpoint::CheckpointData& from, const std::string& name, Arena which);

 private:
  std::function<void(Learner&)> m_pass;  // the step's pass, alive while start_only passes run
};

// The central model an algorithm keeps apart from the replicas (sma, local-sgd): z, the z of
// the synchronisation before (sma's momentum), and the averaged BatchNorm state; all start as
// learner 0's replica. In checkpoints: central/z, central/z_prev, central/averaged_state.
struct CentralModel {
  explicit CentralModel(GroupCore& core);
  void save(checkpoint::CheckpointData& out) const;
  void restore(const checkpoint::CheckpointData& in);

  GroupCore& core;
  nn::Buffer z, z_prev, state;
};

// "the output of layer 'conv2' is NaN", "the gradient of fc1.weight is infinite": where a
// learner's pass first went non-finite (forward order for a non-finite loss, else the
// gradients in backward order); "" when all is finite. Reads backend memory: error path only.
std::string locate_nonfinite(nn::Backend& backend, Learner& l);
// Whether every one of the n floats at x (backend memory) is finite; waits for `stream`.
// The slow path of a sum of squares that is not finite (it overflows for |g| > 1e19 too).
bool all_finite(nn::Backend& backend, nn::Stream& stream, const float* x, size_t n);

}  // namespace squall::parallel
