// Global average pooling and bilinear resizing on a stream: the bodies, and the choice
// between the bilinear backward's thread gather and block gather, are in
// cuda/resample_ops.cuh, shared with the host grid emulator.
#include "cuda/device_launch.cuh"
#include "cuda/kernels.cuh"
#include "cuda/resample_ops.cuh"

namespace squall::cuda::kernels {

using detail::DeviceLaunch;

void global_avg_pool_forward(cudaStream_t s, int t, const void* x, void* y, int64_t nc, int64_t hw) {
  detail::gap_forward_on(DeviceLaunch{s}, t, x, y, nc, hw);
}

void global_avg_pool_backward(cudaStream_t s, int t, const void* dy, void* dx, int64_t nc, int64_t hw) {
  detail::gap_backward_on(DeviceLaunch{s}, t, dy, dx, nc, hw);
}

void bilinear_forward(cudaStream_t s, int t, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                      int64_t ow) {
  detail::bilinear_forward_on(DeviceLaunch{s}, t, x, y, nc, h, w, oh, ow);
}

void bilinear_backward(cudaStream_t s, int t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w,
                       int64_t oh, int64_t ow) {
  detail::bilinear_backward_on(DeviceLaunch{s}, t, dy, dx, nc, h, w, oh, ow);
}

}  // namespace squall::cuda::kernels
