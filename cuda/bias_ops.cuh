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
#include <cstdint>
#include <string>

#include "cuda/grid.cuh"
#include "src/core/error.hpp"

namespace squall::cuda::kernels::detail {

template <class T>
struct BiasAddOp {
  T* y;
  const float* b;
  int64_t c, hw;
  bool nhwc;
  __host__ __device__ void operator()(size_t k) const {
    const int64_t channel = nhwc ? static_cast<int64_t>(k % static_cast<size_t>(c))
                                 : static_cast<int64_t>(k / static_cast<size_t>(hw)) % c;
    y[k] = from_float<T>(to_float(y[k]) + b[channel]);
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
template <class T>
struct BiasGradPartsOp {
  static constexpr int kSums = 1;
  const T* dy;
  float* partials;  // 2 floats (a double) per unit
  int64_t c, hw, per_channel, parts, span;
  bool nhwc;
  __host__ __device__ Partial<1> part(int64_t u, const Place& at) const {
    const int64_t ch = u / parts, j = u % parts;
    const int64_t begin = j * span;
    const int64_t end = begin + span < per_channel ? begin + span : per_channel;
    double acc = 0.0;
    for (int64_t k = begin + at.thread; k < end; k += at.threads) {
      const int64_t i = k / hw, p = k % hw;
      acc += static_cast<double>(to_float(nhwc ? dy[k * c + ch] : dy[(i * c + ch) * hw + p]));
    }
    return Partial<1>{{acc}, 0};
  }
  __host__ __device__ void finish(int64_t u, const Partial<1>& total) const {
    store_double(partials + 2 * u, total.sum[0]);
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
    l.for_each(grid_for(total), kThreads, BiasAddOp<T>{static_cast<T*>(y), b, c, hw, nhwc}, total);
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
  dispatch_float(t, "bias", [&](auto tag) {
    using T = decltype(tag);
    l.reduce(bias_grid(c * parts), kThreads,
             BiasGradPartsOp<T>{static_cast<const T*>(dy), scratch, c, hw, per_channel, parts, span, nhwc}, c * parts);
    l.reduce(bias_grid(c), kThreads, BiasGradFinishOp<T>{scratch, db, parts, round_to_type}, c);
  });
}

}  // namespace squall::cuda::kernels::detail
