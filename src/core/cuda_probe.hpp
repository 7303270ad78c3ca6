#pragma once
// What the CUDA backend sees on this rank. Defined by cuda/probe.cpp when the CUDA backend
// is built, and by src/app/cuda_absent.cpp otherwise (CMake picks one), so no caller needs
// an #ifdef.
#include <string>
#include <vector>

namespace squall {

struct CudaProbe {
  bool built = false;              // the CUDA backend is compiled in
  std::string runtime_version;     // "13.0"
  std::string driver_version;      // "" when no driver is loaded
  std::string cudnn_version;       // "9.13.0"
  std::vector<std::string> devices;  // "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"
  std::string status;              // why there are no devices, when there are none
};

CudaProbe probe_cuda();

}  // namespace squall
