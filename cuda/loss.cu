// Softmax cross-entropy, channel argmax, the confusion matrix and the sum of squares
// (src/cpu/cpu_loss.cpp, src/cpu/cpu_optim.cpp). The sums are two-pass block reductions
// in double through the caller's scratch: per-block partials, then one block adding them
// in a fixed order, so the same input gives the same bits on every run. No float atomics.
#include <string>

#include "cuda/check.cuh"
#include "cuda/kernel_util.cuh"
#include "cuda/kernels.cuh"
#include "src/core/error.hpp"

namespace squall::cuda::kernels {

using detail::block_sum;
using detail::from_float;
using detail::to_float;
using detail::global_index;
using detail::global_stride;
using detail::grid_for;
using detail::kThreads;
using detail::load_double;
using detail::store_double;

namespace {

constexpr int kWarps = kThreads / 32;

// ---- softmax cross-entropy ----
// Scratch layout, G = loss_blocks(pixels): [G x (loss hi, lo, weight hi, lo)] [G bad-label
// flags] [1/weight sum].

unsigned loss_blocks(int64_t pixels) { return grid_for(static_cast<size_t>(pixels), detail::kMaxReduceBlocks); }

// max over the classes of one pixel and the sum of exp(x - max), as the CPU: max by `<`
// (std::max), exponentials added in class order.
template <class T>
__device__ __forceinline__ void softmax_stats(const T* x, int64_t classes, int64_t hw, float& mx, float& sum) {
  mx = -INFINITY;
  for (int64_t c = 0; c < classes; ++c) {
    const float v = to_float(x[c * hw]);
    mx = mx < v ? v : mx;
  }
  sum = 0.0f;
  for (int64_t c = 0; c < classes; ++c) sum += expf(to_float(x[c * hw]) - mx);
}

// Pass 1: each block's sum of w[label] * -log softmax[label] and of w[label], and whether
// it saw a label >= classes.
template <class T>
__global__ void ce_partials_kernel(const T* logits, const int32_t* labels, const float* class_weights,
                                   int64_t classes, int64_t hw, int64_t pixels, float* scratch) {
  __shared__ double shared[kWarps];
  double loss_sum = 0.0, weight_sum = 0.0;
  int bad = 0;
  for (size_t k = global_index(); k < static_cast<size_t>(pixels); k += global_stride()) {
    const int64_t pix = static_cast<int64_t>(k);
    const int32_t label = labels[pix];
    if (label < 0) continue;
    if (label >= classes) {
      bad = 1;
      continue;
    }
    const int64_t i = pix / hw, p = pix % hw;
    const T* x = logits + i * classes * hw + p;
    float mx, sum;
    softmax_stats(x, classes, hw, mx, sum);
    const float wt = class_weights ? class_weights[label] : 1.0f;
    loss_sum += static_cast<double>(wt) * (static_cast<double>(logf(sum)) + static_cast<double>(mx) -
                                           static_cast<double>(to_float(x[label * hw])));
    weight_sum += wt;
  }
  const double l = block_sum(loss_sum, shared);
  const double w = block_sum(weight_sum, shared);
  const int any_bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) {
    store_double(scratch + 4 * blockIdx.x, l);
    store_double(scratch + 4 * blockIdx.x + 2, w);
    scratch[4 * gridDim.x + blockIdx.x] = any_bad ? 1.0f : 0.0f;
  }
}

// Pass 2 (one block): the mean loss (NaN after a bad label, 0 when the weight sum is 0)
// and 1 / weight sum, times the loss scale when there is one, for the gradient.
__global__ void ce_finish_kernel(float* scratch, unsigned blocks, float* loss, const float* grad_scale) {
  __shared__ double shared[kWarps];
  double loss_sum = 0.0, weight_sum = 0.0;
  int bad = 0;
  for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) {
    loss_sum += load_double(scratch + 4 * b);
    weight_sum += load_double(scratch + 4 * b + 2);
    bad |= scratch[4 * blocks + b] != 0.0f;
  }
  const double l = block_sum(loss_sum, shared);
  const double w = block_sum(weight_sum, shared);
  const int any_bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) {
    scratch[5 * blocks] = w != 0.0 ? static_cast<float>(1.0 / w) * (grad_scale ? *grad_scale : 1.0f) : 0.0f;
    loss[0] = any_bad ? __int_as_float(0x7fc00000) : w != 0.0 ? static_cast<float>(l / w) : 0.0f;
  }
}

