#pragma once
// Helpers shared by the kernel files (cuda/*.cu, cuda/*_ops.cuh) and nothing else: launch
// shapes, the deterministic block reduction, doubles kept in float scratch, the dropout
// mixer, and the element types of activations (f32, bf16, f16) with the dispatch from a
// dtype code. What a kernel body calls is __host__ __device__, so that the host grid
// emulator (cuda/host_grid.cuh) runs the very same bodies on a machine without a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/core/error.hpp"

namespace squall::cuda::kernels::detail {

// Threads per block for every kernel here (the reductions rely on it: a multiple of 32,
// at most 1024).
constexpr int kThreads = 256;
// Most blocks an element-wise grid-stride launch uses; past that each thread loops.
constexpr size_t kMaxBlocks = 32768;

inline unsigned grid_for(size_t n, size_t cap = kMaxBlocks) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min(blocks, cap)));
}

// First index and stride of a 1-D grid-stride loop, in 64 bits.
__device__ __forceinline__ size_t global_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t global_stride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

// Sum of one double per thread over the block, in a fixed order (shuffles within a warp,
// then the warps' sums in warp order): the same input gives the same bits every run.
// Every thread of the block must call it; the result is valid in thread 0.
// `shared` holds at least blockDim.x / 32 doubles and may be reused after the call.
__device__ __forceinline__ double block_sum(double x, double* shared) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    for (int i = 0; i < warps; ++i) total += shared[i];
  }
  return total;
}

// A double stored in two floats of scratch (hi = the double rounded to float, lo = the
// rest): about 48 significant bits, and no alignment asked of the caller's float pointer.
// (fabsf(hi) <= FLT_MAX is isfinite(hi), written with a function both sides have.)
__host__ __device__ __forceinline__ void store_double(float* p, double d) {
  const float hi = static_cast<float>(d);
  p[0] = hi;
  p[1] = fabsf(hi) <= 3.40282347e+38f ? static_cast<float>(d - static_cast<double>(hi)) : 0.0f;
}
__host__ __device__ __forceinline__ double load_double(const float* p) {
  return static_cast<double>(p[0]) + static_cast<double>(p[1]);
}

// Blocks of a two-pass reduction over n items: depends on n only, so the summation order
// (and the result's bits) does not depend on the device.
constexpr size_t kReduceItemsPerThread = 8;
constexpr size_t kMaxReduceBlocks = 1024;
inline unsigned reduce_blocks(size_t n) {
  return grid_for((n + kReduceItemsPerThread - 1) / kReduceItemsPerThread, kMaxReduceBlocks);
}

// splitmix64's finaliser, as src/cpu/cpu_elementwise.cpp.
__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// ---- activation element types ----
// Kernels on activations are templates over the element type T (float, __nv_bfloat16,
// __half). They load with to_float, compute in f32 and store with from_float<T> (round to
// nearest even): per element, the f32 result rounded once, which is what the CPU reference
// computes for bf16/f16 (src/cpu/cpu_precision.cpp).
// (cuda_bf16.h and cuda_fp16.h give these conversions on the host too, rounding the same.)
__host__ __device__ __forceinline__ float to_float(float v) { return v; }
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__host__ __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <class T>
__host__ __device__ __forceinline__ T from_float(float v);
template <>
__host__ __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__host__ __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__host__ __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// One float multiply or add rounded on its own: the device's _rn intrinsics (never fused,
// whatever --fmad says), plain arithmetic on the host (the host emulator's build,
// tests/cuda_host/kernels.cmake, passes -ffp-contract=off so that no compiler fuses them).
__host__ __device__ __forceinline__ float fmul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ __forceinline__ float fadd_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ __forceinline__ float fsub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// Calls f(T{}) with the element type of dtype code `dtype` (0 f32, 1 bf16, 2 f16: nn::DType's
// order); any other code is an error naming `op`.
template <class F>
void dispatch_float(int dtype, const char* op, F&& f) {
  switch (dtype) {
    case 0: f(float{}); return;
    case 1: f(__nv_bfloat16{}); return;
    case 2: f(__half{}); return;
    default:
      throw Error(std::string(op) + ": activations must be f32, bf16 or f16 (dtype code " + std::to_string(dtype) +
                  ")");
  }
}

}  // namespace squall::cuda::kernels::detail
