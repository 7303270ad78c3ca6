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
using detail::from_float;
using detail::kThreads;
using detail::to_float;

namespace {

__global__ void fill_kernel(float* x, size_t n, float value) {
  for (size_t i = global_index(); i < n; i += global_stride()) x[i] = value;
}

template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float v = to_float(x[i]);
    y[i] = from_float<T>(v > 0.0f ? v : 0.0f);
  }
}

template <class T>
__global__ void relu_backward_kernel(const T* y, const T* dy, T* dx, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride())
    dx[i] = from_float<T>(to_float(y[i]) > 0.0f ? to_float(dy[i]) : 0.0f);
}

// y may alias a or b (element i is read before it is written).
template <class T>
__global__ void add_kernel(const T* a, const T* b, T* y, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) y[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
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

template <class T>
__global__ void multiply_kernel(const T* a, const T* b, T* y, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) y[i] = from_float<T>(to_float(a[i]) * to_float(b[i]));
}

// u_i = top 24 bits of mix64(mix64(seed) + offset + i) / 2^24 (exact in float), kept when
// u_i >= p: bit for bit the CPU backend's mask (rounded to T, as the CPU rounds it).
template <class T>
__global__ void dropout_kernel(const T* x, T* y, T* mask, size_t n, float p, float keep_scale, uint64_t base) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float u =
        static_cast<float>(detail::mix64(base + static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
    const float k = u >= p ? keep_scale : 0.0f;
    mask[i] = from_float<T>(k);
    y[i] = from_float<T>(to_float(x[i]) * k);
  }
}

// E: an unsigned integer of the element's size (the copy moves bits).
template <class E>
__global__ void copy_strided_kernel(E* dst, int64_t dst_stride, int64_t dst_offset, const E* src,
                                    int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  const size_t total = static_cast<size_t>(rows) * static_cast<size_t>(count);
  for (size_t k = global_index(); k < total; k += global_stride()) {
    const int64_t i = static_cast<int64_t>(k / static_cast<size_t>(count));
    const int64_t j = static_cast<int64_t>(k % static_cast<size_t>(count));
    dst[i * dst_stride + dst_offset + j] = src[i * src_stride + src_offset + j];
  }
}

// ---- convert: every pair of f32, bf16, f16 through float (f16 and bf16 widen exactly, so
// each conversion rounds once, to nearest even) ----

template <class From, class To>
__global__ void convert_kernel(const From* src, To* dst, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) dst[i] = from_float<To>(to_float(src[i]));
}

template <class From, class To>
void launch_convert(cudaStream_t s, const void* src, void* dst, size_t n) {
  convert_kernel<From, To><<<grid_for(n), kThreads, 0, s>>>(static_cast<const From*>(src), static_cast<To*>(dst), n);
}

// One thread per destination element; it reads the source element it comes from: the
// destination index k is (i, p, ch) of [n, hw, c] or (i, ch, p) of [n, c, hw].
__device__ __forceinline__ int64_t permuted_source(int64_t k, int64_t c, int64_t hw, bool from_nhwc, bool to_nhwc) {
  const int64_t ch = to_nhwc ? k % c : (k / hw) % c;
  const int64_t p = to_nhwc ? (k / c) % hw : k % hw;
  const int64_t i = k / (c * hw);
  return from_nhwc ? (i * hw + p) * c + ch : (i * c + ch) * hw + p;
}

// Converting: From and To are float types (dtype codes 0-2).
template <class From, class To>
__global__ void permute_convert_kernel(const From* src, bool from_nhwc, To* dst, bool to_nhwc, size_t total,
                                       int64_t c, int64_t hw) {
  for (size_t k = global_index(); k < total; k += global_stride())
    dst[k] = from_float<To>(to_float(src[permuted_source(static_cast<int64_t>(k), c, hw, from_nhwc, to_nhwc)]));
}

