// Batch norm over a split sample's group on a stream: the bodies and launch sequences are in
// cuda/batch_norm_group_ops.cuh, shared with the host grid emulator.
#include "cuda/batch_norm_group_ops.cuh"
#include "cuda/device_launch.cuh"
#include "cuda/kernels.cuh"

namespace squall::cuda::kernels {

using detail::DeviceLaunch;

void bn_group_moments(cudaStream_t s, int t, bool nhwc, const void* x, float* moments, int64_t n, int64_t c,
                      int64_t hw) {
  detail::bn_group_moments_on(DeviceLaunch{s}, t, nhwc, x, moments, n, c, hw);
}

void bn_group_apply(cudaStream_t s, int t, bool nhwc, bool relu, const void* x, void* y, const float* p, int64_t n,
                    int64_t c, int64_t hw) {
  detail::bn_group_apply_on(DeviceLaunch{s}, t, nhwc, relu, x, y, p, n, c, hw);
}

void bn_group_grad_sums(cudaStream_t s, int t, bool nhwc, bool relu, const void* x, const void* dy, const float* p,
                        float* sums, int64_t n, int64_t c, int64_t hw) {
  detail::bn_group_grad_sums_on(DeviceLaunch{s}, t, nhwc, relu, x, dy, p, sums, n, c, hw);
}

void bn_group_dx(cudaStream_t s, int t, bool nhwc, bool relu, const void* x, const void* dy, void* dx,
                 const float* p, int64_t n, int64_t c, int64_t hw) {
  detail::bn_group_dx_on(DeviceLaunch{s}, t, nhwc, relu, x, dy, dx, p, n, c, hw);
}

}  // namespace squall::cuda::kernels
