#pragma once
// The hierarchical allreduce (docs/design.md "The hierarchical allreduce", docs/allreduce.md).
// Level 1 (summing the learners of a device) is the caller's; this does the rest:
//   2. reduce-scatter inside the node (node communicator),
//   3. allreduce of every shard across nodes, among the ranks that hold it,
//   4. allgather inside the node.
// The buffer is cut into chunks that move through the three stages with nonblocking MPI
// (the cross-node stage a ring of point-to-point messages), several chunks in flight, so
// that the levels overlap. Nodes may hold unequal numbers of
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
// Every sum is guarded by a stall watchdog (mpi/stall.hpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

namespace squall::mpi {

class Communicator;
class Topology;

// bf16: bfloat16 (the top half of an f32), summed in f32 and rounded to nearest even at every
// addition (a user-defined MPI operation): half the bytes of f32 on the wire, for gradients
// whose precision does not need more (parallel.comm_precision).
enum class DType { f32, f64, i32, i64, bf16 };
size_t dtype_size(DType type);
const char* dtype_name(DType type);

struct AllreduceOptions {
  size_t chunk_bytes = 256 << 10;      // pipeline unit (at most)
  size_t min_chunk_bytes = 64 << 10;   // ... made smaller, down to this, to have max_inflight chunks
  size_t flat_chunk_bytes = 16 << 20;  // unit of the flat sum (one MPI_Allreduce per unit)
  int max_inflight = 16;               // chunks in flight at once
  // device-hier's pipeline unit. Device buffers move at hundreds of GB/s inside a node, so
  // a host pipeline's chunk (tens of microseconds of work) would make every chunk wait on
  // the host; whole tens of MiB keep NCCL's kernels and the cross-node messages busy.
  size_t device_chunk_bytes = 16 << 20;
  double stall_warn_s = 60;     // a sum waited this long: rank 0 names the ranks that have not joined
  double stall_abort_s = 1800;  // ... and after this long the job ends
  // One MPI_Allreduce when the job has one node or one rank per node; false runs the
  // pipeline there too (tests and benchmarks).
  bool flat_single_level = true;
  // Unequal node sizes split every chunk into lcm(node sizes) parts; above this the sum
  // falls back to one MPI_Allreduce over the job (said once in the log).
  int max_parts = 256;
  // Sums of at most this many bytes are one MPI_Iallreduce over the job, whatever the nodes:
  // latency, not bandwidth, decides their time (bench/RESULTS.md).
  size_t small_bytes = 64 << 10;
};

// The stages a sum is made of, as reported to the level hook and by level_seconds().
enum class Level { node_reduce_scatter, cross_allreduce, node_allgather, flat_allreduce };
constexpr int k_levels = 4;
// "node_reduce_scatter", "cross_allreduce", "node_allgather", "allreduce" (the flat sum).
const char* level_name(Level level);

// Called for each finished stage (one chunk through one level) with its times in seconds on
// the steady clock (std::chrono::steady_clock, since its epoch) and the bytes this rank
// handed to that stage. Runs on the calling thread, inside start(), test() or wait().
using LevelHook = std::function<void(const char* level, double t_begin, double t_end, size_t bytes)>;

class HierAllreduce {
 public:
  // Collective over the world communicator: duplicates the communicators it needs.
  explicit HierAllreduce(const Topology& topo, AllreduceOptions options = {});
  ~HierAllreduce();
  HierAllreduce(const HierAllreduce&) = delete;
  HierAllreduce& operator=(const HierAllreduce&) = delete;

  // A sum in flight: the collective's number (1, 2, ...; the same on every rank).
  using Ticket = int64_t;

  // Starts an in-place sum over every rank of the job and returns at once; `data` must not be
  // touched until the sum has completed. Collective: every rank starts the same sums (count
  // and type) in the same order. `what` names the collective in stall messages
  // ("gradients step 12 bucket 2"). Every rank ends with the same bits.
  Ticket start(void* data, size_t count, DType type, std::string_view what = "allreduce");
  Ticket start(float* data, size_t count, std::string_view what = "allreduce") {
    return start(data, count, DType::f32, what);
  }
  // Drives every sum in flight without blocking; true once `ticket` has completed.
  bool test(Ticket ticket);
  // Drives every sum in flight until `ticket` has completed.
  void wait(Ticket ticket);
  // Until every sum started so far has completed.
  void wait_all();
  int in_flight() const;      // sums started and not yet completed
  int max_in_flight() const;  // the most that were in flight at once since construction

  // start() then wait().
  void sum(void* data, size_t count, DType type, std::string_view what = "allreduce");
  void sum(float* data, size_t count, std::string_view what = "allreduce") { sum(data, count, DType::f32, what); }
  void sum(double* data, size_t count, std::string_view what = "allreduce") { sum(data, count, DType::f64, what); }

  void set_level_hook(LevelHook hook);

  // Wall seconds the caller spent inside start(), test() and wait() since construction.
  double seconds() const;
  // Summed durations of one level's stages (they overlap each other, so the levels add up to
  // more than seconds()).
  double level_seconds(Level level) const;
  int64_t calls() const;  // sums so far; the next one is collective number calls() + 1

  // How the sums larger than small_bytes run on this job: "flat" (one MPI_Allreduce),
  // "pipeline" or "none" (one rank).
  const char* mode() const;
  int parts() const;  // parts per chunk (lcm of the node sizes); 0 when not pipelined
  const AllreduceOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// Plain MPI_Allreduce (in place, sum) on `comm`: the reference and the benchmark's baseline.
void plain_allreduce_sum(const Communicator& comm, void* data, size_t count, DType type);

}  // namespace squall::mpi
