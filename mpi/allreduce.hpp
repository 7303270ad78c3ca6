#pragma once
// The hierarchical allreduce (DESIGN.md "Hierarchical allreduce", docs/allreduce.md).
// Level 1 (summing the learners of a device) is the caller's; this does the rest:
//   2. reduce-scatter inside the node (node communicator),
//   3. allreduce of every shard across nodes, among the ranks that hold it,
//   4. allgather inside the node.
// The buffer is cut into chunks that move through the three stages with nonblocking MPI,
// several chunks in flight, so that the levels overlap. Nodes may hold unequal numbers of
// ranks. A job with only one non-trivial level (one node, or one rank per node) is summed by
// MPI_Allreduce over the job: there is nothing to overlap, and the library's blocking
// algorithm is faster than its nonblocking ones (bench/RESULTS.md).
//
// Every sum() is guarded by a stall watchdog (mpi/stall.hpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

namespace squall::mpi {

class Communicator;
class Topology;

enum class DType { f32, f64, i32, i64 };
size_t dtype_size(DType type);
const char* dtype_name(DType type);

struct AllreduceOptions {
  size_t chunk_bytes = 4 << 20;        // pipeline unit
  size_t flat_chunk_bytes = 16 << 20;  // unit of the flat sum (one MPI_Allreduce per unit)
  int max_inflight = 4;                // chunks in flight at once
  double stall_warn_s = 60;     // a sum waited this long: rank 0 names the ranks that have not joined
  double stall_abort_s = 1800;  // ... and after this long the job ends
  // One MPI_Allreduce when the job has one node or one rank per node; false runs the
  // pipeline there too (tests and benchmarks).
  bool flat_single_level = true;
  // Unequal node sizes split every chunk into lcm(node sizes) parts; above this the sum
  // falls back to one MPI_Allreduce over the job (said once in the log).
  int max_parts = 256;
};

// The stages a sum is made of, as reported to the level hook and by level_seconds().
enum class Level { node_reduce_scatter, cross_allreduce, node_allgather, flat_allreduce };
constexpr int k_levels = 4;
// "node_reduce_scatter", "cross_allreduce", "node_allgather", "allreduce" (the flat sum).
const char* level_name(Level level);

// Called for each finished stage (one chunk through one level) with its times in seconds on
// the steady clock (std::chrono::steady_clock, since its epoch) and the bytes this rank
// handed to that stage. Runs on the calling thread, inside sum().
using LevelHook = std::function<void(const char* level, double t_begin, double t_end, size_t bytes)>;

class HierAllreduce {
 public:
  // Collective over the world communicator: duplicates the communicators it needs.
  explicit HierAllreduce(const Topology& topo, AllreduceOptions options = {});
  ~HierAllreduce();
  HierAllreduce(const HierAllreduce&) = delete;
  HierAllreduce& operator=(const HierAllreduce&) = delete;

  // In-place sum over every rank of the job. Collective: every rank calls with the same count
  // and type, in the same order. `what` names the collective in stall messages
  // ("gradients step 12"). Every rank ends with the same bits.
  void sum(void* data, size_t count, DType type, std::string_view what = "allreduce");
  void sum(float* data, size_t count, std::string_view what = "allreduce") { sum(data, count, DType::f32, what); }
  void sum(double* data, size_t count, std::string_view what = "allreduce") { sum(data, count, DType::f64, what); }

  void set_level_hook(LevelHook hook);

  // Wall seconds spent inside sum() since construction.
  double seconds() const;
  // Summed durations of one level's stages (they overlap each other, so the levels add up to
  // more than seconds()).
  double level_seconds(Level level) const;
  int64_t calls() const;  // sums so far; the next one is collective number calls() + 1

  // How the sums run on this job: "flat" (one MPI_Allreduce), "pipeline" or "none" (one rank).
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
