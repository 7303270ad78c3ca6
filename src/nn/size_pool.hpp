#pragma once
// A size-keyed pool of memory blocks, the one both backends allocate through: a freed block is
// kept under its rounded size and handed out again for the same size, so that once a training
// step's sizes have been seen no system allocation runs (a plan rebuilt for the same shapes,
// a step's temporaries). What differs between the backends is given to it: how sizes round,
// how a block is made (aligned host memory; cudaMalloc or cudaMallocHost) and freed.
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "src/nn/device.hpp"

namespace squall::nn {

class SizePool {
 public:
  struct Source {
    std::function<size_t(size_t)> round;  // bytes asked -> bytes of the block (> 0)
    // A new block of that many bytes, or nullptr when there is no memory for it (the pool
    // then frees what it caches and asks once more).
    std::function<void*(size_t)> make;
    std::function<void(void*)> free;  // must not throw
  };
  explicit SizePool(Source source) : m_source(std::move(source)) {}
  SizePool(const SizePool&) = delete;
  SizePool& operator=(const SizePool&) = delete;
  ~SizePool() { release_cached(); }

  // A block of at least `bytes` (rounded), cached or new; nullptr when even after releasing
  // the cache there is no memory (the caller says so, naming its device).
  void* take(size_t bytes);
  void give(void* p, size_t bytes);
  // Frees every cached block.
  void release_cached();
  size_t rounded(size_t bytes) const { return m_source.round(bytes); }

 private:
  Source m_source;
  std::mutex m_mutex;
  std::unordered_map<size_t, std::vector<void*>> m_free;  // rounded byte size -> free blocks
};

// count elements of dtype from `pool`, returned to it when the Buffer's last copy goes;
// `no_memory` is called (and must throw) when the pool has none: its message names the device.
Buffer pooled_buffer(const std::shared_ptr<SizePool>& pool, size_t count, DType dtype,
                     const std::function<void(size_t bytes)>& no_memory);

}  // namespace squall::nn
