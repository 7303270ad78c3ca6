// Element-wise and data-movement kernels: grid-stride loops, 64-bit indices. Arithmetic is
// written in the CPU reference's order (src/cpu/cpu_elementwise.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda/check.cuh"
#include "cuda/kernel_util.cuh"
#include "cuda/kernels.cuh"
#include "src/core/error.hpp"

namespace squall::cuda::kernels {

using detail::global_index;
using detail::global_stride;
using detail::grid_for;
using detail::kThreads;

namespace {

__global__ void fill_kernel(float* x, size_t n, float value) {
  for (size_t i = global_index(); i < n; i += global_stride()) x[i] = value;
}

__global__ void relu_forward_kernel(const float* x, float* y, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void relu_backward_kernel(const float* y, const float* dy,
                                     float* dx, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// y may alias a or b (y = a + y): no.
__global__ void add_kernel(const float* a, const float* b, float* y, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) y[i] = a[i] + b[i];
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) y[i] += alpha * x[i];
}

__global__ void scale_kernel(float alpha, float* x, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) x[i] *= alpha;
}

__global__ void axpby_kernel(float alpha, const float* x, float beta, float* y, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) y[i] = alpha * x[i] + beta * y[i];
}

__global__ void multiply_kernel(const float* a, const float* b, float* y, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) y[i] = a[i] * b[i];
}

// u_i = top 24 bits of mix64(mix64(seed) + offset + i) / 2^24 (exact in float), kept when
// u_i >= p: bit for bit the CPU backend's mask.
__global__ void dropout_kernel(const float* x, float* y, float* mask, size_t n, float p,
                               float keep_scale, uint64_t base) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float u =
        static_cast<float>(detail::mix64(base + static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
    const float k = u >= p ? keep_scale : 0.0f;
    mask[i] = k;
    y[i] = x[i] * k;
  }
}

__global__ void copy_strided_kernel(float* dst, int64_t dst_stride, int64_t dst_offset,
                                    const float* src, int64_t src_stride, int64_t src_offset,
                                    int64_t rows, int64_t count) {
  const size_t total = static_cast<size_t>(rows) * static_cast<size_t>(count);
  for (size_t k = global_index(); k < total; k += global_stride()) {
    const int64_t i = static_cast<int64_t>(k / static_cast<size_t>(count));
    const int64_t j = static_cast<int64_t>(k % static_cast<size_t>(count));
    dst[i * dst_stride + dst_offset + j] = src[i * src_stride + src_offset + j];
  }
}

// ---- convert: every pair of f32, bf16, f16 through float (f16 and bf16 widen exactly, so
// each conversion rounds once, to nearest even) ----

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

template <class From, class To>
__global__ void convert_kernel(const From* src, To* dst, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) dst[i] = from_float<To>(to_float(src[i]));
}

template <class From, class To>
void launch_convert(cudaStream_t s, const void* src, void* dst, size_t n) {
  convert_kernel<From, To><<<grid_for(n), kThreads, 0, s>>>(static_cast<const From*>(src), static_cast<To*>(dst), n);
}

template <class From>
void convert_from(cudaStream_t s, const void* src, void* dst, int to, size_t n) {
  switch (to) {
    case 0: launch_convert<From, float>(s, src, dst, n); break;
    case 1: launch_convert<From, __nv_bfloat16>(s, src, dst, n); break;
    case 2: launch_convert<From, __half>(s, src, dst, n); break;
    default: break;  // checked by the caller
  }
}

}  // namespace

void fill(cudaStream_t s, float* x, size_t n, float value) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, s>>>(x, n, value);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void relu_forward(cudaStream_t s, const float* x, float* y, size_t n) {
  if (n == 0) return;
  relu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void relu_backward(cudaStream_t s, const float* y, const float* dy, float* dx, size_t n) {
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(y, dy, dx, n);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void add(cudaStream_t s, const float* a, const float* b, float* y, size_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, s>>>(a, b, y, n);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void axpy(cudaStream_t s, float alpha, const float* x, float* y, size_t n) {
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreads, 0, s>>>(alpha, x, y, n);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void scale(cudaStream_t s, float alpha, float* x, size_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, s>>>(alpha, x, n);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void axpby(cudaStream_t s, float alpha, const float* x, float beta, float* y, size_t n) {
  if (n == 0) return;
  axpby_kernel<<<grid_for(n), kThreads, 0, s>>>(alpha, x, beta, y, n);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void multiply(cudaStream_t s, const float* a, const float* b, float* y, size_t n) {
  if (n == 0) return;
  multiply_kernel<<<grid_for(n), kThreads, 0, s>>>(a, b, y, n);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void dropout_forward(cudaStream_t s, const float* x, float* y, float* mask, size_t n, float p, uint64_t seed,
                     uint64_t offset) {
  if (!(p >= 0.0f && p <= 1.0f)) throw Error("dropout: probability must be in [0, 1], got " + std::to_string(p));
  if (n == 0) return;
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;  // on the host, as the CPU does
  dropout_kernel<<<grid_for(n), kThreads, 0, s>>>(x, y, mask, n, p, keep_scale, detail::mix64(seed) + offset);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void copy_strided(cudaStream_t s, float* dst, int64_t dst_stride, int64_t dst_offset, const float* src,
                  int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  if (rows <= 0 || count <= 0) return;
  const size_t total = static_cast<size_t>(rows) * static_cast<size_t>(count);
  copy_strided_kernel<<<grid_for(total), kThreads, 0, s>>>(dst, dst_stride, dst_offset, src, src_stride,
                                                           src_offset, rows, count);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void convert(cudaStream_t s, const void* src, int from, void* dst, int to, size_t n) {
  if (from < 0 || from > 2 || to < 0 || to > 2)
    throw Error("convert: only f32, bf16 and f16 convert (dtype codes 0-2), got " + std::to_string(from) +
                " -> " + std::to_string(to));
  if (n == 0) return;
  if (from == to) {
    if (src != dst) {
      const size_t bytes = n * (from == 0 ? sizeof(float) : sizeof(uint16_t));
      SQUALL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    }
    return;
  }
  switch (from) {
    case 0: convert_from<float>(s, src, dst, to, n); break;
    case 1: convert_from<__nv_bfloat16>(s, src, dst, to, n); break;
    default: convert_from<__half>(s, src, dst, to, n); break;
  }
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace squall::cuda::kernels
