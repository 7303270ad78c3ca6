#include "cuda/device_launch.cuh"
#include "cuda/elementwise_ops.cuh"
#include "cuda/fill.cuh"

namespace squall::cuda {

// The element-wise fill_on (cuda/elementwise_ops.cuh, which the host emulator checks), with
// its launch shape.
void fill(float* dst, size_t n, float value, cudaStream_t stream) {
  kernels::detail::fill_on(kernels::detail::DeviceLaunch{stream}, dst, n, value);
}

}  // namespace squall::cuda
