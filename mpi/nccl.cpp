// Device-buffer allreduces over NCCL and MPI (mpi/device_allreduce.hpp, docs/allreduce.md).
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include "mpi/allreduce.hpp"
#include "mpi/comm.hpp"
#include "mpi/device_allreduce.hpp"
#include "mpi/nccl_common.hpp"
#include "mpi/stall.hpp"
#include "mpi/topology.hpp"
#include "mpi/wire.hpp"
#include "src/core/error.hpp"

namespace squall::mpi {
namespace {

using namespace nccl_detail;

class Base : public DeviceAllreduce {
 public:
  Base(const Topology& topo, int device, const AllreduceOptions& o)
      : DeviceAllreduce(topo.world_size()),
        m_device(device), m_options(o), m_stall(topo, o.stall_warn_s, o.stall_abort_s) {
    SQUALL_CUDA_CHECK(cudaSetDevice(device));
    SQUALL_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    SQUALL_CUDA_CHECK(cudaEventCreateWithFlags(&m_done, cudaEventDisableTiming));
    SQUALL_CUDA_CHECK(cudaEventCreateWithFlags(&m_ready, cudaEventDisableTiming));
  }
  ~Base() override {
    cudaSetDevice(m_device);
    if (m_buffer) cudaFree(m_buffer);
    for (cudaEvent_t e : m_chunk_events) cudaEventDestroy(e);
    for (cudaEvent_t e : m_free_events) cudaEventDestroy(e);
    for (const Pending& p : m_pending) cudaEventDestroy(p.done);
    cudaEventDestroy(m_ready);
    cudaEventDestroy(m_done);
    cudaStreamDestroy(m_stream);
  }
  float* device_buffer(size_t count) override {
    if (count > m_buffer_count) {
      SQUALL_CUDA_CHECK(cudaSetDevice(m_device));
      if (m_buffer) SQUALL_CUDA_CHECK(cudaFree(m_buffer));
      SQUALL_CUDA_CHECK(cudaMalloc(&m_buffer, std::max<size_t>(count, 1) * sizeof(float)));
      m_buffer_count = count;
    }
    return m_buffer;
  }
  void upload(float* device, const float* host, size_t count) override {
    SQUALL_CUDA_CHECK(cudaMemcpy(device, host, count * sizeof(float), cudaMemcpyHostToDevice));
  }
  void download(float* host, const float* device, size_t count) override {
    SQUALL_CUDA_CHECK(cudaMemcpy(host, device, count * sizeof(float), cudaMemcpyDeviceToHost));
  }

  bool test(Ticket ticket) override {
    collect();
    return m_pending.empty() || m_pending.front().ticket > ticket;
  }
  void wait(Ticket ticket) override {
    while (!m_pending.empty() && m_pending.front().ticket <= ticket) {
      wait_polling(m_pending.front().done, comms(), m_pending.front().what);
      collect();
    }
  }
  // The caller's stream waits for the sum's event on the device: its host wait is then the
  // one that reads the caller's results (docs/design.md, "One host wait per step"). A sum
  // already retired has completed, and later work on any stream sees it.
  bool order_stream_after(Ticket ticket, void* stream) override {
    if (stream == nullptr) return false;
    for (const Pending& p : m_pending)
      if (p.ticket == ticket) {
        SQUALL_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), p.done, 0));
        return true;
      }
    return true;
  }

 protected:
  // The communicators whose asynchronous errors a wait polls.
  virtual std::vector<NcclComm*> comms() = 0;

  // This sum's number, and the stall watch told that it started.
  Ticket begin(std::string_view what) {
    const Ticket call = ++m_calls;
    m_stall.enter(call, what);
    return call;
  }
  // The work of `after` so far comes before what is enqueued on this object's stream next:
  // an event, not a host wait.
  void order_after(void* after) {
    if (after == nullptr) return;
    SQUALL_CUDA_CHECK(cudaEventRecord(m_ready, static_cast<cudaStream_t>(after)));
    SQUALL_CUDA_CHECK(cudaStreamWaitEvent(m_stream, m_ready, 0));
  }
  // Sum `call` is complete once the stream's work so far is: an event to test for.
  void pending(Ticket call, std::string_view what) {
    cudaEvent_t e = nullptr;
    if (!m_free_events.empty()) {
      e = m_free_events.back();
      m_free_events.pop_back();
    } else {
      SQUALL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    SQUALL_CUDA_CHECK(cudaEventRecord(e, m_stream));
    m_pending.push_back({call, e, std::string(what)});
  }
  // Retires the sums whose events have completed, in order (one stream: they complete in
  // order); while any is left, looks at NCCL's asynchronous error state.
  void collect() {
    while (!m_pending.empty() && SQUALL_CUDA_QUERY(cudaEventQuery(m_pending.front().done))) {
      m_stall.leave(m_pending.front().ticket);
      m_free_events.push_back(m_pending.front().done);
      m_pending.pop_front();
    }
    if (!m_pending.empty()) check_async(comms(), m_pending.front().what);
  }

  struct Pending {
    Ticket ticket;
    cudaEvent_t done;
    std::string what;
  };
  int m_device;
  AllreduceOptions m_options;
  StallWatch m_stall;
  Ticket m_calls = 0;
  cudaStream_t m_stream = nullptr;
  cudaEvent_t m_done = nullptr;   // the last work of a synchronous sum (device-hier)
  cudaEvent_t m_ready = nullptr;  // the caller's stream's work before a sum
  std::vector<cudaEvent_t> m_chunk_events;
  std::deque<Pending> m_pending;  // sums started and not yet seen complete, in order
  std::vector<cudaEvent_t> m_free_events;
  float* m_buffer = nullptr;
  size_t m_buffer_count = 0;
};