// Pass 3: dlogits = (w * softmax - w * onehot) / weight sum, each rounding as the CPU's
// (e * (w / sum), minus w at the label, times 1 / weight sum). Ignored and bad pixels get 0.
template <class T>
__global__ void ce_grad_kernel(const T* logits, const int32_t* labels, const float* class_weights, int64_t classes,
                               int64_t hw, int64_t pixels, T* dlogits, const float* inv_w_at) {
  const float inv_w = *inv_w_at;
  for (size_t k = global_index(); k < static_cast<size_t>(pixels); k += global_stride()) {
    const int64_t pix = static_cast<int64_t>(k);
    const int64_t i = pix / hw, p = pix % hw;
    const T* x = logits + i * classes * hw + p;
    T* g = dlogits + i * classes * hw + p;
    const int32_t label = labels[pix];
    if (label < 0 || label >= classes) {
      for (int64_t c = 0; c < classes; ++c) g[c * hw] = from_float<T>(0.0f);
      continue;
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
}

// ---- argmax and confusion ----

// Ties go to the lowest class index (torch.argmax), compared with `>` as the CPU does.
template <class T>
__global__ void argmax_kernel(const T* x, int32_t* out, int64_t c, int64_t hw, int64_t pixels) {
  for (size_t k = global_index(); k < static_cast<size_t>(pixels); k += global_stride()) {
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
}

// Pairs whose label (or, to stay inside the matrix, prediction) is outside [0, classes)
// are skipped. Integer atomics: exact whatever the order.
__global__ void confusion_kernel(const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
                                 int32_t* confusion) {
  for (size_t k = global_index(); k < n; k += global_stride()) {
    const int32_t l = labels[k], q = pred[k];
    if (l < 0 || l >= classes || q < 0 || q >= classes) continue;
    atomicAdd(confusion + static_cast<int64_t>(l) * classes + q, 1);
  }
}

// ---- sum of squares ----

__global__ void sum_squares_partials_kernel(const float* x, size_t n, float* partials) {
  __shared__ double shared[kWarps];
  double acc = 0.0;
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const double v = x[i];
    acc += v * v;
  }
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) store_double(partials + 2 * blockIdx.x, total);
}

// One block: out[0] = the partials' sum, added in a fixed order.
__global__ void sum_partials_kernel(const float* partials, unsigned count, float* out) {
  __shared__ double shared[kWarps];
  double acc = 0.0;
  for (unsigned b = threadIdx.x; b < count; b += blockDim.x) acc += load_double(partials + 2 * b);
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) out[0] = static_cast<float>(total);
}

}  // namespace

size_t loss_scratch_floats(int64_t pixels) { return 5 * static_cast<size_t>(loss_blocks(pixels)) + 1; }

void softmax_cross_entropy(cudaStream_t s, int t, const void* logits, const int32_t* labels,
                           const float* class_weights, int64_t n, int64_t classes, int64_t hw, void* dlogits,
                           float* loss, const float* grad_scale, float* scratch) {
  if (classes <= 0 || hw <= 0 || n < 0)
    throw Error("softmax_cross_entropy: bad shape n=" + std::to_string(n) + " classes=" + std::to_string(classes) +
                " hw=" + std::to_string(hw));
  const int64_t pixels = n * hw;
  if (pixels == 0) {  // no pixel: zero loss (and no gradient to write)
    SQUALL_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), s));
    return;
  }
  const unsigned blocks = loss_blocks(pixels);
  detail::dispatch_float(t, "softmax_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits);
    ce_partials_kernel<T><<<blocks, kThreads, 0, s>>>(x, labels, class_weights, classes, hw, pixels, scratch);
    SQUALL_CUDA_CHECK(cudaGetLastError());
    ce_finish_kernel<<<1, kThreads, 0, s>>>(scratch, blocks, loss, grad_scale);
    SQUALL_CUDA_CHECK(cudaGetLastError());
    ce_grad_kernel<T><<<grid_for(static_cast<size_t>(pixels)), kThreads, 0, s>>>(
        x, labels, class_weights, classes, hw, pixels, static_cast<T*>(dlogits), scratch + 5 * blocks);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void argmax_channels(cudaStream_t s, int t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) {
  const int64_t pixels = n * hw;
  detail::dispatch_float(t, "argmax", [&](auto tag) {
    using T = decltype(tag);
    if (pixels <= 0 || c <= 0) return;
    argmax_kernel<T><<<grid_for(static_cast<size_t>(pixels)), kThreads, 0, s>>>(static_cast<const T*>(x), out, c,
                                                                                hw, pixels);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void accumulate_confusion(cudaStream_t s, const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
                          int32_t* confusion) {
  if (n == 0 || classes <= 0) return;
  confusion_kernel<<<grid_for(n), kThreads, 0, s>>>(labels, pred, n, classes, confusion);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

size_t reduce_scratch_floats(size_t n) { return 2 * static_cast<size_t>(detail::reduce_blocks(n)); }

void sum_squares(cudaStream_t s, const float* x, size_t n, float* out, float* scratch) {
  if (n == 0) {
    SQUALL_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), s));
    return;
  }
  const unsigned blocks = detail::reduce_blocks(n);
  sum_squares_partials_kernel<<<blocks, kThreads, 0, s>>>(x, n, scratch);
  SQUALL_CUDA_CHECK(cudaGetLastError());
  sum_partials_kernel<<<1, kThreads, 0, s>>>(scratch, blocks, out);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace squall::cuda::kernels
