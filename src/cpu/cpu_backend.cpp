// CpuBackend: construction, streams, memory and copies. Memory is host memory, 64-byte
// aligned (one cache line, the widest AVX-512 load), recycled through a size-keyed pool so
// that a plan rebuilt for the same shapes does not go back to the system allocator.
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

  static constexpr size_t kAlignment = 64;

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

std::unique_ptr<Stream> CpuBackend::create_stream() { return std::make_unique<CpuStream>(m_engine); }

void CpuBackend::synchronize(Stream& s) { dnnl_stream(s).wait(); }

Buffer CpuBackend::allocate(size_t count) {
  // aligned_alloc wants a multiple of the alignment; an empty buffer still gets a real block
  // so that data() is never null for a valid Buffer.
  size_t bytes = count * sizeof(float);
  bytes = (bytes + MemoryPool::kAlignment - 1) / MemoryPool::kAlignment * MemoryPool::kAlignment;
  if (bytes == 0) bytes = MemoryPool::kAlignment;
  std::shared_ptr<MemoryPool> pool = m_pool;
  void* p = pool->take(bytes);
  std::shared_ptr<void> owner(p, [pool, bytes](void* q) { pool->give(q, bytes); });
  return Buffer(static_cast<float*>(p), count, std::move(owner));
}

void CpuBackend::copy_from_host(Stream&, float* dst, const float* src, size_t count) {
  if (count) std::memcpy(dst, src, count * sizeof(float));
}

void CpuBackend::copy_to_host(Stream&, float* dst, const float* src, size_t count) {
  if (count) std::memcpy(dst, src, count * sizeof(float));
}

void CpuBackend::copy(Stream&, float* dst, const float* src, size_t count) {
  if (count && dst != src) std::memmove(dst, src, count * sizeof(float));
}

int32_t* CpuBackend::allocate_labels(size_t count, Buffer& owner) {
  static_assert(sizeof(int32_t) == sizeof(float), "labels share float-sized storage");
  owner = allocate(count);
  return reinterpret_cast<int32_t*>(owner.data());
}

void CpuBackend::copy_labels_from_host(Stream&, int32_t* dst, const int32_t* src, size_t count) {
  if (count) std::memcpy(dst, src, count * sizeof(int32_t));
}

void CpuBackend::copy_labels_to_host(Stream&, int32_t* dst, const int32_t* src, size_t count) {
  if (count) std::memcpy(dst, src, count * sizeof(int32_t));
}

}  // namespace squall::cpu

namespace squall::nn {

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<squall::cpu::CpuBackend>(threads);
}

}  // namespace squall::nn
