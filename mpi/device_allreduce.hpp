#pragma once
// Sums of float32 buffers in GPU memory over the job (docs/allreduce.md, "On device
// buffers"). The interface is free of CUDA and NCCL headers: the implementations are in
// cuda/nccl.cpp, and a build without CUDA has none (device_allreduce_names() is empty).
//
//   nccl         one NCCL communicator over the job: ncclAllReduce (one GPU per rank)
//   device-hier  NCCL reduce-scatter inside the node, an allreduce of each rank's shard
//                across nodes over MPI (on device pointers when the MPI is CUDA-aware, else
//                through pinned host memory), NCCL allgather inside the node; chunked, so
//                that the node-level NCCL work of later chunks runs while the host moves
//                earlier ones across nodes. Needs nodes of equal size.
//
// NCCL communicators are made by broadcasting ncclGetUniqueId over MPI. While waiting for
// NCCL the host polls ncclCommGetAsyncError: an NCCL failure aborts the communicator and
// ends the job with a line naming the rank, and every sum is guarded by the stall watchdog.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mpi/allreduce.hpp"

namespace squall::mpi {

class Topology;

class DeviceAllreduce {
 public:
  using Ticket = int64_t;
  virtual ~DeviceAllreduce() = default;
  // "nccl" or "device-hier (cross-node over CUDA-aware MPI)" and the like.
  virtual std::string mode() const = 0;
  // Starts the in-place sum of `count` floats of device memory over every rank. `after` is
  // the caller's CUDA stream (a cudaStream_t, opaque here) whose work so far writes `data`:
  // the sum is ordered after it by an event, so the host need not wait for that work first;
  // null when the data is ready already. Collective, in the same order on every rank.
  // nccl returns at once and several sums may be in flight; device-hier moves the chunks
  // across nodes from the host and so returns with the sum complete.
  virtual Ticket start(float* data, size_t count, std::string_view what, void* after) = 0;
  // Whether the sum has completed (its result may be read; later work on any stream sees
  // it). Polls NCCL's asynchronous errors: a failed peer ends the job instead of a hang.
  virtual bool test(Ticket ticket) = 0;
  virtual void wait(Ticket ticket) = 0;
  // start and wait.
  void sum(float* data, size_t count, std::string_view what) { wait(start(data, count, what, nullptr)); }
  // Device memory and copies, so that callers (the bench) need no CUDA header.
  virtual float* device_buffer(size_t count) = 0;  // owned by this object, grows as needed
  virtual void upload(float* device, const float* host, size_t count) = 0;
  virtual void download(float* host, const float* device, size_t count) = 0;
};

// The device algorithms of this build: {"nccl", "device-hier"} with CUDA, {} without.
std::vector<std::string> device_allreduce_names();

// Collective over the job. device: the GPU this rank uses. Throws squall::Error when the
// algorithm cannot run here (no GPU, no CUDA in this build, unequal nodes for device-hier).
std::unique_ptr<DeviceAllreduce> make_device_allreduce(const std::string& name, const Topology& topo, int device,
                                                       const AllreduceOptions& options);

// Whether this MPI library accepts CUDA device pointers (Open MPI: MPIX_Query_cuda_support).
bool mpi_is_cuda_aware();

}  // namespace squall::mpi
