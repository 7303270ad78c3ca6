// Optimizer updates on a stream: the element arithmetic, the chunked fused updates and the
// per-tensor norms of LAMB and LARC are in cuda/optim_ops.cuh, shared with the host grid
// emulator.
#include "cuda/device_launch.cuh"
#include "cuda/kernels.cuh"
#include "cuda/optim_ops.cuh"

namespace squall::cuda::kernels {

using detail::DeviceLaunch;

void sgd_step(cudaStream_t s, float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
              float weight_decay, bool nesterov) {
  detail::sgd_step_on(DeviceLaunch{s}, w, g, velocity, n, lr, momentum, weight_decay, nesterov);
}

void adam_step(cudaStream_t s, float* w, const float* g, float* m, float* v, float* update, size_t n, float lr,
               float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step, bool apply) {
  detail::adam_step_on(DeviceLaunch{s}, w, g, m, v, update, n, lr, beta1, beta2, eps, weight_decay, decoupled, step,
                       apply);
}

size_t norms_scratch_floats(int32_t chunks, int32_t tensor_count) {
  return 4 * static_cast<size_t>(chunks > 0 ? chunks : 0) +
         4 * static_cast<size_t>(tensor_count > 0 ? tensor_count : 0);
}

void sgd_update(cudaStream_t s, const ChunkTable& t, float* velocity, float lr, float momentum, float weight_decay,
                bool nesterov) {
  detail::sgd_update_on(DeviceLaunch{s}, t, velocity, lr, momentum, weight_decay, nesterov);
}

void adam_update(cudaStream_t s, const ChunkTable& t, float* m, float* v, int kind, float lr, float beta1,
                 float beta2, float eps, float weight_decay, int64_t step, float* update, float* norms) {
  detail::adam_update_on(DeviceLaunch{s}, t, m, v, kind, lr, beta1, beta2, eps, weight_decay, step, update, norms);
}

void larc_scale(cudaStream_t s, const ChunkTable& t, float lr, float eta, float weight_decay, bool clip,
                float* norms) {
  detail::larc_scale_on(DeviceLaunch{s}, t, lr, eta, weight_decay, clip, norms);
}

}  // namespace squall::cuda::kernels
