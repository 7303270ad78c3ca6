// Linked instead of the cuda/ library when squall is built without the CUDA backend: the
// probe reports why, and the backend factory is never reached (make_backend checks the count).
// The device-buffer allreduces are mpi/'s (mpi/nccl_absent.cpp).
#include "src/core/cuda_probe.hpp"
#include "src/core/error.hpp"
#include "src/nn/backend.hpp"

namespace squall {

namespace {
constexpr const char* k_not_built = "squall was built without the CUDA backend (-DSQUALL_CUDA=OFF or no toolkit found)";
}

CudaProbe probe_cuda() {
  CudaProbe p;
  p.status = k_not_built;
  return p;
}

namespace nn {

int cuda_device_count(std::string* why_none) {
  if (why_none) *why_none = k_not_built;
  return 0;
}

std::unique_ptr<Backend> make_cuda_backend(int) { throw Error(k_not_built); }

}  // namespace nn
}  // namespace squall
