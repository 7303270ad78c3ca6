#pragma once
// Element-wise and data-movement kernels (the bodies, and their launch sequences over any
// launcher: cuda/grid.cuh). cuda/elementwise.cu runs them on a stream; the cuda-host tests
// run them through the host grid emulator. Arithmetic is written in the CPU reference's
// order (src/cpu/cpu_elementwise.cpp).
//
// Every body moves 16 bytes per access where its pointers allow and indexes in 32 bits below
// 2^31 elements (cuda/vectorised.cuh): a body's apply<N>(i) handles the N elements from i,
// N = 16 bytes' worth on the vector path and 1 for the tail and the unaligned case. The
// layout permutation moves square tiles of N x N elements, 16 bytes per access on both
// sides, where the channels and the pixels are multiples of N.
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/grid.cuh"
#include "cuda/vectorised.cuh"
#include "src/core/error.hpp"
#include "src/nn/kernels.hpp"

namespace squall::cuda::kernels::detail {

// One element to another type through float (f16 and bf16 widen exactly, so each conversion
// rounds once, to nearest even); a type to itself unchanged (the bit-moving bodies use
// unsigned integers of the element's size).
template <class To, class From>
__host__ __device__ __forceinline__ To convert_element(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else return from_float<To>(to_float(v));
}

// Elements of the wider of two types that a pair of 16-byte accesses of the narrower moves.
template <class A, class B>
constexpr int per_access_of_both() {
  return per_access<A>() > per_access<B>() ? per_access<A>() : per_access<B>();
}

struct FillOp {
  float* x;
  float value;
  template <int N, class I>
  __host__ __device__ void apply(I i) const {
    float v[N];
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = value;
    store_elems<N>(x + i, v);
  }
};

template <class T>
struct ReluForwardOp {
  const T* x;
  T* y;
  template <int N, class I>
  __host__ __device__ void apply(I i) const {
    T a[N], out[N];
    load_elems<N>(x + i, a);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float v = to_float(a[j]);
      out[j] = from_float<T>(v > 0.0f ? v : 0.0f);
    }
    store_elems<N>(y + i, out);
  }
};

// out = f(a, b) element by element, through float: the two-input bodies differ only in f.
// out may alias a or b (each element is read before it is written, by the same thread).
template <class T, class F>
struct ZipOp {
  const T *a, *b;
  T* out;
  template <int N, class I>
  __host__ __device__ void apply(I i) const {
    T u[N], v[N], r[N];
    load_elems<N>(a + i, u);
    load_elems<N>(b + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) r[j] = from_float<T>(F{}(to_float(u[j]), to_float(v[j])));
    store_elems<N>(out + i, r);
  }
};

struct ReluGradient {  // (y, dy): dy where the forward's output was positive
  __host__ __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};
struct Plus {
  __host__ __device__ float operator()(float u, float v) const { return u + v; }
};
struct Times {
  __host__ __device__ float operator()(float u, float v) const { return u * v; }
};

template <class T>
using ReluBackwardOp = ZipOp<T, ReluGradient>;  // {y, dy, dx}
template <class T>
using AddOp = ZipOp<T, Plus>;  // {a, b, y}
template <class T>
using MultiplyOp = ZipOp<T, Times>;  // {a, b, y}

struct ScaleOp {
  float alpha;
  float* x;
  template <int N, class I>
  __host__ __device__ void apply(I i) const {
    float v[N];
    load_elems<N>(x + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] *= alpha;
    store_elems<N>(x + i, v);
  }
};

