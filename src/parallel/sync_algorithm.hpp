#pragma once
// How a learner group keeps the job's learners together (docs/design.md, "The learner
// group"; docs/training.md): one interface, one implementation per algorithm, each in its
// own file opening with its equations:
//   ssgd       sync_ssgd.cpp        synchronous SGD: the job's mean gradient, one model;
//   sma        sync_sma.cpp         Crossbow's synchronous model averaging;
//   local-sgd  sync_local_sgd.cpp   independent steps, the job's average every period;
//   outer      sync_outer.cpp       ssgd inside each node, an outer optimizer across nodes.
// An algorithm runs the learners' passes of a step and its synchronisation. It leaves the
// step's losses readable on the host (the step's host wait has happened) and the group's
// updates enqueued, ordered before the learners' next passes by the group event.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
#include "src/parallel/group_core.hpp"

namespace squall::parallel {

class SyncAlgorithm {
 public:
  explicit SyncAlgorithm(GroupCore& core) : m_core(core) {}
  virtual ~SyncAlgorithm() = default;
  SyncAlgorithm(const SyncAlgorithm&) = delete;
  SyncAlgorithm& operator=(const SyncAlgorithm&) = delete;

  // The step: returns whether it skipped an update (non-finite gradients).
  virtual bool step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
                    const std::vector<LearnerBatch>* next) = 0;
  // A step this node lets pass without work (train.epoch_quorum: a slow node's round is cut
  // short): its learners take no batch, and the synchronisation due after the step happens as
  // after a step. Only outer has rounds to cut; the others throw.
  virtual void idle(int64_t step, float lr);
  // Where step `step` (0-based, at inner rate lr) falls in the rounds; asked before the step.
  virtual RoundSpot round_spot(int64_t /*step*/, float /*lr*/) { return {}; }
  // Whether the central model is learner 0's replica (every replica is one model), and
  // otherwise the central model the algorithm keeps (backend memory).
  virtual bool central_is_replica0() const { return true; }
  virtual const float* central_params() const { return m_core.replicas->operator[](0).graph->read_params(); }
  virtual const float* central_state() const { return m_core.replicas->operator[](0).graph->state(); }
  // Its own checkpoint state (the central model's history, its phase); restore() throws
  // squall::Error naming the checkpoint and the entry when one is missing.
  virtual void save(checkpoint::CheckpointData&) const {}
  virtual void restore(const checkpoint::CheckpointData&) {}
  // What differs per rank (a rank's own checkpoint part): sma's node centre under a node level.
  virtual void save_own(checkpoint::CheckpointData&) const {}
  virtual void restore_own(const checkpoint::CheckpointData&) {}
  // After restore: what is kept per node starts again from the job's centre (a rank new to
  // the job, or nodes grouped otherwise than in the checkpoint's job).
  virtual void restart_node_level() {}
  // The model this node's replicas are pulled towards or averaged from between the job's
  // synchronisations (sma's node centre under a node level); the central model otherwise.
  virtual const float* node_params() const { return central_params(); }
  // At the end of training, on every rank: the synchronisation still in flight is completed
  // and applied (outer's streamed sum), and the job synchronised once more where steps were
  // taken since its last synchronisation, so that the central model holds every step.
  // Returns whether the central model changed.
  virtual bool complete() { return false; }
  // outer: the outer steps taken (0 for the others).
  virtual int64_t outer_steps() const { return 0; }
  // Collective on every rank, where every rank reads the central model at the same point (an
  // evaluation, a checkpoint): asynchronous outer steps bring every node to the same centre
  // (a settling push). Nothing for the synchronous algorithms, whose central model is the
  // same everywhere already.
  virtual void agree() {}
  // Collective on every rank, after agree() and before save() (root) and save_own (every
  // rank): what save() needs from other ranks (the asynchronous centre's shards).
  virtual void before_save() {}
  // parallel.outer.async: what the nodes' pushes saw so far (zero for the others).
  virtual AsyncOuterStats async_stats() const { return {}; }
  // Gradient buckets handed over during the backward pass (ssgd across ranks), 0 otherwise.
  virtual size_t buckets() const { return 0; }

 protected:
  GroupCore& m_core;
};

std::unique_ptr<SyncAlgorithm> make_sync_algorithm(Algorithm algorithm, GroupCore& core);
// ssgd for `core` (local-sgd's warm-up runs one too).
std::unique_ptr<SyncAlgorithm> make_ssgd(GroupCore& core);
// ssgd over this node's learners only (core.node_sum): outer's inner steps.
std::unique_ptr<SyncAlgorithm> make_node_ssgd(GroupCore& core);

}  // namespace squall::parallel
