// The bias of the reduced-precision and NHWC plans on a stream (cuda/bias_ops.cuh has the
// bodies and the two-pass gradient, shared with the host grid emulator).
#include "cuda/bias_ops.cuh"
#include "cuda/device_launch.cuh"
#include "cuda/kernels.cuh"

namespace squall::cuda::kernels {

using detail::DeviceLaunch;

void bias_add(cudaStream_t s, int t, bool nhwc, void* y, const float* b, int64_t n, int64_t c, int64_t hw) {
  detail::bias_add_on(DeviceLaunch{s}, t, nhwc, y, b, n, c, hw);
}

size_t bias_grad_scratch_floats(int64_t n, int64_t c, int64_t hw) { return detail::bias_grad_scratch(n, c, hw); }

void bias_grad(cudaStream_t s, int t, bool nhwc, const void* dy, float* db, int64_t n, int64_t c, int64_t hw,
               bool round_to_type, float* scratch) {
  detail::bias_grad_on(DeviceLaunch{s}, t, nhwc, dy, db, n, c, hw, round_to_type, scratch);
}

}  // namespace squall::cuda::kernels
