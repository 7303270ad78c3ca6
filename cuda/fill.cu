#include "cuda/check.cuh"
#include "cuda/fill.cuh"

namespace squall::cuda {
namespace {

__global__ void fill_kernel(float* __restrict__ dst, size_t n, float value) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = value;
}

}  // namespace

void fill(float* dst, size_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<size_t>((n + threads - 1) / threads, 65535));
  fill_kernel<<<blocks, threads, 0, stream>>>(dst, n, value);
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace squall::cuda
