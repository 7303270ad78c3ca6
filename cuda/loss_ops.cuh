#pragma once
// Softmax cross-entropy, channel argmax, the confusion matrix and the sum of squares
// (src/cpu/cpu_loss.cpp, src/cpu/cpu_optim.cpp): bodies and launch sequences, run on a
// stream by cuda/loss.cu and on the host by the cuda-host tests. The sums are two-pass block
// reductions in double through the caller's scratch: per-block partials, then one block
// adding them in a fixed order, so the same input gives the same bits on every run. No
// float atomics.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/grid.cuh"
#include "src/core/error.hpp"

namespace squall::cuda::kernels::detail {

// ---- softmax cross-entropy ----
// Scratch layout, G = loss_blocks(pixels): [G x (loss hi, lo, weight hi, lo)] [G bad-label
// flags] [1/weight sum].

inline unsigned loss_blocks(int64_t pixels) { return grid_for(static_cast<size_t>(pixels), kMaxReduceBlocks); }

// The quiet NaN 0x7fc00000 (the loss after a bad label), the same bits on both sides.
__host__ __device__ __forceinline__ float quiet_nan() {
#ifdef __CUDA_ARCH__
  return __int_as_float(0x7fc00000);
#else
  const uint32_t bits = 0x7fc00000u;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// max over the classes of one pixel and the sum of exp(x - max), as the CPU: max by `<`
// (std::max), exponentials added in class order.
template <class T>
__host__ __device__ __forceinline__ void softmax_stats(const T* x, int64_t classes, int64_t hw, float& mx,
                                                       float& sum) {
  mx = -INFINITY;
  for (int64_t c = 0; c < classes; ++c) {
    const float v = to_float(x[c * hw]);
    mx = mx < v ? v : mx;
  }
  sum = 0.0f;
  for (int64_t c = 0; c < classes; ++c) sum += expf(to_float(x[c * hw]) - mx);
}

// Pass 1 (unit = block): the block's sum of w[label] * -log softmax[label] and of
// w[label], and whether it saw a label >= classes.
template <class T>
struct CePartialsOp {
  static constexpr int kSums = 2;
  static constexpr bool kUsesFlag = true;
  const T* logits;
  const int32_t* labels;
  const float* class_weights;
  int64_t classes, hw, pixels;
  float* scratch;
  unsigned blocks;
  __host__ __device__ Partial<2> part(int64_t u, const Place& at) const {
    Partial<2> acc{{0.0, 0.0}, 0};
    for (size_t k = static_cast<size_t>(u) * at.threads + at.thread; k < static_cast<size_t>(pixels);
         k += at.stride()) {
      const int64_t pix = static_cast<int64_t>(k);
      const int32_t label = labels[pix];
      if (label < 0) continue;
      if (label >= classes) {
        acc.flag = 1;
        continue;
      }
      const int64_t i = pix / hw, p = pix % hw;
      const T* x = logits + i * classes * hw + p;
      float mx, sum;
      softmax_stats(x, classes, hw, mx, sum);
      const float wt = class_weights ? class_weights[label] : 1.0f;
      acc.sum[0] += static_cast<double>(wt) * (static_cast<double>(logf(sum)) + static_cast<double>(mx) -
                                               static_cast<double>(to_float(x[label * hw])));
      acc.sum[1] += wt;
    }
    return acc;
  }
  __host__ __device__ void finish(int64_t u, const Partial<2>& total) const {
    store_double(scratch + 4 * u, total.sum[0]);
    store_double(scratch + 4 * u + 2, total.sum[1]);
    scratch[4 * blocks + u] = total.flag ? 1.0f : 0.0f;
  }
};

// Pass 2 (one block): the mean loss (NaN after a bad label, 0 when the weight sum is 0)
// and 1 / weight sum, times the loss scale when there is one, for the gradient.
struct CeFinishOp {
  static constexpr int kSums = 2;
  static constexpr bool kUsesFlag = true;
  float* scratch;
  unsigned blocks;
  float* loss;
  const float* grad_scale;
  __host__ __device__ Partial<2> part(int64_t, const Place& at) const {
    Partial<2> acc{{0.0, 0.0}, 0};
    for (unsigned b = at.thread; b < blocks; b += at.threads) {
      acc.sum[0] += load_double(scratch + 4 * b);
      acc.sum[1] += load_double(scratch + 4 * b + 2);
      acc.flag |= scratch[4 * blocks + b] != 0.0f;
    }
    return acc;
  }
  __host__ __device__ void finish(int64_t, const Partial<2>& total) const {
    const double l = total.sum[0], w = total.sum[1];
    scratch[5 * blocks] = w != 0.0 ? static_cast<float>(1.0 / w) * (grad_scale ? *grad_scale : 1.0f) : 0.0f;
    loss[0] = total.flag ? quiet_nan() : w != 0.0 ? static_cast<float>(l / w) : 0.0f;
  }
};

// Pass 3 (per pixel): dlogits = (w * softmax - w * onehot) / weight sum, each rounding as
// the CPU's (e * (w / sum), minus w at the label, times 1 / weight sum). Ignored and bad
// pixels get 0.
template <class T>
struct CeGradOp {
  const T* logits;
  const int32_t* labels;
  const float* class_weights;
  int64_t classes, hw;
  T* dlogits;
  const float* inv_w_at;
  __host__ __device__ void operator()(size_t k) const {
    const float inv_w = *inv_w_at;
    const int64_t pix = static_cast<int64_t>(k);
    const int64_t i = pix / hw, p = pix % hw;
    const T* x = logits + i * classes * hw + p;
    T* g = dlogits + i * classes * hw + p;
    const int32_t label = labels[pix];
    if (label < 0 || label >= classes) {
      for (int64_t c = 0; c < classes; ++c) g[c * hw] = from_float<T>(0.0f);
      return;
    }
    float mx, sum;
    softmax_stats(x, classes, hw, mx, sum);
    const float wt = class_weights ? class_weights[label] : 1.0f;
    const float inv = wt / sum;
    for (int64_t c = 0; c < classes; ++c) {
      float v = expf(to_float(x[c * hw]) - mx) * inv;
      if (c == label) v -= wt;
      g[c * hw] = from_float<T>(v * inv_w);
    }
  }
};

// ---- argmax and confusion ----

// Ties go to the lowest class index (torch.argmax), compared with `>` as the CPU does.
template <class T>
struct ArgmaxOp {
  const T* x;
  int32_t* out;
  int64_t c, hw;
  __host__ __device__ void operator()(size_t k) const {
    const int64_t pix = static_cast<int64_t>(k);
    const int64_t i = pix / hw, p = pix % hw;
    const T* v = x + i * c * hw + p;
    int32_t best = 0;
    float best_v = to_float(v[0]);
    for (int64_t j = 1; j < c; ++j) {
      const float vj = to_float(v[j * hw]);
      if (vj > best_v) {
        best_v = vj;
        best = static_cast<int32_t>(j);
      }
    }
    out[pix] = best;
  }
};

// Pairs whose label (or, to stay inside the matrix, prediction) is outside [0, classes)
// are skipped. Integer atomics: exact whatever the order.
struct ConfusionOp {
  const int32_t *labels, *pred;
  int64_t classes;
  int32_t* confusion;
  __host__ __device__ void operator()(size_t k) const {
    const int32_t l = labels[k], q = pred[k];
    if (l < 0 || l >= classes || q < 0 || q >= classes) return;
    add_int(confusion + static_cast<int64_t>(l) * classes + q, 1);
  }
};

// ---- sum of squares ----

// Pass 1 (unit = block): the block's grid-stride share of sum x^2 into partials[2u].
struct SumSquaresPartsOp {
  static constexpr int kSums = 1;
  const float* x;
  size_t n;
  float* partials;
  __host__ __device__ Partial<1> part(int64_t u, const Place& at) const {
    double acc = 0.0;
    for (size_t i = static_cast<size_t>(u) * at.threads + at.thread; i < n; i += at.stride()) {
      const double v = x[i];
      acc += v * v;
    }
    return Partial<1>{{acc}, 0};
  }
  __host__ __device__ void finish(int64_t u, const Partial<1>& total) const {
    store_double(partials + 2 * u, total.sum[0]);
  }
};

// Pass 2 (one block): out[0] = the partials' sum, added in a fixed order.
struct SumPartialsOp {
  static constexpr int kSums = 1;
  const float* partials;
  unsigned count;
  float* out;
  __host__ __device__ Partial<1> part(int64_t, const Place& at) const {
    double acc = 0.0;
    for (unsigned b = at.thread; b < count; b += at.threads) acc += load_double(partials + 2 * b);
    return Partial<1>{{acc}, 0};
  }
  __host__ __device__ void finish(int64_t, const Partial<1>& total) const { out[0] = static_cast<float>(total.sum[0]); }
};

// ---- launch sequences ----

inline size_t loss_scratch(int64_t pixels) { return 5 * static_cast<size_t>(loss_blocks(pixels)) + 1; }

template <class L>
void softmax_cross_entropy_on(const L& l, int t, const void* logits, const int32_t* labels,
                              const float* class_weights, int64_t n, int64_t classes, int64_t hw, void* dlogits,
                              float* loss, const float* grad_scale, float* scratch) {
  if (classes <= 0 || hw <= 0 || n < 0)
    throw Error("softmax_cross_entropy: bad shape n=" + std::to_string(n) + " classes=" + std::to_string(classes) +
                " hw=" + std::to_string(hw));
  const int64_t pixels = n * hw;
  if (pixels == 0) return l.zero(loss, sizeof(float));  // no pixel: zero loss (and no gradient to write)
  const unsigned blocks = loss_blocks(pixels);
  dispatch_float(t, "softmax_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits);
    l.reduce(blocks, kThreads, CePartialsOp<T>{x, labels, class_weights, classes, hw, pixels, scratch, blocks},
             blocks);
    l.reduce(1, kThreads, CeFinishOp{scratch, blocks, loss, grad_scale}, 1);
    l.for_each(grid_for(static_cast<size_t>(pixels)), kThreads,
               CeGradOp<T>{x, labels, class_weights, classes, hw, static_cast<T*>(dlogits), scratch + 5 * blocks},
               static_cast<size_t>(pixels));
  });
}

template <class L>
void argmax_channels_on(const L& l, int t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) {
  const int64_t pixels = n * hw;
  dispatch_float(t, "argmax", [&](auto tag) {
    using T = decltype(tag);
    if (pixels <= 0 || c <= 0) return;
    l.for_each(grid_for(static_cast<size_t>(pixels)), kThreads, ArgmaxOp<T>{static_cast<const T*>(x), out, c, hw},
               static_cast<size_t>(pixels));
  });
}

template <class L>
void accumulate_confusion_on(const L& l, const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
                             int32_t* confusion) {
  if (n == 0 || classes <= 0) return;
  l.for_each(grid_for(n), kThreads, ConfusionOp{labels, pred, classes, confusion}, n);
}

template <class L>
void sum_squares_on(const L& l, const float* x, size_t n, float* out, float* scratch) {
  if (n == 0) return l.zero(out, sizeof(float));
  const unsigned blocks = reduce_blocks(n);
  l.reduce(blocks, kThreads, SumSquaresPartsOp{x, n, scratch}, blocks);
  l.reduce(1, kThreads, SumPartialsOp{scratch, blocks, out}, 1);
}

}  // namespace squall::cuda::kernels::detail
