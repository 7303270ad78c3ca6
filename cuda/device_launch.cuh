#pragma once
// The launcher of the library: the generic kernels of cuda/grid.cuh on a CUDA stream. Kept
// apart from grid.cuh so that the host emulator's users need no cuDNN or NCCL header.
#include "cuda/check.cuh"
#include "cuda/grid.cuh"

namespace squall::cuda::kernels::detail {

// Launches on a stream; every launch is checked at once (cudaGetLastError), so a bad
// configuration is reported at the call that made it.
struct DeviceLaunch {
  cudaStream_t stream;

  template <class F, class I>
  void for_each(unsigned grid, unsigned block, const F& f, I n) const {
    for_each_kernel<F, I><<<grid, block, 0, stream>>>(f, n);
    SQUALL_CUDA_CHECK(cudaGetLastError());
  }
  template <class F>
  void for_units(unsigned grid, unsigned block, const F& f, int64_t units) const {
    for_units_kernel<F><<<grid, block, 0, stream>>>(f, units);
    SQUALL_CUDA_CHECK(cudaGetLastError());
  }
  template <class F>
  void reduce(unsigned grid, unsigned block, const F& f, int64_t units) const {
    reduce_kernel<F><<<grid, block, 0, stream>>>(f, units);
    SQUALL_CUDA_CHECK(cudaGetLastError());
  }
  template <class F>
  void warp_rows(unsigned grid, unsigned block, const F& f, int64_t rows) const {
    warp_rows_kernel<F><<<grid, block, 0, stream>>>(f, rows);
    SQUALL_CUDA_CHECK(cudaGetLastError());
  }
  void zero(void* p, size_t bytes) const { SQUALL_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream)); }
  void copy(void* dst, const void* src, size_t bytes) const {
    SQUALL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  }
};

}  // namespace squall::cuda::kernels::detail
