// Element-wise and data-movement kernels on a stream: the bodies and launch sequences are
// in cuda/elementwise_ops.cuh, shared with the host grid emulator of the cuda-host tests.
#include "cuda/device_launch.cuh"
#include "cuda/elementwise_ops.cuh"
#include "cuda/kernels.cuh"

namespace squall::cuda::kernels {

using detail::DeviceLaunch;

void fill(cudaStream_t s, float* x, size_t n, float value) { detail::fill_on(DeviceLaunch{s}, x, n, value); }

void relu_forward(cudaStream_t s, int t, const void* x, void* y, size_t n) {
  detail::relu_forward_on(DeviceLaunch{s}, t, x, y, n);
}

void relu_backward(cudaStream_t s, int t, const void* y, const void* dy, void* dx, size_t n) {
  detail::relu_backward_on(DeviceLaunch{s}, t, y, dy, dx, n);
}

void add(cudaStream_t s, int t, const void* a, const void* b, void* y, size_t n) {
  detail::add_on(DeviceLaunch{s}, t, a, b, y, n);
}

void axpy(cudaStream_t s, float alpha, const float* x, float* y, size_t n) {
  detail::axpy_on(DeviceLaunch{s}, alpha, x, y, n);
}

void scale(cudaStream_t s, float alpha, float* x, size_t n) { detail::scale_on(DeviceLaunch{s}, alpha, x, n); }

void axpby(cudaStream_t s, float alpha, const float* x, float beta, float* y, size_t n) {
  detail::axpby_on(DeviceLaunch{s}, alpha, x, beta, y, n);
}

void multiply(cudaStream_t s, int t, const void* a, const void* b, void* y, size_t n) {
  detail::multiply_on(DeviceLaunch{s}, t, a, b, y, n);
}

void dropout_forward(cudaStream_t s, int t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed,
                     uint64_t offset) {
  detail::dropout_on(DeviceLaunch{s}, t, x, y, mask, n, p, seed, offset);
}

void copy_strided(cudaStream_t s, size_t elem_bytes, void* dst, int64_t dst_stride, int64_t dst_offset,
                  const void* src, int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  detail::copy_strided_on(DeviceLaunch{s}, elem_bytes, dst, dst_stride, dst_offset, src, src_stride, src_offset,
                          rows, count);
}

void copy_block(cudaStream_t s, int t, void* dst, const void* src, const nn::BlockCopy& block, bool accumulate) {
  detail::copy_block_on(DeviceLaunch{s}, t, dst, src, block, accumulate);
}

void convert(cudaStream_t s, const void* src, int from, void* dst, int to, size_t n) {
  detail::convert_on(DeviceLaunch{s}, src, from, dst, to, n);
}

void permute_convert(cudaStream_t s, const void* src, int from, bool from_nhwc, void* dst, int to, bool to_nhwc,
                     int64_t n, int64_t c, int64_t h, int64_t w) {
  detail::permute_convert_on(DeviceLaunch{s}, src, from, from_nhwc, dst, to, to_nhwc, n, c, h, w);
}

void permute_bits(cudaStream_t s, size_t elem_bytes, const void* src, bool from_nhwc, void* dst, bool to_nhwc,
                  int64_t n, int64_t c, int64_t h, int64_t w) {
  detail::permute_bits_on(DeviceLaunch{s}, elem_bytes, src, from_nhwc, dst, to_nhwc, n, c, h, w);
}

}  // namespace squall::cuda::kernels
