// Linked instead of cuda/probe.cpp when squall is built without the CUDA backend.
#include "src/core/cuda_probe.hpp"

namespace squall {

CudaProbe probe_cuda() {
  CudaProbe p;
  p.status = "squall was built without the CUDA backend (-DSQUALL_CUDA=OFF or no toolkit found)";
  return p;
}

}  // namespace squall
