#pragma once
// An asynchronous centre for outer steps across nodes (parallel.outer.async; docs/design.md,
// "Asynchronous outer steps"): the job's central model, sharded over the node leaders (one
// rank per node), each leader's shard served by a thread of its own, so that a node hands in
// its progress and takes the newest centre without waiting for any other node (Project Adam's
// sharded parameter server, without its locks: one thread owns a shard).
//
// A node's push (push_pull) is its progress since the centre it last took, d = base - model,
// sent shard by shard with the node's inner learning rate; each shard applies it at once and
// answers with its newest values. A delta's staleness tau counts the rounds of the other
// nodes' pushes applied since k took the centre beyond the N - 1 that a synchronous round puts
// before it: with P such pushes, tau = ceil((P - (N - 1)) / N), 0 where P <= N - 1 (so equally
// fast nodes, each pushing once while the others do, are never stale). The shard's rule, for
// node k with share s_k of the job's learners, weight w = 1 / (1 + tau), outer rate eta,
// momentum mu, inner rate lr:
//     x   <- x - eta w s_k d                  at once, every push
//     acc <- acc + w s_k d / lr
// and after every N pushes (N the nodes: one outer step) the momentum, delayed to the step
// (the delayed Nesterov of asynchronous local SGD, Liu et al. 2024), with lr the rate of the
// push that completes it:
//     b   <- mu b + acc,  acc <- 0
//     x   <- x - eta mu lr b          Nesterov;   x <- x - eta mu lr b_before   heavy ball
// Where every node pushes once per round from the same centre (tau = 0), the N pushes of a
// round are one synchronous outer step to rounding: x - eta sum_k s_k d_k - eta mu lr b.
// 1 / (1 + tau) is the staleness-aware rate of Zhang et al. (IJCAI 2016): a delta computed
// from a centre tau steps old counts for less, so that a slow node's old progress does not
// pull the centre back towards where it was.
//
// Bounded staleness (max_staleness = B >= 0, stale synchronous parallel): a node's p-th push
// is answered once every node has pushed at least p - B times; B = 0 makes the job
// synchronous (every round waits for every node), B < 0 never waits. finish() is a last push
// (or none) answered when every node has finished: every node then holds the same centre.
//
// Each shard's thread answers requests in the order they arrive; the messages go over a
// duplicate of the leaders' communicator (MPI_THREAD_MULTIPLE: the thread's calls run beside
// the caller's). Host memory: a device node copies its model to the host first.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mpi/comm.hpp"

namespace squall::mpi {

struct AsyncCentreOptions {
  double lr = 1.0;            // eta
  double momentum = 0.0;      // mu
  bool nesterov = true;
  int64_t max_staleness = -1;  // B: pushes a node may be ahead of the slowest; < 0: unbounded
  double poll_s = 100e-6;     // how long a shard's thread sleeps between looks for requests
  // A node that has waited this long for the centre's answers ends the job, naming the shards
  // that have not answered (a settling push or the last one waits for every node: a node that
  // stopped would hold the others for ever); 0: it waits.
  double stall_abort_s = 0;
};

// What a push saw: the staleness of its delta in rounds (the most over the shards), the outer
// steps the centre had taken (the least over the shards), and the pushes of the slowest node
// when the answer came.
struct PushResult {
  int64_t staleness = 0;
  int64_t outer_steps = 0;
  int64_t slowest_pushes = 0;
  double waited_s = 0;  // from the push to the last shard's answer
  double waited_cpu_s = 0;  // the CPU seconds the calling thread spent in that time (its looks)
};

// The whole state, for checkpoints: every shard's values gathered in order, and the counters
// (the same on every shard once the job is quiet: between finish-like points).
struct AsyncCentreState {
  std::vector<float> centre, momentum, accumulated;
  int64_t outer_steps = 0, arrivals = 0;
  std::vector<int64_t> pushes;  // per node
};

// The first of n values that shard s of `shards` holds (shard s holds [first(s), first(s + 1))).
size_t async_shard_first(size_t n, int shards, int s);
// The staleness, in rounds, of a delta after `since` other pushes were applied to its shard, in
// a job of `nodes` nodes: the rounds beyond the N - 1 pushes a synchronous round puts before
// it, rounded up (0 where since <= N - 1).
int64_t async_staleness(int64_t since, int nodes);

class AsyncCentre {
 public:
  // Collective over `leaders` (one rank per node, in node order). initial: the n floats the
  // centre starts from (the same on every rank); share: this node's part of the job's learners
  // (the shares sum to 1). Starts this rank's shard thread.
  AsyncCentre(const Communicator& leaders, const float* initial, size_t n, double share, AsyncCentreOptions options);
  // Stops the thread (after finish(), or abandoning the centre where the job fails).
  ~AsyncCentre();
  AsyncCentre(const AsyncCentre&) = delete;
  AsyncCentre& operator=(const AsyncCentre&) = delete;

  int nodes() const;
  int node() const;
  size_t size() const;

  // This node's progress since the centre it last took (model: n floats, lr: the inner rate
  // of its last step), and the newest centre into centre_out (n floats; it may be `model`),
  // which becomes the base of the next push. Waits only as max_staleness says.
  PushResult push_pull(const float* model, float lr, float* centre_out);
  // A push answered once every node has pushed as often (every node calls it at the same
  // point of the run: an evaluation, a checkpoint): every node then holds the same centre.
  PushResult settle(const float* model, float lr, float* centre_out);
  // The last push (model null: none) and the final centre, once every node has finished.
  // Collective over the leaders; afterwards the shard threads stop.
  PushResult finish(const float* model, float lr, float* centre_out);
  // The whole state, gathered to every leader: collective, and meaningful where no push is in
  // flight (every leader calls it at the same point of the run, having pushed what it will).
  AsyncCentreState state();
  // A checkpoint's state back (collective): every node starts again from its centre, which is
  // the base of its next push.
  void restore(const AsyncCentreState& s);
  // The CPU seconds this rank's shard thread has used (as it last measured them: after each
  // request it served, and as it ended): on a node held to a CPU quota they come out of the
  // node's share.
  double serve_cpu_seconds() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> m_impl;
};

}  // namespace squall::mpi
