// Linked instead of the cuda/ library when squall is built without the CUDA backend: the
// probe reports why, and the factory's CUDA entries say so (make_backend checks the count
// first). The device-buffer allreduces are mpi/'s (mpi/nccl_absent.cpp).
#include "src/backends/backends.hpp"
#include "src/core/cuda_probe.hpp"
#include "src/core/error.hpp"

namespace squall {

namespace {
constexpr const char* k_not_built = "squall was built without the CUDA backend (-DSQUALL_CUDA=OFF or no toolkit found)";
}

CudaProbe probe_cuda() {
  CudaProbe p;
  p.status = k_not_built;
  return p;
}

namespace backends {

int cuda_device_count(std::string* why_none) {
  if (why_none) *why_none = k_not_built;
  return 0;
}

std::unique_ptr<nn::Backend> make_cuda_backend(int) { throw Error(k_not_built); }

}  // namespace backends
}  // namespace squall