// One NCCL communicator over the job; sums are enqueued and return at once, several in flight.
class FlatNccl final : public Base {
 public:
  FlatNccl(const Topology& topo, int device, const AllreduceOptions& o)
      : Base(topo, device, o), m_comm(topo.world(), device) {}
  std::string mode() const override { return "nccl"; }
  Ticket start_f32(float* data, size_t count, std::string_view what, void* after) override {
    const Ticket call = begin(what);
    order_after(after);
    SQUALL_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, m_comm.get(), m_stream));
    pending(call, what);
    return call;
  }

 private:
  std::vector<NcclComm*> comms() override { return {&m_comm}; }
  NcclComm m_comm;
};

// NCCL inside the node, MPI across nodes, chunk by chunk: the stream runs the
// reduce-scatters of the next chunks (and copies their shards out) while the host sums
// earlier shards across nodes; the allgathers follow as each shard comes back.
class DeviceHier final : public Base {
 public:
  DeviceHier(const Topology& topo, int device, const AllreduceOptions& o)
      : Base(topo, device, o), m_topo(topo), m_node(topo.node_comm(), device), m_aware(mpi_is_cuda_aware()) {
    const std::vector<int> sizes = topo.world().allgather(topo.local_size());
    if (std::any_of(sizes.begin(), sizes.end(), [&](int s) { return s != sizes[0]; }))
      throw Error("device-hier needs nodes with the same number of ranks (this job's nodes differ); use nccl");
  }
  ~DeviceHier() override {
    if (m_host) cudaFreeHost(m_host);
  }
  std::string mode() const override {
    return std::string("device-hier (across nodes: ") + (m_aware ? "CUDA-aware MPI" : "MPI through pinned memory") + ")";
  }

  // Returns with the sum complete: the host moves every chunk across nodes.
  Ticket start_f32(float* data, size_t count, std::string_view what, void* after) override {
    const Ticket call = begin(what);
    order_after(after);
    const size_t local = static_cast<size_t>(m_topo.local_size());
    const size_t rank = static_cast<size_t>(m_topo.local_rank());
    // Chunks of whole shards: chunk = local * shard floats; a tail of < local floats is summed
    // by an allreduce inside the node and one across nodes.
    const size_t shard_max = std::max<size_t>(1, m_options.device_chunk_bytes / sizeof(float) / local);
    const size_t body = count / local * local;
    struct Chunk {
      size_t offset, shard;
    };
    std::vector<Chunk> chunks;
    for (size_t off = 0; off < body;) {
      const size_t shard = std::min(shard_max, (body - off) / local);
      chunks.push_back({off, shard});
      off += shard * local;
    }
    ensure(chunks.size(), shard_max, count - body);
    const int depth = std::max(1, m_options.max_inflight);
    size_t issued = 0;
    auto issue = [&](size_t k) {  // reduce-scatter chunk k into its shard, then copy the shard out
      const Chunk& c = chunks[k];
      float* shard_dev = data + c.offset + rank * c.shard;
      SQUALL_NCCL_CHECK(ncclReduceScatter(data + c.offset, shard_dev, c.shard, ncclFloat32, ncclSum, m_node.get(), m_stream));
      if (!m_aware)
        SQUALL_CUDA_CHECK(cudaMemcpyAsync(host_slot(k), shard_dev, c.shard * sizeof(float), cudaMemcpyDeviceToHost, m_stream));
      SQUALL_CUDA_CHECK(cudaEventRecord(m_chunk_events[k % m_chunk_events.size()], m_stream));
    };
    for (; issued < chunks.size() && issued < static_cast<size_t>(depth); ++issued) issue(issued);
    for (size_t k = 0; k < chunks.size(); ++k) {
      const Chunk& c = chunks[k];
      float* shard_dev = data + c.offset + rank * c.shard;
      wait_polling(m_chunk_events[k % m_chunk_events.size()], {&m_node}, what);
      if (m_aware) {
        plain_allreduce_sum(m_topo.cross_comm(), shard_dev, c.shard, DType::f32);
      } else {
        plain_allreduce_sum(m_topo.cross_comm(), host_slot(k), c.shard, DType::f32);
        SQUALL_CUDA_CHECK(cudaMemcpyAsync(shard_dev, host_slot(k), c.shard * sizeof(float), cudaMemcpyHostToDevice, m_stream));
      }
      SQUALL_NCCL_CHECK(ncclAllGather(shard_dev, data + c.offset, c.shard, ncclFloat32, m_node.get(), m_stream));
      if (issued < chunks.size()) issue(issued++);
    }
    if (count > body) {  // the tail: inside the node, then across
      float* tail = data + body;
      const size_t n = count - body;
      SQUALL_NCCL_CHECK(ncclAllReduce(tail, tail, n, ncclFloat32, ncclSum, m_node.get(), m_stream));
      if (m_aware) {
        SQUALL_CUDA_CHECK(cudaEventRecord(m_done, m_stream));
        wait_polling(m_done, {&m_node}, what);
        plain_allreduce_sum(m_topo.cross_comm(), tail, n, DType::f32);
      } else {
        float* h = m_host + m_tail_offset;
        SQUALL_CUDA_CHECK(cudaMemcpyAsync(h, tail, n * sizeof(float), cudaMemcpyDeviceToHost, m_stream));
        SQUALL_CUDA_CHECK(cudaEventRecord(m_done, m_stream));
        wait_polling(m_done, {&m_node}, what);
        plain_allreduce_sum(m_topo.cross_comm(), h, n, DType::f32);
        SQUALL_CUDA_CHECK(cudaMemcpyAsync(tail, h, n * sizeof(float), cudaMemcpyHostToDevice, m_stream));
      }
    }
    SQUALL_CUDA_CHECK(cudaEventRecord(m_done, m_stream));
    wait_polling(m_done, {&m_node}, what);
    m_stall.leave(call);
    return call;
  }
  bool test(Ticket) override { return true; }
  void wait(Ticket) override {}

