// Softmax cross-entropy, channel argmax, the confusion matrix and the sum of squares on a
// stream (cuda/loss_ops.cuh has the bodies and the two-pass reductions, shared with the host
// grid emulator).
#include "cuda/device_launch.cuh"
#include "cuda/kernels.cuh"
#include "cuda/loss_ops.cuh"

namespace squall::cuda::kernels {

using detail::DeviceLaunch;

size_t loss_scratch_floats(int64_t pixels) { return detail::loss_scratch(pixels); }

void softmax_cross_entropy(cudaStream_t s, int t, const void* logits, const int32_t* labels,
                           const float* class_weights, int64_t n, int64_t classes, int64_t hw, void* dlogits,
                           float* loss, const float* grad_scale, float* scratch) {
  detail::softmax_cross_entropy_on(DeviceLaunch{s}, t, logits, labels, class_weights, n, classes, hw, dlogits, loss,
                                   grad_scale, scratch);
}

void argmax_channels(cudaStream_t s, int t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) {
  detail::argmax_channels_on(DeviceLaunch{s}, t, x, out, n, c, hw);
}

void accumulate_confusion(cudaStream_t s, const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
                          int32_t* confusion) {
  detail::accumulate_confusion_on(DeviceLaunch{s}, labels, pred, n, classes, confusion);
}

size_t reduce_scratch_floats(size_t n) { return 2 * static_cast<size_t>(detail::reduce_blocks(n)); }

void sum_squares(cudaStream_t s, const float* x, size_t n, float* out, float* scratch) {
  detail::sum_squares_on(DeviceLaunch{s}, x, n, out, scratch);
}

}  // namespace squall::cuda::kernels
