#pragma once
// Check macros for CUDA runtime, cuBLAS, cuDNN and NCCL calls. On failure each prints the
// call, the library's error string, file, line, rank and host, and takes the job down.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

namespace squall::cuda {
[[noreturn]] void check_failed(const char* lib, const char* call, const char* why, const char* file, int line);
const char* cublas_status_name(cublasStatus_t s);
}  // namespace squall::cuda

#define SQUALL_CUDA_CHECK(call)                                                              \
  do {                                                                                       \
    const cudaError_t squall_e_ = (call);                                                    \
    if (squall_e_ != cudaSuccess)                                                            \
      ::squall::cuda::check_failed("CUDA", #call, cudaGetErrorString(squall_e_), __FILE__, __LINE__); \
  } while (0)

#define SQUALL_CUBLAS_CHECK(call)                                                            \
  do {                                                                                       \
    const cublasStatus_t squall_e_ = (call);                                                 \
    if (squall_e_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::squall::cuda::check_failed("cuBLAS", #call, ::squall::cuda::cublas_status_name(squall_e_), __FILE__, __LINE__); \
  } while (0)

#define SQUALL_CUDNN_CHECK(call)                                                             \
  do {                                                                                       \
    const cudnnStatus_t squall_e_ = (call);                                                  \
    if (squall_e_ != CUDNN_STATUS_SUCCESS)                                                   \
      ::squall::cuda::check_failed("cuDNN", #call, cudnnGetErrorString(squall_e_), __FILE__, __LINE__); \
  } while (0)

#define SQUALL_NCCL_CHECK(call)                                                              \
  do {                                                                                       \
    const ncclResult_t squall_e_ = (call);                                                   \
    if (squall_e_ != ncclSuccess)                                                            \
      ::squall::cuda::check_failed("NCCL", #call, ncclGetErrorString(squall_e_), __FILE__, __LINE__); \
  } while (0)