 private:
  std::vector<NcclComm*> comms() override { return {&m_node}; }
  // Pinned host slots, one per chunk in flight, and the tail's; events per slot.
  void ensure(size_t chunks, size_t shard_max, size_t tail) {
    const size_t slots = std::min<size_t>(std::max<size_t>(chunks, 1), static_cast<size_t>(std::max(1, m_options.max_inflight)));
    while (m_chunk_events.size() < slots) {
      cudaEvent_t e;
      SQUALL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      m_chunk_events.push_back(e);
    }
    // Slots as events: never fewer than this sum's chunks in flight, and the same count for
    // the slot and the event of chunk k (k mod it).
    const size_t have = m_chunk_events.size();
    const size_t need = have * shard_max + tail;
    if (!m_aware && need > m_host_count) {
      if (m_host) SQUALL_CUDA_CHECK(cudaFreeHost(m_host));
      SQUALL_CUDA_CHECK(cudaMallocHost(&m_host, std::max<size_t>(need, 1) * sizeof(float)));
      m_host_count = need;
    }
    m_slot_floats = shard_max;
    m_tail_offset = have * shard_max;
  }
  // Slot k % slots: chunk k + slots is issued only after chunk k's shard has come back, since
  // issue(k + depth) follows the allgather of chunk k on the same stream and in the host loop.
  float* host_slot(size_t k) { return m_host + (k % m_chunk_events.size()) * m_slot_floats; }

  const Topology& m_topo;
  NcclComm m_node;
  bool m_aware;
  float* m_host = nullptr;
  size_t m_host_count = 0, m_slot_floats = 0, m_tail_offset = 0;
};

}  // namespace

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

std::vector<AllreduceKind> device_allreduce_kinds() { return {AllreduceKind::nccl, AllreduceKind::device_hier}; }

std::unique_ptr<DeviceAllreduce> make_device_allreduce(AllreduceKind kind, const Topology& topo, int device,
                                                       const AllreduceOptions& options) {
  const std::string name = k_allreduce_kinds.name(kind);
  if (kind == AllreduceKind::host) throw Error("host sums host memory, not device buffers: use make_allreduce");
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  const std::string why = counted == cudaSuccess ? "no CUDA device" : cudaGetErrorString(counted);
  if (counted != cudaSuccess) devices = 0;
  // Every rank decides together, so that none is left alone in a collective.
  if (topo.world().allreduce_min(devices > 0 ? 1 : 0) == 0)
    throw Error(name + " sums device buffers, but " +
                (devices == 0 ? "no GPU can be used here: " + why : std::string("another rank has no GPU")));
  if (kind == AllreduceKind::nccl) return std::make_unique<FlatNccl>(topo, device % devices, options);
  return std::make_unique<DeviceHier>(topo, device % devices, options);
}

}  // namespace squall::mpi