struct AxpbyOp {
  float alpha;
  const float* x;
  float beta;
  float* y;
  template <int N, class I>
  __host__ __device__ void apply(I i) const {
    float u[N], v[N];
    load_elems<N>(x + i, u);
    load_elems<N>(y + i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = alpha * u[j] + beta * v[j];
    store_elems<N>(y + i, v);
  }
};

// u_i = top 24 bits of mix64(mix64(seed) + offset + i) / 2^24 (exact in float), kept when
// u_i >= p: bit for bit the CPU backend's mask (rounded to T, as the CPU rounds it).
template <class T>
struct DropoutOp {
  const T* x;
  T *y, *mask;
  float p, keep_scale;
  uint64_t base;  // mix64(seed) + offset
  template <int N, class I>
  __host__ __device__ void apply(I i) const {
    T a[N], out[N], m[N];
    load_elems<N>(x + i, a);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const uint64_t at = base + static_cast<uint64_t>(i) + static_cast<uint64_t>(j);
      const float u = static_cast<float>(mix64(at) >> 40) * (1.0f / 16777216.0f);
      const float k = u >= p ? keep_scale : 0.0f;
      m[j] = from_float<T>(k);
      out[j] = from_float<T>(to_float(a[j]) * k);
    }
    store_elems<N>(mask + i, m);
    store_elems<N>(y + i, out);
  }
};

// Every pair of f32, bf16, f16.
template <class From, class To>
struct ConvertOp {
  const From* src;
  To* dst;
  template <int N, class I>
  __host__ __device__ void apply(I i) const {
    From a[N];
    To out[N];
    load_elems<N>(src + i, a);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = convert_element<To>(a[j]);
    store_elems<N>(dst + i, out);
  }
};

// E: an unsigned integer of the element's size (the copy moves bits). Unit k of rows x
// (count / N): the N elements from column (k % (count / N)) * N of row k / (count / N); N > 1
// only where the count, strides and offsets are multiples of N and both pointers aligned.
template <class E, int N, class I>
struct CopyStridedOp {
  E* dst;
  I dst_stride, dst_offset;
  const E* src;
  I src_stride, src_offset, units_per_row;
  __host__ __device__ void operator()(I k) const {
    const I row = k / units_per_row;
    const I col = (k - row * units_per_row) * static_cast<I>(N);
    E v[N];
    load_elems<N>(src + row * src_stride + src_offset + col, v);
    store_elems<N>(dst + row * dst_stride + dst_offset + col, v);
  }
};

// A block [outer][rows][count] between two strided tensors (nn::BlockCopy): one thread per
// element; copies move bits (E: an unsigned integer of the element's size), accumulations add
// in f32 (E: the float type) and round back.
template <class E, bool Accumulate, class I>
struct CopyBlockOp {
  E* dst;
  const E* src;
  I rows, count;
  I src_offset, src_outer, src_row, dst_offset, dst_outer, dst_row;
  __host__ __device__ void operator()(I k) const {
    const I j = k % count, line = k / count;
    const I r = line % rows, o = line / rows;
    const E v = src[src_offset + o * src_outer + r * src_row + j];
    E& d = dst[dst_offset + o * dst_outer + r * dst_row + j];
    if constexpr (Accumulate)
      d = from_float<E>(to_float(d) + to_float(v));
    else
      d = v;
  }
};

// ---- the layout permutation [n, c, hw] <-> [n, hw, c] ----
// In either direction the source is [n, A, B] and the destination [n, B, A]: (A, B) = (c, hw)
// into NHWC, (hw, c) into NCHW.

// One thread per destination element, which reads the source element it comes from.
template <class From, class To, class I>
struct PermuteOp {
  const From* src;
  To* dst;
  I a, b;  // the source is [n, a, b]
  __host__ __device__ void operator()(I k) const {
    const I ab = a * b;
    const I i = k / ab, rest = k - i * ab;  // rest = (j_b * a + j_a) in the destination
    const I jb = rest / a, ja = rest - jb * a;
    dst[k] = convert_element<To>(src[(i * a + ja) * b + jb]);
  }
};

