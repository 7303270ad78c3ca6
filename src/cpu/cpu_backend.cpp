// CpuBackend: construction, streams, memory and copies. Memory is host memory, 256-byte
// aligned as Backend::allocate promises on every backend (a cudaMalloc'd block's alignment;
// more than a cache line or an AVX-512 load needs, so that views the graph aligns to 256
// bytes are aligned in memory on the CPU too), recycled through a size-keyed pool so that a
// plan rebuilt for the same shapes does not go back to the system allocator.
#include "src/cpu/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "src/core/error.hpp"
#include "src/cpu/cpu_info.hpp"

namespace squall::cpu {

class MemoryPool {
 public:
  MemoryPool() = default;
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;
  ~MemoryPool() {
    for (auto& [bytes, blocks] : m_free)
      for (void* p : blocks) std::free(p);
  }

  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      auto it = m_free.find(bytes);
      if (it != m_free.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (!p)
      throw Error("cpu backend: out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }

  void give(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_free[bytes].push_back(p);
  }

  static constexpr size_t kAlignment = 256;

 private:
  std::mutex m_mutex;
  std::unordered_map<size_t, std::vector<void*>> m_free;  // rounded byte size -> free blocks
};

CpuBackend::CpuBackend(int threads)
    : m_threads(threads > 0 ? threads : std::min(omp_get_max_threads(), hardware_threads())),
      m_engine(dnnl::engine::kind::cpu, 0),
      m_pool(std::make_shared<MemoryPool>()) {
  if (threads < 0) throw Error("cpu backend: thread count must be >= 0, got " + std::to_string(threads));
  // oneDNN's CPU runtime is OpenMP here, so this one call sizes both our loops and its kernels.
  // Always set: OpenMP's own default counts every visible core, even under a cgroup quota.
  omp_set_num_threads(m_threads);
}

void CpuBackend::bind_calling_thread(int threads) {
  // OpenMP's nthreads-var is per thread: this sizes the teams this thread's kernels start.
  omp_set_num_threads(std::max(1, threads));
}

namespace {
class CpuEvent final : public Event {};
}  // namespace

DeviceInfo CpuBackend::device() const {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = cpu_model_name() + " (" + std::to_string(m_threads) + " threads)";
  return d;
}

std::unique_ptr<Stream> CpuBackend::create_stream() { return std::make_unique<CpuStream>(m_engine); }

std::unique_ptr<Event> CpuBackend::create_event() { return std::make_unique<CpuEvent>(); }

void CpuBackend::synchronize(Stream& s) { dnnl_stream(s).wait(); }

Buffer CpuBackend::allocate(size_t count, DType dtype) {
  // aligned_alloc wants a multiple of the alignment; an empty buffer still gets a real block
  // so that data() is never null for a valid Buffer.
  size_t bytes = count * dtype_size(dtype);
  bytes = (bytes + MemoryPool::kAlignment - 1) / MemoryPool::kAlignment * MemoryPool::kAlignment;
  if (bytes == 0) bytes = MemoryPool::kAlignment;
  std::shared_ptr<MemoryPool> pool = m_pool;
  void* p = pool->take(bytes);
  std::shared_ptr<void> owner(p, [pool, bytes](void* q) { pool->give(q, bytes); });
  return Buffer(p, count, dtype, std::move(owner));
}

namespace {

// A copy of a batch (megabytes: a climate batch is 7 MB) by the whole team, each thread a
// contiguous share, rather than by one thread while the others wait for the next primitive.
void copy_large(void* dst, const void* src, size_t bytes) {
  constexpr size_t k_min = size_t{1} << 20;
  if (bytes < k_min) {
    std::memcpy(dst, src, bytes);
    return;
  }
#pragma omp parallel
  {
    const auto threads = static_cast<size_t>(omp_get_num_threads()), t = static_cast<size_t>(omp_get_thread_num());
    const size_t share = (bytes / threads + 63) / 64 * 64;  // whole cache lines
    const size_t begin = std::min(bytes, t * share), end = std::min(bytes, begin + share);
    if (end > begin) std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  }
}

}  // namespace

void CpuBackend::copy_bytes_from_host(Stream&, void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) copy_large(dst, src, bytes);
}

void CpuBackend::copy_bytes_to_host(Stream&, void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) copy_large(dst, src, bytes);
}

void CpuBackend::copy_bytes(Stream&, void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

}  // namespace squall::cpu

namespace squall::nn {

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<squall::cpu::CpuBackend>(threads);
}

}  // namespace squall::nn
