#pragma once
// Element-wise and data-movement kernels (the bodies, and their launch sequences over any
// launcher: cuda/grid.cuh). cuda/elementwise.cu runs them on a stream; the cuda-host tests
// run them through the host grid emulator. Arithmetic is written in the CPU reference's
// order (src/cpu/cpu_elementwise.cpp); 64-bit indices throughout.
#include <cstdint>
#include <string>

#include "cuda/grid.cuh"
#include "src/core/error.hpp"

namespace squall::cuda::kernels::detail {

struct FillOp {
  float* x;
  float value;
  __host__ __device__ void operator()(size_t i) const { x[i] = value; }
};

template <class T>
struct ReluForwardOp {
  const T* x;
  T* y;
  __host__ __device__ void operator()(size_t i) const {
    const float v = to_float(x[i]);
    y[i] = from_float<T>(v > 0.0f ? v : 0.0f);
  }
};

template <class T>
struct ReluBackwardOp {
  const T *y, *dy;
  T* dx;
  __host__ __device__ void operator()(size_t i) const {
    dx[i] = from_float<T>(to_float(y[i]) > 0.0f ? to_float(dy[i]) : 0.0f);
  }
};

// y may alias a or b (element i is read before it is written).
template <class T>
struct AddOp {
  const T *a, *b;
  T* y;
  __host__ __device__ void operator()(size_t i) const { y[i] = from_float<T>(to_float(a[i]) + to_float(b[i])); }
};

template <class T>
struct MultiplyOp {
  const T *a, *b;
  T* y;
  __host__ __device__ void operator()(size_t i) const { y[i] = from_float<T>(to_float(a[i]) * to_float(b[i])); }
};

struct AxpyOp {
  float alpha;
  const float* x;
  float* y;
  __host__ __device__ void operator()(size_t i) const { y[i] += alpha * x[i]; }
};

struct ScaleOp {
  float alpha;
  float* x;
  __host__ __device__ void operator()(size_t i) const { x[i] *= alpha; }
};

struct AxpbyOp {
  float alpha;
  const float* x;
  float beta;
  float* y;
  __host__ __device__ void operator()(size_t i) const { y[i] = alpha * x[i] + beta * y[i]; }
};

// u_i = top 24 bits of mix64(mix64(seed) + offset + i) / 2^24 (exact in float), kept when
// u_i >= p: bit for bit the CPU backend's mask (rounded to T, as the CPU rounds it).
template <class T>
struct DropoutOp {
  const T* x;
  T *y, *mask;
  float p, keep_scale;
  uint64_t base;  // mix64(seed) + offset
  __host__ __device__ void operator()(size_t i) const {
    const float u = static_cast<float>(mix64(base + static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
    const float k = u >= p ? keep_scale : 0.0f;
    mask[i] = from_float<T>(k);
    y[i] = from_float<T>(to_float(x[i]) * k);
  }
};

// E: an unsigned integer of the element's size (the copy moves bits).
template <class E>
struct CopyStridedOp {
  E* dst;
  int64_t dst_stride, dst_offset;
  const E* src;
  int64_t src_stride, src_offset, count;
  __host__ __device__ void operator()(size_t k) const {
    const int64_t i = static_cast<int64_t>(k / static_cast<size_t>(count));
    const int64_t j = static_cast<int64_t>(k % static_cast<size_t>(count));
    dst[i * dst_stride + dst_offset + j] = src[i * src_stride + src_offset + j];
  }
};

// Every pair of f32, bf16, f16 through float (f16 and bf16 widen exactly, so each
// conversion rounds once, to nearest even).
template <class From, class To>
struct ConvertOp {
  const From* src;
  To* dst;
  __host__ __device__ void operator()(size_t i) const { dst[i] = from_float<To>(to_float(src[i])); }
};

// One thread per destination element; it reads the source element it comes from: the
// destination index k is (i, p, ch) of [n, hw, c] or (i, ch, p) of [n, c, hw].
__host__ __device__ __forceinline__ int64_t permuted_source(int64_t k, int64_t c, int64_t hw, bool from_nhwc,
                                                            bool to_nhwc) {
  const int64_t ch = to_nhwc ? k % c : (k / hw) % c;
  const int64_t p = to_nhwc ? (k / c) % hw : k % hw;
  const int64_t i = k / (c * hw);
  return from_nhwc ? (i * hw + p) * c + ch : (i * c + ch) * hw + p;
}

// Converting: From and To are float types (dtype codes 0-2).
template <class From, class To>
struct PermuteConvertOp {
  const From* src;
  bool from_nhwc;
  To* dst;
  bool to_nhwc;
  int64_t c, hw;
  __host__ __device__ void operator()(size_t k) const {
    dst[k] = from_float<To>(to_float(src[permuted_source(static_cast<int64_t>(k), c, hw, from_nhwc, to_nhwc)]));
  }
};

// Moving bits: E is an unsigned integer of the element's size (any type, i32 included).
template <class E>
struct PermuteBitsOp {
  const E* src;
  bool from_nhwc;
  E* dst;
  bool to_nhwc;
  int64_t c, hw;
  __host__ __device__ void operator()(size_t k) const {
    dst[k] = src[permuted_source(static_cast<int64_t>(k), c, hw, from_nhwc, to_nhwc)];
  }
};

// ---- launch sequences (L: DeviceLaunch or HostLaunch) ----

template <class L, class F>
void each(const L& l, const F& f, size_t n) {
  if (n > 0) l.for_each(grid_for(n), kThreads, f, n);
}

template <class L>
void fill_on(const L& l, float* x, size_t n, float value) {
  each(l, FillOp{x, value}, n);
}

template <class L>
void relu_forward_on(const L& l, int t, const void* x, void* y, size_t n) {
  dispatch_float(t, "relu", [&](auto tag) {
    using T = decltype(tag);
    each(l, ReluForwardOp<T>{static_cast<const T*>(x), static_cast<T*>(y)}, n);
  });
}

template <class L>
void relu_backward_on(const L& l, int t, const void* y, const void* dy, void* dx, size_t n) {
  dispatch_float(t, "relu", [&](auto tag) {
    using T = decltype(tag);
    each(l, ReluBackwardOp<T>{static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx)}, n);
  });
}

template <class L>
void add_on(const L& l, int t, const void* a, const void* b, void* y, size_t n) {
  dispatch_float(t, "add", [&](auto tag) {
    using T = decltype(tag);
    each(l, AddOp<T>{static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y)}, n);
  });
}

template <class L>
void multiply_on(const L& l, int t, const void* a, const void* b, void* y, size_t n) {
  dispatch_float(t, "multiply", [&](auto tag) {
    using T = decltype(tag);
    each(l, MultiplyOp<T>{static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y)}, n);
  });
}

