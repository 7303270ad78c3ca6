#pragma once
// What squall's NCCL users share (mpi/nccl.cpp's sums, mpi/nccl_halo.cpp's halo exchanges):
// the checks that end the job on a failed CUDA or NCCL call, the one-GPU-per-rank check, an
// NCCL communicator made over MPI, and the host's wait that watches NCCL's errors. Internal to
// squall_mpi, and only in a build with CUDA: it includes <nccl.h> and <cuda_runtime.h>.
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include "mpi/comm.hpp"
#include "mpi/device_map.hpp"
#include "mpi/launch_env.hpp"
#include "src/core/error.hpp"

namespace squall::mpi::nccl_detail {

// A failed CUDA or NCCL call here ends the job with the call, the library's reason, file and
// line (the rank and host come with fatal's line): a sum that cannot run cannot be retried.
[[noreturn]] inline void call_failed(const char* lib, const char* call, const char* why, const char* file, int line) {
  fatal(std::string(lib) + " call " + call + " failed: " + (why ? why : "unknown error"), file, line);
}

// cudaEventQuery's "not ready" is also kept as the thread's last error: take it back, so that
// the backend's next launch check does not read it as a failed launch.
inline bool query_done(cudaError_t query, const char* call, const char* file, int line) {
  if (query == cudaSuccess) return true;
  if (query != cudaErrorNotReady) call_failed("CUDA", call, cudaGetErrorString(query), file, line);
  const cudaError_t last = cudaGetLastError();
  if (last != cudaSuccess && last != cudaErrorNotReady)
    call_failed("CUDA", "cudaGetLastError() after a query", cudaGetErrorString(last), file, line);
  return false;
}

#define SQUALL_CUDA_CHECK(call)                                                                  \
  do {                                                                                           \
    const cudaError_t squall_e_ = (call);                                                        \
    if (squall_e_ != cudaSuccess) call_failed("CUDA", #call, cudaGetErrorString(squall_e_), __FILE__, __LINE__); \
  } while (0)
#define SQUALL_CUDA_QUERY(call) query_done((call), #call, __FILE__, __LINE__)
#define SQUALL_NCCL_CHECK(call)                                                                  \
  do {                                                                                           \
    const ncclResult_t squall_e_ = (call);                                                       \
    if (squall_e_ != ncclSuccess) call_failed("NCCL", #call, ncclGetErrorString(squall_e_), __FILE__, __LINE__); \
  } while (0)

// Which ranks of `comm` share a GPU ("" when none do): the same text on every rank, so that
// all of them decide alike (mpi/device_map.hpp). Collective over `comm`.
inline std::string shared_gpu_verdict(const Communicator& comm, int device) {
  char bus[32] = {0};
  SQUALL_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
  const RankDevice mine{process_rank(), process_host(), bus};
  const std::vector<std::string> lines = comm.gather_strings(encode(mine), 0);
  std::string verdict;
  if (comm.rank() == 0) {
    std::vector<RankDevice> all;
    for (const std::string& line : lines) all.push_back(decode_rank_device(line));
    verdict = shared_gpus(all);
  }
  return comm.broadcast_string(verdict, 0);
}

// Before NCCL is asked: every rank of `comm` drives a GPU of its own, or all of them refuse
// together with one message naming the ranks that share one.
inline void check_one_gpu_per_rank(const Communicator& comm, int device) {
  const std::string verdict = shared_gpu_verdict(comm, device);
  if (!verdict.empty())
    throw Error("NCCL needs one GPU per rank, but " + verdict +
                ": run as many ranks per node as it has GPUs, make more GPUs visible (CUDA_VISIBLE_DEVICES), "
                "or sum through host memory (parallel.device_allreduce = host)");
}

// An NCCL communicator over the ranks of `comm`: rank 0 makes the unique id, MPI broadcasts it.
class NcclComm {
 public:
  NcclComm(const Communicator& comm, int device) {
    check_one_gpu_per_rank(comm, device);
    apply_nccl_launch_settings();  // NCCL reads NCCL_SOCKET_IFNAME at its first call
    ncclUniqueId id;
    if (comm.rank() == 0) SQUALL_NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string bytes = comm.broadcast_string(
        comm.rank() == 0 ? std::string(reinterpret_cast<const char*>(&id), sizeof(id)) : std::string(), 0);
    if (bytes.size() != sizeof(id)) throw Error("nccl: the unique id broadcast over MPI has the wrong size");
    std::memcpy(&id, bytes.data(), sizeof(id));
    SQUALL_CUDA_CHECK(cudaSetDevice(device));
    SQUALL_NCCL_CHECK(ncclCommInitRank(&m_comm, comm.size(), id, comm.rank()));
  }
  ~NcclComm() {
    if (m_comm) ncclCommDestroy(m_comm);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return m_comm; }
  // Marks the communicator unusable after an asynchronous error (ncclCommAbort frees it).
  void abort() {
    if (m_comm) ncclCommAbort(m_comm);
    m_comm = nullptr;
  }

 private:
  ncclComm_t m_comm = nullptr;
};

// Ends the job when an NCCL communicator in `comms` reports an asynchronous error (a failed
// or aborted peer), instead of letting the host wait forever.
inline void check_async(const std::vector<NcclComm*>& comms, std::string_view what) {
  for (NcclComm* c : comms) {
    ncclResult_t async = ncclSuccess;
    if (c->get() && ncclCommGetAsyncError(c->get(), &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      const std::string why = ncclGetErrorString(async);
      c->abort();
      fatal("NCCL failed during " + std::string(what) + ": " + why, __FILE__, __LINE__);
    }
  }
}

// Host waits for `event`, polling NCCL's asynchronous error state of every communicator in
// `comms`: a failed or aborted peer ends the job here instead of hanging it.
inline void wait_polling(cudaEvent_t event, const std::vector<NcclComm*>& comms, std::string_view what) {
  for (int idle = 0;; ++idle) {
    if (SQUALL_CUDA_QUERY(cudaEventQuery(event))) return;
    check_async(comms, what);
    if (idle < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace squall::mpi::nccl_detail
