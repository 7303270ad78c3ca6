#include "cuda/check.cuh"

#include <string>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"

namespace squall::cuda {
namespace {

// Capture is per thread (cudaStreamCaptureModeThreadLocal): each learner captures its own
// stream on its own thread while the others run eagerly.
thread_local cudaStream_t t_capturing = nullptr;

}  // namespace

void set_capturing(cudaStream_t stream) { t_capturing = stream; }
cudaStream_t capturing_stream() { return t_capturing; }

void refuse_in_capture(const char* what) {
  if (t_capturing != nullptr)
    throw nn::CaptureError(std::string("cuda backend: ") + what +
                           " while a CUDA graph is being captured (a captured pass must not allocate, grow a "
                           "workspace, make a library handle or wait on the host)");
}

void check_failed(const char* lib, const char* call, const char* why, const char* file, int line) {
  const std::string what = std::string(lib) + " call " + call + " failed: " + (why ? why : "unknown error");
  if (t_capturing != nullptr) {
    // Inside a capture a refused call invalidates the capture; the caller abandons it and
    // runs the same work eagerly. Clear the runtime's record so that it does not come back
    // as the next launch's error.
    (void)cudaGetLastError();
    throw nn::CaptureError(what + " (while capturing a CUDA graph)");
  }
  fatal(what, file, line);
}

bool query_done(cudaError_t query, const char* call, const char* file, int line) {
  if (query == cudaSuccess) return true;
  if (query != cudaErrorNotReady) check_failed("CUDA", call, cudaGetErrorString(query), file, line);
  // Not ready: the runtime recorded cudaErrorNotReady as the last error. Take it back, and
  // make sure nothing else was pending under it.
  const cudaError_t last = cudaGetLastError();
  if (last != cudaSuccess && last != cudaErrorNotReady)
    check_failed("CUDA", "cudaGetLastError() after a query", cudaGetErrorString(last), file, line);
  return false;
}

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

}  // namespace squall::cuda