template <class L>
void dropout_on(const L& l, int t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed,
                uint64_t offset) {
  if (!(p >= 0.0f && p <= 1.0f)) throw Error("dropout: probability must be in [0, 1], got " + std::to_string(p));
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;  // on the host, as the CPU does
  dispatch_float(t, "dropout", [&](auto tag) {
    using T = decltype(tag);
    each(l,
         DropoutOp<T>{static_cast<const T*>(x), static_cast<T*>(y), static_cast<T*>(mask), p, keep_scale,
                      mix64(seed) + offset},
         n);
  });
}

template <class L>
void copy_strided_on(const L& l, size_t elem_bytes, void* dst, int64_t dst_stride, int64_t dst_offset,
                     const void* src, int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  if (rows <= 0 || count <= 0) return;
  const size_t total = static_cast<size_t>(rows) * static_cast<size_t>(count);
  if (elem_bytes == 4)
    each(l,
         CopyStridedOp<uint32_t>{static_cast<uint32_t*>(dst), dst_stride, dst_offset,
                                 static_cast<const uint32_t*>(src), src_stride, src_offset, count},
         total);
  else if (elem_bytes == 2)
    each(l,
         CopyStridedOp<uint16_t>{static_cast<uint16_t*>(dst), dst_stride, dst_offset,
                                 static_cast<const uint16_t*>(src), src_stride, src_offset, count},
         total);
  else
    throw Error("copy_strided: elements of " + std::to_string(elem_bytes) + " bytes are not supported (2 or 4)");
}

template <class L>
void convert_on(const L& l, const void* src, int from, void* dst, int to, size_t n) {
  if (from < 0 || from > 2 || to < 0 || to > 2)
    throw Error("convert: only f32, bf16 and f16 convert (dtype codes 0-2), got " + std::to_string(from) +
                " -> " + std::to_string(to));
  if (n == 0) return;
  if (from == to) {
    if (src != dst) l.copy(dst, src, n * (from == 0 ? sizeof(float) : sizeof(uint16_t)));
    return;
  }
  dispatch_float(from, "convert", [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch_float(to, "convert", [&](auto to_tag) {
      using To = decltype(to_tag);
      each(l, ConvertOp<From, To>{static_cast<const From*>(src), static_cast<To*>(dst)}, n);
    });
  });
}

template <class L>
void permute_convert_on(const L& l, const void* src, int from, bool from_nhwc, void* dst, int to, bool to_nhwc,
                        int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  if (n <= 0 || c <= 0 || hw <= 0) return;
  const size_t total = static_cast<size_t>(n * c * hw);
  if (from_nhwc == to_nhwc) return convert_on(l, src, from, dst, to, total);
  dispatch_float(from, "permute", [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch_float(to, "permute", [&](auto to_tag) {
      using To = decltype(to_tag);
      const auto* x = static_cast<const From*>(src);
      each(l, PermuteConvertOp<From, To>{x, from_nhwc, static_cast<To*>(dst), to_nhwc, c, hw}, total);
    });
  });
}

template <class L>
void permute_bits_on(const L& l, size_t elem_bytes, const void* src, bool from_nhwc, void* dst, bool to_nhwc,
                     int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  if (n <= 0 || c <= 0 || hw <= 0) return;
  const size_t total = static_cast<size_t>(n * c * hw);
  if (from_nhwc == to_nhwc) {
    if (src != dst) l.copy(dst, src, total * elem_bytes);
    return;
  }
  if (elem_bytes == 4)
    each(l, PermuteBitsOp<uint32_t>{static_cast<const uint32_t*>(src), from_nhwc, static_cast<uint32_t*>(dst), to_nhwc,
                                    c, hw},
         total);
  else if (elem_bytes == 2)
    each(l, PermuteBitsOp<uint16_t>{static_cast<const uint16_t*>(src), from_nhwc, static_cast<uint16_t*>(dst), to_nhwc,
                                    c, hw},
         total);
  else
    throw Error("permute: elements of " + std::to_string(elem_bytes) + " bytes are not supported (2 or 4)");
}

}  // namespace squall::cuda::kernels::detail
