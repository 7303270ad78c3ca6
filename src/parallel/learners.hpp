#pragma once
// The learners of one rank (one device) and the synchronisation algorithms that keep the
// job's learners together (docs/design.md, "Learners and the training algorithms").
//
// A LearnerGroup owns L learners, each a replica of the model that trains on its own batch,
// and keeps the job's learners together by one of three algorithms. It is a facade over
// pieces with one concern each (docs/design.md, "The learner group"):
//   learner.hpp          one replica: graph, optimizer, streams, input staging, its pass;
//   replica_set.hpp      the learners and their worker threads;
//   fused_sum.hpp        level 1 of the allreduce and the hand-over to levels 2-4;
//   gradient_buckets.hpp ssgd's gradients summed during the backward pass;
//   loss_scaler.hpp      fp16's dynamic loss scale; group_core.hpp the non-finite locator;
//   sync_algorithm.hpp   ssgd, sma, local-sgd and outer, each in its own file with its equations.
// The host waits for the device once a step, where the losses are read (and, where a host
// allreduce must read a model sum, once before it); everything else is ordered by events.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
#include "mpi/sum.hpp"
#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/optim/optimizer.hpp"
#include "src/parallel/algorithm.hpp"
#include "src/parallel/group_options.hpp"
#include "src/parallel/learner.hpp"
#include "src/parallel/loss_scaler.hpp"
#include "src/parallel/sma.hpp"

namespace squall::parallel {

struct GroupCore;
class SyncAlgorithm;

// What happens around each phase, for the timeline: phase is "forward", "backward",
// "device_sum", "allreduce", "update", "host_wait" (the host waiting for the group's
// stream); learner is -1 for work of the whole group. Times are seconds on
// the steady clock.
using PhaseHook = std::function<void(const char* phase, int learner, double t_begin, double t_end)>;

// A step whose gradients are NaN or infinite under train.nonfinite = stop. job_wide: found in
// the gradient sum over the job (ssgd), so every rank throws it at the same step and the
// caller may gather the culprits' descriptions; otherwise only this rank found it (a learner's
// own update under sma or local-sgd). `culprit`: "rank R learner J: the output of layer
// 'conv2' is NaN", or empty when no learner of this rank produced it.
class NonFiniteStep : public Error {
 public:
  NonFiniteStep(const std::string& what, std::string culprit, bool job_wide)
      : Error(what), m_culprit(std::move(culprit)), m_job_wide(job_wide) {}
  const std::string& culprit() const { return m_culprit; }
  bool job_wide() const { return m_job_wide; }

 private:
  std::string m_culprit;
  bool m_job_wide;
};

class LearnerGroup {
 public:
  // make_graph builds an unbuilt Graph of the model (called once per learner, plus once for
  // the central model's evaluation graph). label_count: labels per batch (batch, or
  // batch * h * w for per-pixel labels). class_weights: per-class loss weights or empty.
  // node_allreduce: the sum over this node's ranks, for a node level (inside_period < period)
  // in a job of several ranks; it must outlive the group.
  LearnerGroup(nn::Backend& backend, std::function<std::unique_ptr<nn::Graph>()> make_graph, int64_t batch,
               int64_t label_count, const optim::OptimizerOptions& optimizer, std::vector<float> class_weights,
               LearnerGroupOptions options, mpi::Allreduce& allreduce, mpi::Allreduce* node_allreduce = nullptr);
  ~LearnerGroup();
  LearnerGroup(const LearnerGroup&) = delete;
  LearnerGroup& operator=(const LearnerGroup&) = delete;

  int learners() const;
  int64_t batch() const { return m_batch; }
  const LearnerGroupOptions& options() const { return m_options; }
  // The model's true numbers of parameters and state values (what a report says), and the
  // floats of the arenas that hold them, padding between tensors included (what a copy or a
  // sum over central_params() or central_state() covers): nn::Graph's four sizes.
  size_t parameter_count() const;
  size_t state_value_count() const;
  size_t param_arena_floats() const;
  size_t state_arena_floats() const;
  std::string optimizer_name() const;

  // One training step: learner j trains on batches[j] (batches.size() == learners()), then
  // the group synchronises as its algorithm says at this step (collective through the
  // allreduce on every rank). Returns each learner's loss (before the update). A non-finite
  // loss is returned, not thrown: the caller names the step.
  // next: the batches of step + 1, when the caller has them already. On a device backend
  // they are copied to the device while this step computes (on each learner's copy stream),
  // and the next step() that is given the very same batches uses them without copying
  // again. Their memory must stay valid until that step has returned.
  std::vector<float> step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
                          const std::vector<LearnerBatch>* next = nullptr);

  // A step this node lets pass (train.epoch_quorum: src/train/pace.hpp): no learner trains,
  // and the synchronisation due after step `step` happens as after step(). Collective as step().
  void idle_step(int64_t step, float lr);
  // Where step `step` falls in the algorithm's rounds (outer; a round of one otherwise).
  RoundSpot round_spot(int64_t step, float lr);

  // The central model (backend memory), current after every step: these wait for the
  // group's streams, so that the host (or another stream) may read it.
  const float* central_params() const;
  const float* central_state() const;
  // A graph of batch() samples holding the central model, for evaluation (inference mode).
  nn::Graph& eval_graph();
  // One learner's replica (for tests).
  const float* replica_params(int learner) const;
  // The model of this rank's node between the job's synchronisations (sma's node centre under
  // parallel.periods' node level; the central model otherwise), for tests.
  const float* node_params() const;
  nn::Graph& replica_graph(int learner);

