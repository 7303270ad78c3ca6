#pragma once
// The bias of the convolution and linear plans at bf16/f16 and in NHWC (bodies and launch
// sequences; cuda/bias.cu runs them on a stream). f32 biases on reduced-precision
// activations, which cuDNN's AddTensor and BackwardBias do not take mixed.
//
// The gradient is a two-pass reduction, so that a few channels over many pixels (3 classes
// over 1.8 M pixels of a segmentation output) still fill the device: pass 1 gives each
// (channel, part) pair a block that sums its part of the channel's n * hw values in double
// into scratch; pass 2 gives each channel a block that adds its parts' sums in a fixed
// order. No atomics: the same input gives the same bits on every run.
//
// Both move 16 bytes per access of the activations where they may and index in 32 bits below
// 2^31 elements (cuda/vectorised.cuh): the bias add as any element-wise body, and the NHWC
// gradient by giving each block a group of channels (one 16-byte access holds a pixel's value
// of each), which sums every channel in the order the one-channel block sums it.
#include <cstdint>
#include <string>

#include "cuda/grid.cuh"
#include "cuda/vectorised.cuh"
#include "src/core/error.hpp"

namespace squall::cuda::kernels::detail {

template <class T>
struct BiasAddOp {
  T* y;
  const float* b;
  int64_t c, hw;
  bool nhwc;
  // The channel of element k, then one step at a time (no division per element).
  template <int N, class I>
  __host__ __device__ void apply(I k) const {
    T v[N];
    load_elems<N>(y + k, v);
    const I channels = static_cast<I>(c), pixels = static_cast<I>(hw);
    I ch, p = 0;
    if (nhwc) {
      ch = k % channels;
    } else {
      const I q = k / pixels;
      p = k - q * pixels;
      ch = q % channels;
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
      v[j] = from_float<T>(to_float(v[j]) + b[ch]);
      if (nhwc || ++p == pixels) {
        p = 0;
        if (++ch == channels) ch = 0;
      }
    }
    store_elems<N>(y + k, v);
  }
};

// Parts per channel: enough blocks for about kReduceItemsPerThread values per thread, at
// most kMaxReduceBlocks blocks over all channels (and at least one part per channel). A
// function of the shape only, so the summation order does not depend on the device.
inline int64_t bias_grad_parts(int64_t n, int64_t c, int64_t hw) {
  const int64_t per_channel = n * hw;
  const int64_t per_block = static_cast<int64_t>(kThreads * kReduceItemsPerThread);
  const int64_t wanted = (per_channel + per_block - 1) / per_block;
  const int64_t cap = static_cast<int64_t>(kMaxReduceBlocks) / c;
  return std::max<int64_t>(1, std::min(wanted, cap));
}

// Largest grid of the bias gradient's passes; past it blocks loop over the units.
constexpr int64_t kMaxBiasGrid = 65535;
inline unsigned bias_grid(int64_t units) { return static_cast<unsigned>(std::min(units, kMaxBiasGrid)); }

// Pass 1, unit u = ch * parts + j: the sum of channel ch over the values [j span, (j + 1)
// span) of its n * hw (sample-major), each thread taking every blockDim-th value.
template <class T, class I>
struct BiasGradPartsOp {
  static constexpr int kSums = 1;
  const T* dy;
  float* partials;  // 2 floats (a double) per unit
  I c, hw, per_channel, parts, span;
  bool nhwc;
  __host__ __device__ Partial<1> part(int64_t u, const Place& at) const {
    const I ch = static_cast<I>(u) / parts, j = static_cast<I>(u) % parts;
    const I begin = j * span;
    const I end = begin + span < per_channel ? begin + span : per_channel;
    double acc = 0.0;
    for (I k = begin + static_cast<I>(at.thread); k < end; k += static_cast<I>(at.threads)) {
      if (nhwc) {
        acc += static_cast<double>(to_float(dy[k * c + ch]));
      } else {
        const I i = k / hw, p = k - i * hw;
        acc += static_cast<double>(to_float(dy[(i * c + ch) * hw + p]));
      }
    }
    return Partial<1>{{acc}, 0};
  }
  __host__ __device__ void finish(int64_t u, const Partial<1>& total) const {
    store_double(partials + 2 * u, total.sum[0]);
  }
};

// Pass 1 in NHWC with c a multiple of N: unit u = g * parts + j takes channels [g N, (g + 1) N)
// over the same pixels as the N units (g N + l) * parts + j above, one 16-byte access per
// pixel, and each channel's sum is what that unit's would be.
template <class T, int N, class I>
struct BiasGradPartsNhwcOp {
  static constexpr int kSums = N;
  const T* dy;
  float* partials;
  I c, per_channel, parts, span;
  __host__ __device__ Partial<N> part(int64_t u, const Place& at) const {
    const I g = static_cast<I>(u) / parts, j = static_cast<I>(u) % parts;
    const I begin = j * span;
    const I end = begin + span < per_channel ? begin + span : per_channel;
    Partial<N> acc{};
    for (I k = begin + static_cast<I>(at.thread); k < end; k += static_cast<I>(at.threads)) {
      T v[N];
      load_elems<N>(dy + k * c + g * static_cast<I>(N), v);
#pragma unroll
      for (int l = 0; l < N; ++l) acc.sum[l] += static_cast<double>(to_float(v[l]));
    }
    return acc;
  }
  __host__ __device__ void finish(int64_t u, const Partial<N>& total) const {
    const int64_t g = u / static_cast<int64_t>(parts), j = u % static_cast<int64_t>(parts);
    for (int l = 0; l < N; ++l)
      store_double(partials + 2 * ((g * N + l) * static_cast<int64_t>(parts) + j), total.sum[l]);
  }
};

// Pass 2, unit ch: the channel's parts added (each thread every blockDim-th part, then
// block_sum), rounded to T when asked, stored as f32.
template <class T>
struct BiasGradFinishOp {
  static constexpr int kSums = 1;
  const float* partials;
  float* db;
  int64_t parts;
  bool round_to_type;
  __host__ __device__ Partial<1> part(int64_t ch, const Place& at) const {
    double acc = 0.0;
    for (int64_t j = at.thread; j < parts; j += at.threads) acc += load_double(partials + 2 * (ch * parts + j));
    return Partial<1>{{acc}, 0};
  }
  __host__ __device__ void finish(int64_t ch, const Partial<1>& total) const {
    const float v = static_cast<float>(total.sum[0]);
    db[ch] = round_to_type ? to_float(from_float<T>(v)) : v;
  }
};

// Whether pass 1 takes channels in groups of one 16-byte access (NHWC, whole groups, aligned).
template <class T>
bool bias_grad_by_groups(bool nhwc, const void* dy, int64_t c) {
  return nhwc && c % per_access<T>() == 0 && aligned16(dy);
}

inline size_t bias_grad_scratch(int64_t n, int64_t c, int64_t hw) {
  if (n <= 0 || c <= 0 || hw <= 0) return 0;
  return 2 * static_cast<size_t>(c) * static_cast<size_t>(bias_grad_parts(n, c, hw));
}

template <class L>
void bias_add_on(const L& l, int t, bool nhwc, void* y, const float* b, int64_t n, int64_t c, int64_t hw) {
  if (n <= 0 || c <= 0 || hw <= 0) return;
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(c) * static_cast<size_t>(hw);
  dispatch_float(t, "bias", [&](auto tag) {
    using T = decltype(tag);
    map_on<per_access<T>()>(l, BiasAddOp<T>{static_cast<T*>(y), b, c, hw, nhwc}, total, aligned16(y));
  });
}

// scratch: bias_grad_scratch(n, c, hw) floats.
template <class L>
void bias_grad_on(const L& l, int t, bool nhwc, const void* dy, float* db, int64_t n, int64_t c, int64_t hw,
                  bool round_to_type, float* scratch) {
  if (c <= 0) return;
  if (n <= 0 || hw <= 0) return l.zero(db, static_cast<size_t>(c) * sizeof(float));
  const int64_t parts = bias_grad_parts(n, c, hw);
  const int64_t per_channel = n * hw;
  const int64_t span = (per_channel + parts - 1) / parts;
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(c) * static_cast<size_t>(hw);
  dispatch_float(t, "bias", [&](auto tag) {
    using T = decltype(tag);
    constexpr int kN = per_access<T>();
    const auto* x = static_cast<const T*>(dy);
    with_index(total, [&](auto index) {
      using I = decltype(index);
      if (bias_grad_by_groups<T>(nhwc, dy, c))
        l.reduce(bias_grid(c / kN * parts), kThreads,
                 BiasGradPartsNhwcOp<T, kN, I>{x, scratch, static_cast<I>(c), static_cast<I>(per_channel),
                                               static_cast<I>(parts), static_cast<I>(span)},
                 c / kN * parts);
      else
        l.reduce(bias_grid(c * parts), kThreads,
                 BiasGradPartsOp<T, I>{x, scratch, static_cast<I>(c), static_cast<I>(hw), static_cast<I>(per_channel),
                                       static_cast<I>(parts), static_cast<I>(span), nhwc},
                 c * parts);
    });
    l.reduce(bias_grid(c), kThreads, BiasGradFinishOp<T>{scratch, db, parts, round_to_type}, c);
  });
}

}  // namespace squall::cuda::kernels::detail
