// Halo exchanges of GPU memory over NCCL (mpi/device_halo.hpp).
//
// Each exchange runs on the exchanger's own stream: an event hands it the caller's stream's
// work so far (the packed halos), NCCL sends and receives them in one group, an event marks
// the end, and order() makes the caller's stream wait for that event. Between the two the
// caller's stream computes the tile's interior while the halos travel. Three timing events per
// exchange (its start and end on the exchanger's stream, the point where the caller's stream
// was ordered after it) give the seconds the halos were hidden and exposed, read once they
// have completed, never by a host wait of their own.
//
// A watch thread looks at NCCL's asynchronous error state every millisecond while exchanges
// are in flight: a failed or aborted peer ends the job with a line naming the exchange, where
// the caller's stream would otherwise wait for ever on the device and the host with it. An
// exchange whose NCCL work has started and not ended within the stall limit ends the job too,
// naming the group rank that waits.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mpi/device_halo.hpp"
#include "mpi/nccl_common.hpp"
#include "src/core/error.hpp"

namespace squall::mpi {
namespace {

using namespace nccl_detail;
using Clock = std::chrono::steady_clock;

class NcclHalo final : public DeviceHaloExchanger {
 public:
  NcclHalo(const Communicator& group, int device, double stall_abort_s)
      : m_device(device), m_rank(group.rank()), m_size(group.size()), m_stall_s(stall_abort_s), m_comm(group, device) {
    SQUALL_CUDA_CHECK(cudaSetDevice(device));
    // The halos are on the critical path of the pass: their stream goes first where the GPU
    // has work of both.
    int least = 0, greatest = 0;
    SQUALL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    SQUALL_CUDA_CHECK(cudaStreamCreateWithPriority(&m_stream, cudaStreamNonBlocking, greatest));
    SQUALL_CUDA_CHECK(cudaEventCreateWithFlags(&m_ready, cudaEventDisableTiming));
    m_watch = std::thread([this] { watch(); });
  }
  ~NcclHalo() override {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_stop = true;
    }
    m_wake.notify_all();
    m_watch.join();
    cudaSetDevice(m_device);
    cudaStreamSynchronize(m_stream);  // destructors never throw or end the job
    for (const Pending& p : m_pending) destroy(p.events);
    for (const Events& e : m_free) destroy(e);
    cudaEventDestroy(m_ready);
    cudaStreamDestroy(m_stream);
  }
  NcclHalo(const NcclHalo&) = delete;
  NcclHalo& operator=(const NcclHalo&) = delete;

  int rank() const override { return m_rank; }
  int size() const override { return m_size; }

  int64_t start(const std::vector<HaloMessage>& sends, const std::vector<HaloMessage>& receives,
                void* after) override {
    for (const auto* list : {&sends, &receives})
      for (const HaloMessage& m : *list) {
        const char* way = list == &sends ? "send" : "receive";
        if (m.peer < 0 || m.peer >= m_size)
          throw Error(std::string("halo exchange on the GPU: a ") + way + " (tag " + std::to_string(m.tag) +
                      ") for group rank " + std::to_string(m.peer) + " of a group of " + std::to_string(m_size));
        if (m.bytes > 0 && m.data == nullptr)
          throw Error(std::string("halo exchange on the GPU: a ") + way + " (tag " + std::to_string(m.tag) +
                      ", group rank " + std::to_string(m.peer) + ") of " + std::to_string(m.bytes) +
                      " bytes has no buffer");
      }
    collect();
    Pending p;
    p.id = ++m_started;
    p.events = take_events();
    for (const HaloMessage& m : sends) p.bytes_sent += static_cast<double>(m.bytes);
    for (const HaloMessage& m : receives) p.bytes_received += static_cast<double>(m.bytes);
    if (after != nullptr) {
      SQUALL_CUDA_CHECK(cudaEventRecord(m_ready, static_cast<cudaStream_t>(after)));
      SQUALL_CUDA_CHECK(cudaStreamWaitEvent(m_stream, m_ready, 0));
    }
    SQUALL_CUDA_CHECK(cudaEventRecord(p.events.begin, m_stream));
    // One group: the sends and receives of every peer progress together, whatever order the
    // peers reach theirs in. A pair's messages match by the order they are given in.
    SQUALL_NCCL_CHECK(ncclGroupStart());
    for (const HaloMessage& m : receives)
      if (m.bytes > 0) SQUALL_NCCL_CHECK(ncclRecv(m.data, m.bytes, ncclUint8, m.peer, m_comm.get(), m_stream));
    for (const HaloMessage& m : sends)
      if (m.bytes > 0) SQUALL_NCCL_CHECK(ncclSend(m.data, m.bytes, ncclUint8, m.peer, m_comm.get(), m_stream));
    SQUALL_NCCL_CHECK(ncclGroupEnd());
    SQUALL_CUDA_CHECK(cudaEventRecord(p.events.end, m_stream));
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_pending.push_back(p);
    }
    m_wake.notify_all();
    return p.id;
  }