  // The auto-tuner: one more learner, starting from the central model (its optimizer state
  // from learner 0 under ssgd, fresh otherwise); or one less (the last). Collective in the
  // sense that every rank must make the same change before the next step.
  void add_learner();
  void remove_learner();
  // At the end of training, collective on every rank: completes the synchronisation still in
  // flight (parallel.outer.streaming's last outer step) and synchronises the job once more
  // where steps were taken since its last synchronisation (outer's final outer step,
  // local-sgd's average, sma's move of the centre), so that the central model holds every
  // step. Returns whether it changed the central model. Not at a stop that a resumed run goes
  // on from: that run must synchronise where an uninterrupted one would.
  bool complete();
  void set_job_ranks(int ranks) { m_options.ranks = ranks; }
  // outer: where its synchronous start ends and the learning rate's warm-up ends, as steps of
  // this run (a resume on another shape moves them: train/step_plan.hpp, run_step_of).
  void set_outer_steps(int64_t start_step, int64_t warmup_steps) {
    m_options.outer.start_step = start_step;
    m_options.outer.warmup_steps = warmup_steps;
  }
  // local-sgd: the step its synchronous start (parallel.start_step) ends at, as a step of this
  // run, placed as outer's is.
  void set_local_start_step(int64_t start_step) { m_options.start_step = start_step; }
  // outer: the outer steps the run has taken (every attempt's).
  int64_t outer_steps() const;
  // parallel.outer.async: what this node's pushes saw.
  AsyncOuterStats async_stats() const;
  // Collective on every rank before a checkpoint is written: the nodes of asynchronous outer
  // steps agree on one centre first (SyncAlgorithm::agree).
  void prepare_checkpoint();

  void set_phase_hook(PhaseHook hook);
  // Seconds since construction: waiting for the allreduce (not hidden behind the learners'
  // passes), the allreduce's time that was hidden behind them (SMA), and everything else in
  // step().
  double reduce_seconds() const;
  double overlapped_reduce_seconds() const;
  double compute_seconds() const { return m_compute_s; }
  // The host's waits for the device inside step() since construction (the timeline shows
  // each as "host_wait").
  int64_t host_waits() const;
  // ssgd across ranks: the gradient buckets of one step, and the most of them that were in
  // the allreduce's hands at once (handed over, not yet complete) since construction.
  size_t buckets() const;
  int max_buckets_in_flight() const;
  // Learners whose pass is being replayed from a capture (parallel.cuda_graphs).
  int captured_learners() const;
  // Dynamic loss scaling: the scale the next step uses, and the steps skipped so far
  // (in ssgd a step of the job; in sma/local-sgd a step in which one of this group's
  // learners skipped its update).
  float loss_scale() const;
  int64_t skipped_steps() const;
  nn::Layout layout() const { return m_options.layout; }
  // The layout the replicas' activations got, in words (nn::Graph::layout_text).
  std::string layout_text() const;

  // Checkpoints (docs/training.md, "Checkpoints and restart"). The group's whole state as
  // named host arrays and numbers: save_shared() what every rank holds alike (the central
  // model; while the replicas are one model, as under ssgd, that replica's optimizer state and
  // the loss scale), save_own() what differs per rank when replicas_differ() (each learner's
  // replica and optimizer state, the loss scale). restore() takes both (own: null when the
  // checkpoint has no per-rank part) and throws squall::Error naming the checkpoint and the
  // entry when something is missing or of another size. Random streams need no saving: a
  // learner's dropout mask is drawn from (seed, rank, learner, step). A part records whose
  // replicas it holds (replica_group(), "group"), and restore() takes only one of this rank's
  // group: every rank of a group of parallel.spatial holds the same replicas, so a part belongs
  // to the group, and a resume on another split or number of groups maps parts by group
  // (docs/training.md, "One sample across ranks").
  bool replicas_differ() const;
  // This rank's group of parallel.spatial, its rank in the job over the ranks of a group: the
  // rank itself in a job of whole samples, 0 in a split job of one group.
  int replica_group() const { return m_options.rank / m_options.spatial_ranks; }
  void save_shared(checkpoint::CheckpointData& out);
  void save_own(checkpoint::CheckpointData& out);
  // from_centre: the checkpoint has a part per rank but none for this rank (a resume on more
  // ranks): the replicas start from the central model with fresh optimizer state and loss scale,
  // and what the algorithm keeps per node (sma's node centre) from the job's. regrouped: the
  // job's ranks form other nodes than the checkpoint's did, so what is kept per node starts
  // from the job's on every rank (docs/training.md, "Elastic resume").
  void restore(const checkpoint::CheckpointData& shared, const checkpoint::CheckpointData* own,
               bool from_centre = false, bool regrouped = false);

  // SMA's coefficients for the job as it is now (the auto-tuner may change L).
  SmaCoefficients sma() const;

 private:
  // The host waits for every stream of the group: before the host or another stream reads
  // the group's memory outside step().
  void settle() const;

  LearnerGroupOptions m_options;  // first: the core refers to it
  int64_t m_batch;
  std::unique_ptr<GroupCore> m_core;
  std::unique_ptr<SyncAlgorithm> m_algorithm;
  std::unique_ptr<nn::Graph> m_eval;
  bool m_eval_current = false;
  double m_compute_s = 0;
};

}  // namespace squall::parallel
