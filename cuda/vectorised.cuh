#pragma once
// What makes a memory-bound kernel move its bytes in as few accesses as the hardware allows:
// each thread loads and stores 16 bytes at once (8 bf16/f16 or 4 f32 elements: one LDG.128 /
// STG.128) where every pointer it touches is 16-byte aligned, and indexes in 32 bits where the
// tensor has fewer than 2^31 elements (a 64-bit division is a long instruction sequence on the
// device; a 32-bit one a few). Both are decided per launch, on the host, from the pointers and
// the count; the other paths (one element per access, 64-bit indices) stay for what does not
// qualify. All activation views are 256-byte aligned (Graph::k_view_alignment), so the vector
// path is the rule and the scalar one the exception (an offset view, an odd tail).
//
// The element arithmetic is the same on every path, so the results are too, bit for bit.
#include <cstddef>
#include <cstdint>

#include "cuda/grid.cuh"

namespace squall::cuda::kernels::detail {

constexpr int kVectorBytes = 16;
// Counts below this index in 32 bits.
constexpr size_t kIndex32Limit = size_t{1} << 31;

// Elements of T in one 16-byte access.
template <class T>
constexpr int per_access() {
  return kVectorBytes / static_cast<int>(sizeof(T));
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & (kVectorBytes - 1)) == 0; }

// 16 bytes of T, the unit of a vector access.
template <class T>
struct alignas(kVectorBytes) Pack16 {
  T v[per_access<T>()];
};

// N elements of T at p into out: whole 16-byte accesses (p 16-byte aligned, N * sizeof(T) a
// multiple of 16) or, for N == 1, one element.
template <int N, class T>
__host__ __device__ __forceinline__ void load_elems(const T* p, T* out) {
  if constexpr (N == 1) {
    out[0] = p[0];
  } else {
    constexpr int kPer = per_access<T>();
    static_assert(N % kPer == 0, "a vector access moves whole 16-byte packs");
#pragma unroll
    for (int k = 0; k < N / kPer; ++k) {
      const Pack16<T> pack = reinterpret_cast<const Pack16<T>*>(p)[k];
#pragma unroll
      for (int j = 0; j < kPer; ++j) out[k * kPer + j] = pack.v[j];
    }
  }
}

template <int N, class T>
__host__ __device__ __forceinline__ void store_elems(T* p, const T* in) {
  if constexpr (N == 1) {
    p[0] = in[0];
  } else {
    constexpr int kPer = per_access<T>();
    static_assert(N % kPer == 0, "a vector access moves whole 16-byte packs");
#pragma unroll
    for (int k = 0; k < N / kPer; ++k) {
      Pack16<T> pack;
#pragma unroll
      for (int j = 0; j < kPer; ++j) pack.v[j] = in[k * kPer + j];
      reinterpret_cast<Pack16<T>*>(p)[k] = pack;
    }
  }
}

// A body applied over [0, n) elements: unit u < vectors takes the N elements from u * N with
// 16-byte accesses (body.template apply<N>), every later unit one element of the tail (or of
// the whole range, when vectors is 0). I: the index type of the launch.
template <int N, class Body, class I>
struct Vectorised {
  Body body;
  I vectors;
  __host__ __device__ void operator()(I u) const {
    if (u < vectors) body.template apply<N>(static_cast<I>(u * N));
    else body.template apply<1>(static_cast<I>(vectors * N + (u - vectors)));
  }
};

// Calls f(I{}) with the launch's index type: 32 bits when every index of `count` fits.
template <class F>
void with_index(size_t count, F&& f) {
  if (count < kIndex32Limit) f(uint32_t{});
  else f(uint64_t{});
}

// The launch of an element-wise body over n elements with indices of type I: N per unit where
// `vector` (the host's check that every pointer of the body is 16-byte aligned), then the
// tail one by one.
template <int N, class I, class L, class Body>
void map_with(const L& l, const Body& body, size_t n, bool vector) {
  if (n == 0) return;
  const size_t vectors = vector ? n / N : 0;
  const size_t units = vectors + (n - vectors * N);
  l.for_each(grid_for(units), kThreads, Vectorised<N, Body, I>{body, static_cast<I>(vectors)}, static_cast<I>(units));
}

// map_with in 32 bits where n allows.
template <int N, class L, class Body>
void map_on(const L& l, const Body& body, size_t n, bool vector) {
  with_index(n, [&](auto index) { map_with<N, decltype(index)>(l, body, n, vector); });
}

}  // namespace squall::cuda::kernels::detail
