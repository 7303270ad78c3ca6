#include "cuda/device_launch.cuh"
#include "cuda/elementwise_ops.cuh"
#include "cuda/fill.cuh"

namespace squall::cuda {

// The body is the element-wise FillOp (cuda/elementwise_ops.cuh, which the host emulator
// checks); the launch keeps this call's own shape: 256 threads, at most 65535 blocks.
void fill(float* dst, size_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned threads = 256;
  const auto blocks = static_cast<unsigned>(std::min<size_t>((n + threads - 1) / threads, 65535));
  kernels::detail::DeviceLaunch{stream}.for_each(blocks, threads, kernels::detail::FillOp{dst, value}, n);
}

}  // namespace squall::cuda