// One thread per N x N tile: N rows of N source elements (each row 16-byte accesses of the
// source type) transposed in registers into N rows of the destination (16-byte accesses of
// its type). Consecutive threads take consecutive tiles along the source's rows, so that a
// warp's loads are contiguous. a and b are multiples of N.
template <class From, class To, int N, class I>
struct PermuteTileOp {
  const From* src;
  To* dst;
  I a, b;  // the source is [n, a, b]
  I a_tiles, b_tiles;
  __host__ __device__ void operator()(I u) const {
    const I tb = u % b_tiles, rest = u / b_tiles;
    const I ta = rest % a_tiles, i = rest / a_tiles;
    const I a0 = ta * static_cast<I>(N), b0 = tb * static_cast<I>(N);
    From tile[N][N];
#pragma unroll
    for (int r = 0; r < N; ++r) load_elems<N>(src + (i * a + a0 + static_cast<I>(r)) * b + b0, tile[r]);
#pragma unroll
    for (int r = 0; r < N; ++r) {
      To row[N];
#pragma unroll
      for (int q = 0; q < N; ++q) row[q] = convert_element<To>(tile[q][r]);
      store_elems<N>(dst + (i * b + b0 + static_cast<I>(r)) * a + a0, row);
    }
  }
};

// ---- launch sequences (L: DeviceLaunch or HostLaunch) ----

template <class L>
void fill_on(const L& l, float* x, size_t n, float value) {
  map_on<per_access<float>()>(l, FillOp{x, value}, n, aligned16(x));
}

template <class L>
void axpy_on(const L& l, float alpha, const float* x, float* y, size_t n) {
  // axpby with beta = 1: a multiply by one is exact, so the sum is y + alpha x to the bit.
  map_on<per_access<float>()>(l, AxpbyOp{alpha, x, 1.0f, y}, n, aligned16(x) && aligned16(y));
}

template <class L>
void scale_on(const L& l, float alpha, float* x, size_t n) {
  map_on<per_access<float>()>(l, ScaleOp{alpha, x}, n, aligned16(x));
}

template <class L>
void axpby_on(const L& l, float alpha, const float* x, float beta, float* y, size_t n) {
  map_on<per_access<float>()>(l, AxpbyOp{alpha, x, beta, y}, n, aligned16(x) && aligned16(y));
}

template <class L>
void relu_forward_on(const L& l, int t, const void* x, void* y, size_t n) {
  dispatch_float(t, "relu", [&](auto tag) {
    using T = decltype(tag);
    map_on<per_access<T>()>(l, ReluForwardOp<T>{static_cast<const T*>(x), static_cast<T*>(y)}, n,
                            aligned16(x) && aligned16(y));
  });
}

template <class L>
void relu_backward_on(const L& l, int t, const void* y, const void* dy, void* dx, size_t n) {
  dispatch_float(t, "relu", [&](auto tag) {
    using T = decltype(tag);
    map_on<per_access<T>()>(
        l, ReluBackwardOp<T>{static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx)}, n,
        aligned16(y) && aligned16(dy) && aligned16(dx));
  });
}

template <class L>
void add_on(const L& l, int t, const void* a, const void* b, void* y, size_t n) {
  dispatch_float(t, "add", [&](auto tag) {
    using T = decltype(tag);
    map_on<per_access<T>()>(l, AddOp<T>{static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y)}, n,
                            aligned16(a) && aligned16(b) && aligned16(y));
  });
}

template <class L>
void multiply_on(const L& l, int t, const void* a, const void* b, void* y, size_t n) {
  dispatch_float(t, "multiply", [&](auto tag) {
    using T = decltype(tag);
    map_on<per_access<T>()>(l, MultiplyOp<T>{static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y)},
                            n, aligned16(a) && aligned16(b) && aligned16(y));
  });
}

template <class L>
void dropout_on(const L& l, int t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed,
                uint64_t offset) {
  if (!(p >= 0.0f && p <= 1.0f)) throw Error("dropout: probability must be in [0, 1], got " + std::to_string(p));
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;  // on the host, as the CPU does
  dispatch_float(t, "dropout", [&](auto tag) {
    using T = decltype(tag);
    map_on<per_access<T>()>(
        l,
        DropoutOp<T>{static_cast<const T*>(x), static_cast<T*>(y), static_cast<T*>(mask), p, keep_scale,
                     mix64(seed) + offset},
        n, aligned16(x) && aligned16(y) && aligned16(mask));
  });
}