// Moving bits: E is an unsigned integer of the element's size (any type, i32 included).
template <class E>
__global__ void permute_bits_kernel(const E* src, bool from_nhwc, E* dst, bool to_nhwc, size_t total, int64_t c,
                                    int64_t hw) {
  for (size_t k = global_index(); k < total; k += global_stride())
    dst[k] = src[permuted_source(static_cast<int64_t>(k), c, hw, from_nhwc, to_nhwc)];
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

void relu_forward(cudaStream_t s, int t, const void* x, void* y, size_t n) {
  detail::dispatch_float(t, "relu", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    relu_forward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void relu_backward(cudaStream_t s, int t, const void* y, const void* dy, void* dx, size_t n) {
  detail::dispatch_float(t, "relu", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    relu_backward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(y), static_cast<const T*>(dy),
                                                            static_cast<T*>(dx), n);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void add(cudaStream_t s, int t, const void* a, const void* b, void* y, size_t n) {
  detail::dispatch_float(t, "add", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    add_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                  static_cast<T*>(y), n);
  });
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

void multiply(cudaStream_t s, int t, const void* a, const void* b, void* y, size_t n) {
  detail::dispatch_float(t, "multiply", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    multiply_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                       static_cast<T*>(y), n);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void dropout_forward(cudaStream_t s, int t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed,
                     uint64_t offset) {
  if (!(p >= 0.0f && p <= 1.0f)) throw Error("dropout: probability must be in [0, 1], got " + std::to_string(p));
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;  // on the host, as the CPU does
  detail::dispatch_float(t, "dropout", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    dropout_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                      static_cast<T*>(mask), n, p, keep_scale,
                                                      detail::mix64(seed) + offset);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void copy_strided(cudaStream_t s, size_t elem_bytes, void* dst, int64_t dst_stride, int64_t dst_offset,
                  const void* src, int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  if (rows <= 0 || count <= 0) return;
  const size_t total = static_cast<size_t>(rows) * static_cast<size_t>(count);
  if (elem_bytes == 4)
    copy_strided_kernel<uint32_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<uint32_t*>(dst), dst_stride, dst_offset, static_cast<const uint32_t*>(src), src_stride,
        src_offset, rows, count);
  else if (elem_bytes == 2)
    copy_strided_kernel<uint16_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<uint16_t*>(dst), dst_stride, dst_offset, static_cast<const uint16_t*>(src), src_stride,
        src_offset, rows, count);
  else
    throw Error("copy_strided: elements of " + std::to_string(elem_bytes) + " bytes are not supported (2 or 4)");
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void permute_convert(cudaStream_t s, const void* src, int from, bool from_nhwc, void* dst, int to, bool to_nhwc,
                     int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  if (n <= 0 || c <= 0 || hw <= 0) return;
  const size_t total = static_cast<size_t>(n * c * hw);
  if (from_nhwc == to_nhwc) return convert(s, src, from, dst, to, total);
  detail::dispatch_float(from, "permute", [&](auto from_tag) {
    using From = decltype(from_tag);
    detail::dispatch_float(to, "permute", [&](auto to_tag) {
      using To = decltype(to_tag);
      permute_convert_kernel<From, To><<<grid_for(total), kThreads, 0, s>>>(
          static_cast<const From*>(src), from_nhwc, static_cast<To*>(dst), to_nhwc, total, c, hw);
    });
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void permute_bits(cudaStream_t s, size_t elem_bytes, const void* src, bool from_nhwc, void* dst, bool to_nhwc,
                  int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  if (n <= 0 || c <= 0 || hw <= 0) return;
  const size_t total = static_cast<size_t>(n * c * hw);
  if (from_nhwc == to_nhwc) {
    if (src != dst) SQUALL_CUDA_CHECK(cudaMemcpyAsync(dst, src, total * elem_bytes, cudaMemcpyDeviceToDevice, s));
    return;
  }
  if (elem_bytes == 4)
    permute_bits_kernel<uint32_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<const uint32_t*>(src), from_nhwc, static_cast<uint32_t*>(dst), to_nhwc, total, c, hw);
  else if (elem_bytes == 2)
    permute_bits_kernel<uint16_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<const uint16_t*>(src), from_nhwc, static_cast<uint16_t*>(dst), to_nhwc, total, c, hw);
  else
    throw Error("permute: elements of " + std::to_string(elem_bytes) + " bytes are not supported (2 or 4)");
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
