#pragma once
// Sums of float32 buffers in GPU memory over the job (docs/allreduce.md, "On device
// buffers"). The interface is free of CUDA and NCCL headers: the implementations are in
// mpi/nccl.cpp, and a build without CUDA has none (device_allreduce_names() is empty).
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

#include "mpi/allreduce_kind.hpp"
#include "mpi/sum.hpp"
#include "src/core/error.hpp"

namespace squall::mpi {

class Topology;

// The "nccl" and "device-hier" implementations of the one allreduce interface (mpi/sum.hpp):
// device memory, f32 only, ordered after the caller's stream by an event.
class DeviceAllreduce : public Allreduce {
 public:
  explicit DeviceAllreduce(int ranks) : m_ranks(ranks) {}

  // Starts the in-place sum of `count` floats of device memory over every rank. `after_stream`
  // is the caller's CUDA stream (a cudaStream_t, opaque here) whose work so far writes `data`:
  // the sum is ordered after it by an event, so the host need not wait for that work first;
  // null when the data is ready already. Collective, in the same order on every rank. nccl
  // returns at once and several sums may be in flight; device-hier moves the chunks across
  // nodes from the host and so returns with the sum complete. Any type but f32 throws.
  using Allreduce::start;
  Ticket start(void* data, size_t count, DType type, std::string_view what, void* after_stream = nullptr) final {
    if (!takes(type))
      throw Error("the " + mode() + " allreduce sums f32 only, not " + dtype_name(type) +
                  " (parallel.comm_precision = bf16 needs parallel.device_allreduce = host)");
    return start_f32(static_cast<float*>(data), count, what, after_stream);
  }
  // test: whether the sum has completed (its result may be read; later work on any stream
  // sees it). Polls NCCL's asynchronous errors: a failed peer ends the job instead of a hang.

  int ranks() const final { return m_ranks; }
  bool takes(DType type) const final { return type == DType::f32; }
  Memory memory() const final { return Memory::device; }
  bool orders_after_stream() const final { return true; }

  // Device memory and copies, so that callers (the bench) need no CUDA header.
  virtual float* device_buffer(size_t count) = 0;  // owned by this object, grows as needed
  virtual void upload(float* device, const float* host, size_t count) = 0;
  virtual void download(float* host, const float* device, size_t count) = 0;

 protected:
  virtual Ticket start_f32(float* data, size_t count, std::string_view what, void* after) = 0;

 private:
  int m_ranks;
};

// The device algorithms of this build: nccl and device-hier with CUDA, none without.
std::vector<AllreduceKind> device_allreduce_kinds();
// The NCCL library these sums use ("2.28.3"), or "" in a build without them.
std::string nccl_version();
// Their names (k_allreduce_kinds), for flags and messages.
inline std::vector<std::string> device_allreduce_names() {
  std::vector<std::string> names;
  for (const AllreduceKind k : device_allreduce_kinds()) names.emplace_back(k_allreduce_kinds.name(k));
  return names;
}

// Collective over the job. device: the GPU this rank uses. Throws squall::Error when the
// algorithm cannot run here (host is not a device sum, no GPU, no CUDA in this build,
// unequal nodes for device-hier). Callers other than the bench use make_allreduce
// (mpi/make_allreduce.hpp).
std::unique_ptr<DeviceAllreduce> make_device_allreduce(AllreduceKind kind, const Topology& topo, int device,
                                                       const AllreduceOptions& options);

}  // namespace squall::mpi
