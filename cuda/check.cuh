#pragma once
// Check macros for CUDA runtime, cuBLAS and cuDNN calls. On failure each prints the
// call, the library's error string, file, line, rank and host, and takes the job down;
// except on a thread that is capturing a stream into a CUDA graph, where the failure is
// thrown as nn::CaptureError instead, so that the capture is abandoned and the work runs
// eagerly (a real error then shows there, as itself).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace squall::cuda {
[[noreturn]] void check_failed(const char* lib, const char* call, const char* why, const char* file, int line);
const char* cublas_status_name(cublasStatus_t s);

// The stream the calling thread is capturing (cudaStreamBeginCapture in thread-local mode),
// or nullptr: set by the backend's begin_capture, cleared when the capture ends.
void set_capturing(cudaStream_t stream);
cudaStream_t capturing_stream();
// Throws nn::CaptureError("<what> while a CUDA graph is being captured ...") when the calling
// thread is capturing: for calls that must not happen inside a capture (allocation, a
// workspace that grows, handle creation, a host wait).
void refuse_in_capture(const char* what);

// cudaEventQuery and cudaStreamQuery answer cudaErrorNotReady for work still running, and
// the runtime also keeps it as the thread's last error, where the next kernel's launch check
// (cudaGetLastError) would take it for a failed launch. `query` is the result of such a
// query: true when the work is done, false when it is not (and the last error, which can
// only be that cudaErrorNotReady, is cleared); any other result is a failure, reported as
// by SQUALL_CUDA_CHECK. A launch error left unread before the query is not hidden: it
// is reported too.
bool query_done(cudaError_t query, const char* call, const char* file, int line);
}  // namespace squall::cuda

#define SQUALL_CUDA_CHECK(call)                                                              \
  do {                                                                                       \
    const cudaError_t squall_e_ = (call);                                                    \
    if (squall_e_ != cudaSuccess)                                                            \
      ::squall::cuda::check_failed("CUDA", #call, cudaGetErrorString(squall_e_), __FILE__, __LINE__); \
  } while (0)

// true when the queried event or stream has completed (see query_done).
#define SQUALL_CUDA_QUERY(call) ::squall::cuda::query_done((call), #call, __FILE__, __LINE__)

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