template <class L, class E>
void copy_strided_typed(const L& l, E* dst, int64_t dst_stride, int64_t dst_offset, const E* src, int64_t src_stride,
                        int64_t src_offset, int64_t rows, int64_t count) {
  constexpr int kN = per_access<E>();
  const bool vector = count % kN == 0 && dst_stride % kN == 0 && dst_offset % kN == 0 && src_stride % kN == 0 &&
                      src_offset % kN == 0 && aligned16(dst) && aligned16(src);
  // The largest index either side reaches decides the index type.
  const int64_t reach = std::max((rows - 1) * dst_stride + dst_offset, (rows - 1) * src_stride + src_offset) + count;
  const size_t units = static_cast<size_t>(rows) * static_cast<size_t>(vector ? count / kN : count);
  with_index(static_cast<size_t>(std::max<int64_t>(reach, static_cast<int64_t>(units))), [&](auto index) {
    using I = decltype(index);
    const I per_row = static_cast<I>(vector ? count / kN : count);
    const auto launch = [&](auto op) { l.for_each(grid_for(units), kThreads, op, static_cast<I>(units)); };
    if (vector)
      launch(CopyStridedOp<E, kN, I>{dst, static_cast<I>(dst_stride), static_cast<I>(dst_offset), src,
                                     static_cast<I>(src_stride), static_cast<I>(src_offset), per_row});
    else
      launch(CopyStridedOp<E, 1, I>{dst, static_cast<I>(dst_stride), static_cast<I>(dst_offset), src,
                                    static_cast<I>(src_stride), static_cast<I>(src_offset), per_row});
  });
}

template <class L>
void copy_strided_on(const L& l, size_t elem_bytes, void* dst, int64_t dst_stride, int64_t dst_offset,
                     const void* src, int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  if (rows <= 0 || count <= 0) return;
  if (elem_bytes == 4)
    copy_strided_typed(l, static_cast<uint32_t*>(dst), dst_stride, dst_offset, static_cast<const uint32_t*>(src),
                       src_stride, src_offset, rows, count);
  else if (elem_bytes == 2)
    copy_strided_typed(l, static_cast<uint16_t*>(dst), dst_stride, dst_offset, static_cast<const uint16_t*>(src),
                       src_stride, src_offset, rows, count);
  else
    throw Error("copy_strided: elements of " + std::to_string(elem_bytes) + " bytes are not supported (2 or 4)");
}

template <class E, bool Accumulate, class L>
void copy_block_typed(const L& l, void* dst, const void* src, const nn::BlockCopy& b) {
  const size_t units = static_cast<size_t>(b.elements());
  const int64_t reach = std::max(b.src_offset + (b.outer - 1) * b.src_outer + (b.rows - 1) * b.src_row,
                                 b.dst_offset + (b.outer - 1) * b.dst_outer + (b.rows - 1) * b.dst_row) +
                        b.count;
  with_index(static_cast<size_t>(std::max<int64_t>(reach, static_cast<int64_t>(units))), [&](auto index) {
    using I = decltype(index);
    l.for_each(grid_for(units), kThreads,
               CopyBlockOp<E, Accumulate, I>{static_cast<E*>(dst), static_cast<const E*>(src), static_cast<I>(b.rows),
                                             static_cast<I>(b.count), static_cast<I>(b.src_offset),
                                             static_cast<I>(b.src_outer), static_cast<I>(b.src_row),
                                             static_cast<I>(b.dst_offset), static_cast<I>(b.dst_outer),
                                             static_cast<I>(b.dst_row)},
               static_cast<I>(units));
  });
}

// t: 0 f32, 1 bf16, 2 f16 (nn::DType's order).
template <class L>
void copy_block_on(const L& l, int t, void* dst, const void* src, const nn::BlockCopy& b, bool accumulate) {
  if (b.outer <= 0 || b.rows <= 0 || b.count <= 0) return;
  if (!accumulate) {
    if (t == 0)
      copy_block_typed<uint32_t, false>(l, dst, src, b);
    else
      copy_block_typed<uint16_t, false>(l, dst, src, b);
    return;
  }
  dispatch_float(t, "copy_block", [&](auto tag) {
    using T = decltype(tag);
    copy_block_typed<T, true>(l, dst, src, b);
  });
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
      map_on<per_access_of_both<From, To>()>(l, ConvertOp<From, To>{static_cast<const From*>(src), static_cast<To*>(dst)},
                                             n, aligned16(src) && aligned16(dst));
    });
  });
}

