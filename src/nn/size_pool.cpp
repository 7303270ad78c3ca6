// The size-keyed pool both backends allocate through (size_pool.hpp).
#include "src/nn/size_pool.hpp"

#include <utility>

namespace squall::nn {

void* SizePool::take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    auto it = m_free.find(bytes);
    if (it != m_free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
  }
  if (void* p = m_source.make(bytes)) return p;
  release_cached();  // give the cached blocks back and try once more
  return m_source.make(bytes);
}

void SizePool::give(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_free[bytes].push_back(p);
}

void SizePool::release_cached() {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    blocks.swap(m_free);
  }
  for (auto& [bytes, list] : blocks)
    for (void* p : list) m_source.free(p);
}

Buffer pooled_buffer(const std::shared_ptr<SizePool>& pool, size_t count, DType dtype,
                     const std::function<void(size_t bytes)>& no_memory) {
  const size_t bytes = pool->rounded(count * dtype_size(dtype));
  void* p = pool->take(bytes);
  if (p == nullptr) {
    no_memory(bytes);
    throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");  // no_memory should have thrown
  }
  std::shared_ptr<void> owner(p, [pool, bytes](void* q) { pool->give(q, bytes); });
  return Buffer(p, count, dtype, std::move(owner));
}

}  // namespace squall::nn
