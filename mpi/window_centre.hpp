#pragma once
// The asynchronous centre of parallel.outer.async in one-sided MPI windows, which squall
// measured against its threads (`squall bench centre`; docs/design.md, "Asynchronous outer
// steps") and does not train with: each leader holds one shard (mpi::async_shard_first) in an
// MPI window under a passive-target lock on every rank, beside a window of the shard's push
// count. A push is MPI_Fetch_and_op on every shard's count (its staleness, by
// mpi::async_staleness), MPI_Accumulate of the staleness-weighted delta and MPI_Get of the
// shard, each flushed; nothing on the target calls MPI on its behalf, so the MPI library's
// one-sided component must move the data while the target computes. Outer rate 1, no
// momentum: the threads' rule at its plainest. MPI_THREAD_MULTIPLE is not needed.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpi/comm.hpp"

namespace squall::mpi {

class WindowCentre {
 public:
  // Collective over `world`. A window this MPI cannot open on some rank (its one-sided
  // component refuses the job) leaves the centre unavailable() on every rank, with MPI's
  // reason, rather than throwing.
  WindowCentre(const Communicator& world, const float* initial, size_t n, double share);
  ~WindowCentre();
  WindowCentre(const WindowCentre&) = delete;
  WindowCentre& operator=(const WindowCentre&) = delete;

  // Empty when the windows are open.
  const std::string& unavailable() const;

  // This node's progress since the centre it last took: the weighted delta to every shard,
  // then the newest centre into out (n floats). Returns the push's staleness, the most over
  // the shards.
  int64_t push_pull(const float* model, float* out);

  // Collective, once every node has pushed its last: the whole final centre on every rank, and
  // the sum over every node of the deltas it applied (in double), to check the centre against.
  void finish(std::vector<float>& centre, std::vector<double>& applied);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace squall::mpi