// Whether a permutation of this shape takes the tile path: N x N tiles (N from the narrower
// type) fit the channels and the pixels, and both pointers are 16-byte aligned.
template <class From, class To>
bool permute_by_tiles(const void* src, const void* dst, int64_t c, int64_t hw) {
  constexpr int kN = per_access_of_both<From, To>();
  return c % kN == 0 && hw % kN == 0 && aligned16(src) && aligned16(dst);
}

// From and To: float types (a conversion) or the same unsigned integer type (moving bits),
// with indices of type I. The identity cases (one channel, or one pixel: both orders are the
// same) are not here.
template <class I, class L, class From, class To>
void permute_with(const L& l, const From* src, bool to_nhwc, To* dst, int64_t n, int64_t c, int64_t hw) {
  const int64_t a = to_nhwc ? c : hw, b = to_nhwc ? hw : c;
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(c) * static_cast<size_t>(hw);
  constexpr int kN = per_access_of_both<From, To>();
  if (permute_by_tiles<From, To>(src, dst, c, hw)) {
    const size_t units = total / (static_cast<size_t>(kN) * kN);
    l.for_each(grid_for(units), kThreads,
               PermuteTileOp<From, To, kN, I>{src, dst, static_cast<I>(a), static_cast<I>(b), static_cast<I>(a / kN),
                                              static_cast<I>(b / kN)},
               static_cast<I>(units));
  } else {
    l.for_each(grid_for(total), kThreads, PermuteOp<From, To, I>{src, dst, static_cast<I>(a), static_cast<I>(b)},
               static_cast<I>(total));
  }
}

template <class L, class From, class To>
void permute_typed(const L& l, const From* src, bool to_nhwc, To* dst, int64_t n, int64_t c, int64_t hw) {
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(c) * static_cast<size_t>(hw);
  with_index(total, [&](auto index) { permute_with<decltype(index)>(l, src, to_nhwc, dst, n, c, hw); });
}

template <class L>
void permute_convert_on(const L& l, const void* src, int from, bool from_nhwc, void* dst, int to, bool to_nhwc,
                        int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  if (n <= 0 || c <= 0 || hw <= 0) return;
  const size_t total = static_cast<size_t>(n * c * hw);
  if (from_nhwc == to_nhwc || c == 1 || hw == 1) return convert_on(l, src, from, dst, to, total);
  dispatch_float(from, "permute", [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch_float(to, "permute", [&](auto to_tag) {
      using To = decltype(to_tag);
      permute_typed(l, static_cast<const From*>(src), to_nhwc, static_cast<To*>(dst), n, c, hw);
    });
  });
}

template <class L>
void permute_bits_on(const L& l, size_t elem_bytes, const void* src, bool from_nhwc, void* dst, bool to_nhwc,
                     int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  if (n <= 0 || c <= 0 || hw <= 0) return;
  if (elem_bytes != 4 && elem_bytes != 2)
    throw Error("permute: elements of " + std::to_string(elem_bytes) + " bytes are not supported (2 or 4)");
  const size_t total = static_cast<size_t>(n * c * hw);
  if (from_nhwc == to_nhwc || c == 1 || hw == 1) {
    if (src != dst) l.copy(dst, src, total * elem_bytes);
    return;
  }
  if (elem_bytes == 4)
    permute_typed(l, static_cast<const uint32_t*>(src), to_nhwc, static_cast<uint32_t*>(dst), n, c, hw);
  else
    permute_typed(l, static_cast<const uint16_t*>(src), to_nhwc, static_cast<uint16_t*>(dst), n, c, hw);
}

}  // namespace squall::cuda::kernels::detail
