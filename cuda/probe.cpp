#include <cstdio>
#include <string>

#include "cuda/check.cuh"
#include "src/core/cuda_probe.hpp"

namespace squall {
namespace {

std::string dotted(int v, int major_div, int minor_div, int minor_mod) {
  return std::to_string(v / major_div) + "." + std::to_string((v / minor_div) % minor_mod);
}

}  // namespace

CudaProbe probe_cuda() {
  CudaProbe p;
  p.built = true;
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) p.runtime_version = dotted(rt, 1000, 10, 100);
  const size_t cudnn = cudnnGetVersion();  // 9.x encodes major*10000 + minor*100 + patch
  p.cudnn_version = std::to_string(cudnn / 10000) + "." + std::to_string((cudnn / 100) % 100) + "." +
                    std::to_string(cudnn % 100);

  // No driver or no device is a normal state on a CPU machine, not an error.
  int drv = 0;
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) p.driver_version = dotted(drv, 1000, 10, 100);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    p.status = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error
    return p;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    SQUALL_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    char mem[32];
    std::snprintf(mem, sizeof(mem), "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    p.devices.push_back(std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                        std::to_string(prop.minor) + ", " + mem + ")");
  }
  if (count == 0) p.status = "no CUDA device visible";
  return p;
}

}  // namespace squall
