// The bias of the convolution and linear plans at bf16/f16 and in NHWC (cuda/conv.cpp,
// cuda/linear.cpp): f32 biases on reduced-precision activations, which cuDNN's AddTensor and
// BackwardBias do not take mixed. The gradient is one block per channel, summed in double in a fixed order
// (deterministic, no atomics).
#include <string>

#include "cuda/check.cuh"
#include "cuda/kernel_util.cuh"
#include "cuda/kernels.cuh"

namespace squall::cuda::kernels {

using detail::block_sum;
using detail::from_float;
using detail::global_index;
using detail::global_stride;
using detail::grid_for;
using detail::kThreads;
using detail::to_float;

namespace {

template <class T>
__global__ void bias_add_kernel(T* y, const float* b, size_t total, int64_t c, int64_t hw, bool nhwc) {
  for (size_t k = global_index(); k < total; k += global_stride()) {
    const int64_t channel = nhwc ? static_cast<int64_t>(k % static_cast<size_t>(c))
                                 : static_cast<int64_t>(k / static_cast<size_t>(hw)) % c;
    y[k] = from_float<T>(to_float(y[k]) + b[channel]);
  }
}

// Block `ch` sums channel ch over every sample and pixel.
template <class T>
__global__ void bias_grad_kernel(const T* dy, float* db, int64_t n, int64_t c, int64_t hw, bool nhwc,
                                 bool round_to_type) {
  __shared__ double shared[kThreads / 32];
  const int64_t ch = blockIdx.x;
  double acc = 0.0;
  const int64_t per_channel = n * hw;
  for (int64_t k = threadIdx.x; k < per_channel; k += blockDim.x) {
    const int64_t i = k / hw, p = k % hw;
    acc += static_cast<double>(to_float(nhwc ? dy[(i * hw + p) * c + ch] : dy[(i * c + ch) * hw + p]));
  }
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) {
    const float v = static_cast<float>(total);
    db[ch] = round_to_type ? to_float(from_float<T>(v)) : v;
  }
}

}  // namespace

void bias_add(cudaStream_t s, int t, bool nhwc, void* y, const float* b, int64_t n, int64_t c, int64_t hw) {
  if (n <= 0 || c <= 0 || hw <= 0) return;
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(c) * static_cast<size_t>(hw);
  detail::dispatch_float(t, "bias", [&](auto tag) {
    using T = decltype(tag);
    bias_add_kernel<T><<<grid_for(total), kThreads, 0, s>>>(static_cast<T*>(y), b, total, c, hw, nhwc);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void bias_grad(cudaStream_t s, int t, bool nhwc, const void* dy, float* db, int64_t n, int64_t c, int64_t hw,
               bool round_to_type) {
  if (c <= 0) return;
  if (n <= 0 || hw <= 0) {
    SQUALL_CUDA_CHECK(cudaMemsetAsync(db, 0, static_cast<size_t>(c) * sizeof(float), s));
    return;
  }
  if (c > 0x7fffffff) throw Error("bias gradient: " + std::to_string(c) + " channels are too many for one grid");
  detail::dispatch_float(t, "bias", [&](auto tag) {
    using T = decltype(tag);
    bias_grad_kernel<T><<<static_cast<unsigned>(c), kThreads, 0, s>>>(static_cast<const T*>(dy), db, n, c, hw, nhwc,
                                                                      round_to_type);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace squall::cuda::kernels
