#pragma once
// The host grid emulator: HostLaunch runs the generic kernels of cuda/grid.cuh on the host,
// one thread at a time, calling the very same body functors the device runs (their members
// are __host__ __device__). It needs no GPU, no driver and no CUDA runtime call: the
// cuda-host tests (tests/cuda_host) use it to check the kernels against the CPU backend on
// any machine.
//
// What it reproduces exactly, because results depend on it:
//  - the launch shape: the callers pass the grid and block the device launch would get
//    (the ops headers' *_on sequences are shared by DeviceLaunch and HostLaunch);
//  - each thread's accumulation order: a thread's grid-stride (or block-stride) items are
//    visited in the order that thread visits them on the device;
//  - block_sum (kernel_util.cuh): per warp, the __shfl_down_sync tree for offsets 16, 8, 4,
//    2, 1 (a lane whose source is past the warp adds its own value, as the hardware
//    returns it), then thread 0 adding the warps' sums in warp order from 0.0;
//  - the warp-row float sums (warp_rows) with the same shuffle-down tree in float.
// Threads of one launch never depend on each other's writes except through the reductions,
// so running blocks and threads one after another gives the device's results. Host math
// (expf, logf) is glibc's, not the device's: see the tests for where that matters.
#include <cstring>
#include <vector>

#include "cuda/grid.cuh"

namespace squall::cuda::kernels::detail {

// One warp's shuffle-down tree over 32 lane values; returns lane 0's result.
template <class V>
V host_warp_tree(V (&lane)[32]) {
  for (int off = 16; off > 0; off >>= 1) {
    V before[32];
    for (int l = 0; l < 32; ++l) before[l] = lane[l];
    for (int l = 0; l < 32; ++l) lane[l] = before[l] + (l + off < 32 ? before[l + off] : before[l]);
  }
  return lane[0];
}

// block_sum over one value per thread (threads a multiple of 32, as kThreads is).
inline double host_block_sum(const std::vector<double>& per_thread) {
  const size_t warps = (per_thread.size() + 31) / 32;
  std::vector<double> shared(warps);
  for (size_t w = 0; w < warps; ++w) {
    double lane[32];
    for (size_t l = 0; l < 32; ++l) {
      const size_t t = w * 32 + l;
      lane[l] = t < per_thread.size() ? per_thread[t] : 0.0;
    }
    shared[w] = host_warp_tree(lane);
  }
  double total = 0.0;
  for (size_t w = 0; w < warps; ++w) total += shared[w];
  return total;
}

struct HostLaunch {
  template <class F, class I>
  void for_each(unsigned grid, unsigned block, const F& f, I n) const {
    const I stride = static_cast<I>(grid) * static_cast<I>(block);
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned t = 0; t < block; ++t)
        for (I i = static_cast<I>(b) * static_cast<I>(block) + static_cast<I>(t); i < n; i += stride) f(i);
  }

  template <class F>
  void for_units(unsigned grid, unsigned block, const F& f, int64_t units) const {
    for (unsigned b = 0; b < grid; ++b)
      for (int64_t u = b; u < units; u += grid)
        for (unsigned t = 0; t < block; ++t) f(u, t, block);
  }

  template <class F>
  void reduce(unsigned grid, unsigned block, const F& f, int64_t units) const {
    std::vector<Partial<F::kSums>> parts(block);
    std::vector<double> column(block);
    for (unsigned b = 0; b < grid; ++b)
      for (int64_t u = b; u < units; u += grid) {
        for (unsigned t = 0; t < block; ++t) parts[t] = f.part(u, Place{b, t, grid, block});
        Partial<F::kSums> total;
        for (int k = 0; k < F::kSums; ++k) {
          for (unsigned t = 0; t < block; ++t) column[t] = parts[t].sum[k];
          total.sum[k] = host_block_sum(column);
        }
        total.flag = 0;
        if constexpr (UsesFlag<F>::value)
          for (unsigned t = 0; t < block; ++t) total.flag = total.flag || parts[t].flag;
        f.finish(u, total);
      }
  }

  template <class F>
  void warp_rows(unsigned grid, unsigned block, const F& f, int64_t rows) const {
    const int64_t warps = static_cast<int64_t>(static_cast<size_t>(grid) * block / 32);
    for (int64_t first = 0; first < warps; ++first)
      for (int64_t row = first; row < rows; row += warps) {
        float lane[32];
        for (int l = 0; l < 32; ++l) lane[l] = f.lane(row, l);
        f.finish(row, host_warp_tree(lane));
      }
  }

  void zero(void* p, size_t bytes) const { std::memset(p, 0, bytes); }
  void copy(void* dst, const void* src, size_t bytes) const { std::memmove(dst, src, bytes); }
};

}  // namespace squall::cuda::kernels::detail