  void order(int64_t id, void* stream) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    for (Pending& p : m_pending)
      if (p.id == id) {
        SQUALL_CUDA_CHECK(cudaEventRecord(p.events.ordered, static_cast<cudaStream_t>(stream)));
        SQUALL_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), p.events.end, 0));
        p.ordered = true;
        return;
      }
    // Retired: it has completed, and later work on any stream sees it.
  }

  void wait(int64_t id) override {
    cudaEvent_t end = nullptr;
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      for (const Pending& p : m_pending)
        if (p.id == id) end = p.events.end;
    }
    if (end != nullptr) wait_polling(end, {&m_comm}, "a halo exchange");
    collect();
  }

  HaloTotals totals() override {
    collect();
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_totals;
  }

 private:
  struct Events {
    cudaEvent_t begin = nullptr, end = nullptr, ordered = nullptr;
  };
  struct Pending {
    int64_t id = 0;
    Events events;
    bool ordered = false;
    double bytes_sent = 0, bytes_received = 0;
    Clock::time_point begun{};  // when the watch first saw its NCCL work start
  };

  static void destroy(const Events& e) {
    cudaEventDestroy(e.begin);
    cudaEventDestroy(e.end);
    cudaEventDestroy(e.ordered);
  }
  Events take_events() {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_free.empty()) {
      const Events e = m_free.back();
      m_free.pop_back();
      return e;
    }
    Events e;
    SQUALL_CUDA_CHECK(cudaEventCreate(&e.begin));
    SQUALL_CUDA_CHECK(cudaEventCreate(&e.end));
    SQUALL_CUDA_CHECK(cudaEventCreate(&e.ordered));
    return e;
  }

  // Retires the exchanges that have completed, in order (one stream), with their seconds:
  // the NCCL work's span, of which the caller's stream waited for the part after the point
  // where it was ordered after the exchange.
  void collect() {
    std::lock_guard<std::mutex> lock(m_mutex);
    while (!m_pending.empty()) {
      Pending& p = m_pending.front();
      if (!SQUALL_CUDA_QUERY(cudaEventQuery(p.events.end))) break;
      if (p.ordered && !SQUALL_CUDA_QUERY(cudaEventQuery(p.events.ordered))) break;
      float span_ms = 0, exposed_ms = 0;
      SQUALL_CUDA_CHECK(cudaEventElapsedTime(&span_ms, p.events.begin, p.events.end));
      if (p.ordered) {
        float after_ms = 0;
        SQUALL_CUDA_CHECK(cudaEventElapsedTime(&after_ms, p.events.ordered, p.events.end));
        exposed_ms = std::clamp(after_ms, 0.0f, span_ms);
      }
      m_totals.exposed_s += exposed_ms * 1e-3;
      m_totals.hidden_s += (span_ms - exposed_ms) * 1e-3;
      ++m_totals.exchanges;
      m_totals.bytes_sent += p.bytes_sent;
      m_totals.bytes_received += p.bytes_received;
      m_free.push_back(p.events);
      m_pending.pop_front();
    }
  }

  // The watch thread: NCCL's errors every millisecond while anything is in flight, and the
  // time the oldest exchange's NCCL work has been running.
  void watch() {
    cudaSetDevice(m_device);
    std::unique_lock<std::mutex> lock(m_mutex);
    while (!m_stop) {
      if (m_pending.empty()) {
        m_wake.wait(lock, [&] { return m_stop || !m_pending.empty(); });
        continue;
      }
      Pending& oldest = m_pending.front();
      const int64_t id = oldest.id;
      if (oldest.begun == Clock::time_point{} && cudaEventQuery(oldest.events.begin) == cudaSuccess)
        oldest.begun = Clock::now();
      const bool ended = cudaEventQuery(oldest.events.end) == cudaSuccess;
      const double running = oldest.begun == Clock::time_point{}
                                 ? 0.0
                                 : std::chrono::duration<double>(Clock::now() - oldest.begun).count();
      lock.unlock();
      check_async({&m_comm}, "halo exchange " + std::to_string(id));
      if (!ended && m_stall_s > 0 && running > m_stall_s)
        fatal("halo exchange " + std::to_string(id) + " of group rank " + std::to_string(m_rank) + " has waited " +
                  std::to_string(static_cast<int64_t>(running)) + " s for its neighbours (limit " +
                  std::to_string(static_cast<int64_t>(m_stall_s)) +
                  " s): a rank of the group has stopped; see the other ranks' lines",
              __FILE__, __LINE__);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock.lock();
    }
  }

  int m_device;
  int m_rank, m_size;
  double m_stall_s;
  NcclComm m_comm;
  cudaStream_t m_stream = nullptr;
  cudaEvent_t m_ready = nullptr;  // the caller's stream's work before an exchange
  int64_t m_started = 0;
  std::mutex m_mutex;  // m_pending, m_free, m_totals, m_stop: the watch thread reads them too
  std::condition_variable m_wake;
  std::deque<Pending> m_pending;
  std::vector<Events> m_free;
  HaloTotals m_totals;
  bool m_stop = false;
  std::thread m_watch;
};

}  // namespace

std::string device_halo_refusal(const Communicator& group, int device) {
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  const int usable = counted == cudaSuccess && devices > 0 ? 1 : 0;
  // Every rank decides together, so that none is left alone in a collective.
  if (group.allreduce_min(usable) == 0)
    return usable ? "another rank of the group has no GPU"
                  : std::string("no GPU can be used here: ") +
                        (counted == cudaSuccess ? "no CUDA device" : cudaGetErrorString(counted));
  const std::string shared = shared_gpu_verdict(group, device % devices);
  if (!shared.empty()) return "NCCL needs one GPU per rank, but " + shared;
  return "";
}

std::unique_ptr<DeviceHaloExchanger> make_device_halo_exchanger(const Communicator& group, int device,
                                                                double stall_abort_s) {
  if (const std::string why = device_halo_refusal(group, device); !why.empty())
    throw Error("halos in GPU memory over NCCL: " + why);
  int devices = 1;
  SQUALL_CUDA_CHECK(cudaGetDeviceCount(&devices));
  return std::make_unique<NcclHalo>(group, device % devices, stall_abort_s);
}

}  // namespace squall::mpi
