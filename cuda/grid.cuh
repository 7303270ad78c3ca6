#pragma once
// The four launch patterns every custom kernel is one of, as generic __global__ kernels over
// a body functor whose members are __host__ __device__. The bodies (cuda/*_ops.cuh) hold all
// of a kernel's arithmetic and indexing; these kernels only walk the grid. The host grid
// emulator (cuda/host_grid.cuh) walks the same grid, in the same order where the order
// decides a result, so a machine without a GPU runs the device's code and gets its bits
// (up to the math library: expf and logf there are the host's).
//
// Launch shapes are arguments (grid, block), computed by the callers from kernel_util.cuh's
// grid_for and reduce_blocks. A launcher (DeviceLaunch in device_launch.cuh, HostLaunch in
// host_grid.cuh) is what the shared launch sequences (the ops headers' *_on functions) call:
//   for_each(grid, block, f, n)      f(i) for i < n, grid-stride (element-wise kernels); i is
//                                    of n's type (uint32_t where the caller's count allows)
//   for_units(grid, block, f, units) f(u, thread, threads) for every unit a block takes, the
//                                    units block-stride over the grid (chunk kernels)
//   reduce(grid, block, f, units)    per unit: every thread's f.part(u, place), each of the
//                                    kSums sums added with block_sum, the flags or-ed, then
//                                    f.finish(u, totals) on thread 0 (two-pass reductions)
//   warp_rows(grid, block, f, rows)  per row one warp: lane sums f.lane(row, lane) (float)
//                                    added by the shuffle-down tree, f.finish(row, sum)
//   zero(p, bytes), copy(dst, src, bytes)  stream-ordered memset and device copy
#include <type_traits>

#include "cuda/kernel_util.cuh"

namespace squall::cuda::kernels::detail {

// Where a thread is in its launch: what blockIdx, threadIdx, gridDim and blockDim say on
// the device, and what the emulator's loops say on the host.
struct Place {
  unsigned block, thread, blocks, threads;
  __host__ __device__ size_t stride() const { return static_cast<size_t>(blocks) * threads; }
};

// One thread's contribution to a block reduction: K sums in double and a flag (or-ed over
// the block, as __syncthreads_or does, for the bodies that declare kUsesFlag = true; the
// others leave it 0 and pay for no extra barrier).
template <int K>
struct Partial {
  double sum[K];
  int flag;
};

template <class F, class = void>
struct UsesFlag : std::false_type {};
template <class F>
struct UsesFlag<F, std::void_t<decltype(F::kUsesFlag)>> : std::bool_constant<F::kUsesFlag> {};

// An atomic integer add (the device) or a plain one (the emulator runs one thread at a time).
__host__ __device__ __forceinline__ void add_int(int32_t* p, int32_t v) {
#ifdef __CUDA_ARCH__
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

template <class F, class I>
__global__ void for_each_kernel(F f, I n) {
  const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < n; i += stride)
    f(i);
}

template <class F>
__global__ void for_units_kernel(F f, int64_t units) {
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) f(u, threadIdx.x, blockDim.x);
}

// The loop bound is the same for every thread of a block, so each block_sum and
// __syncthreads_or is reached by all of them.
template <class F>
__global__ void reduce_kernel(F f, int64_t units) {
  __shared__ double shared[kThreads / 32];
  const Place place{blockIdx.x, threadIdx.x, gridDim.x, blockDim.x};
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const Partial<F::kSums> mine = f.part(u, place);
    Partial<F::kSums> total;
    for (int k = 0; k < F::kSums; ++k) total.sum[k] = block_sum(mine.sum[k], shared);
    if constexpr (UsesFlag<F>::value) total.flag = __syncthreads_or(mine.flag);
    else total.flag = 0;
    if (threadIdx.x == 0) f.finish(u, total);
  }
}

template <class F>
__global__ void warp_rows_kernel(F f, int64_t rows) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(global_index() >> 5);
  const int64_t warps = static_cast<int64_t>(global_stride() >> 5);
  for (int64_t row = warp; row < rows; row += warps) {
    float sum = f.lane(row, lane);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) f.finish(row, sum);
  }
}

}  // namespace squall::cuda::kernels::detail
