#pragma once
// The hierarchical allreduce (docs/design.md "The hierarchical allreduce", docs/allreduce.md).
// Level 1 (summing the learners of a device) is the caller's; this does the rest:
//   2. reduce-scatter inside the node (node communicator),
//   3. allreduce of every shard across nodes, among the ranks that hold it,
//   4. allgather inside the node.
// The buffer is cut into chunks that move through the three stages with nonblocking MPI
// (the cross-node stage point-to-point messages: a ring, or recursive halving and doubling,
// whose latency grows with log2 of the nodes; options.cross_node), several chunks in flight,
// so that the levels overlap. Nodes may hold unequal numbers of
// ranks. A job with only one non-trivial level (one node, or one rank per node) is summed by
// MPI_Allreduce over the job: there is nothing to overlap, and the library's blocking
// algorithm is faster than its nonblocking ones (bench/RESULTS.md).
//
// Sums are nonblocking: start() hands a buffer over and returns a ticket, test() drives every
// sum in flight and says whether one has completed, wait() blocks until it has; sum() is
// start() then wait(). Several sums may be in flight at once (the gradient buckets of a
// backward pass): their chunks share the pipeline in the order they were started. Small sums
// (at most small_bytes) are one MPI_Iallreduce over the job: the fewest messages, no barrier.
//
// Every sum is guarded by a stall watchdog (mpi/stall.hpp). It is the "host" implementation of
// the one allreduce interface (mpi/sum.hpp). Sources: allreduce.cpp (set-up, mode choice,
// the public calls), pipeline.cpp (the chunk pipeline and the blocking path), ring.cpp and
// halving_doubling.cpp (the cross-node algorithms), wire.cpp (datatypes, the bf16 operation).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "mpi/sum.hpp"

namespace squall::mpi {

class Communicator;
class Topology;

class HierAllreduce final : public Allreduce {
 public:
  // Collective over the world communicator: duplicates the communicators it needs.
  explicit HierAllreduce(const Topology& topo, AllreduceOptions options = {});
  ~HierAllreduce() override;
  HierAllreduce(const HierAllreduce&) = delete;
  HierAllreduce& operator=(const HierAllreduce&) = delete;

  // Host memory; f32, f64, i32, i64 and bf16 (f16 throws). after_stream is not used: the
  // data must be complete when start() is called. Several sums may be in flight.
  using Allreduce::start;
  Ticket start(void* data, size_t count, DType type, std::string_view what = "allreduce",
               void* after_stream = nullptr) override;
  bool test(Ticket ticket) override;
  void wait(Ticket ticket) override;
  // Until every sum started so far has completed.
  void wait_all();
  int in_flight() const;      // sums started and not yet completed
  int max_in_flight() const;  // the most that were in flight at once since construction

  int ranks() const override;
  bool takes(DType type) const override;

  void set_level_hook(LevelHook hook) override;
  double seconds() const override;
  double level_seconds(Level level) const override;
  int64_t calls() const;  // sums so far; the next one is collective number calls() + 1

  // How the sums larger than small_bytes run on this job: "flat" (one MPI_Allreduce),
  // "pipeline" or "none" (one rank).
  std::string mode() const override;
  int parts() const;  // parts per chunk (lcm of the node sizes); 0 when not pipelined
  // Parts of chunks this rank has summed across nodes with `algorithm` (automatic: with
  // either) since construction; cross_node() names those that ran.
  int64_t cross_parts(CrossAlgorithm algorithm) const;
  std::string cross_node() const override;
  const AllreduceOptions& options() const;

  // Its state (mpi/hier_impl.hpp), shared by allreduce.cpp and pipeline.cpp.
  struct Impl;

 private:
  std::unique_ptr<Impl> m_impl;
};

// What the cross-node stage does among `nodes` nodes with these options, in words for the
// log: the forced algorithm, or auto's rule on options.cross_link ("auto among 5 nodes (link
// 20 us, 10 Gbit/s): halving-doubling for parts below 26316 bytes, ring above").
std::string cross_rule(const AllreduceOptions& options, int nodes);

}  // namespace squall::mpi
