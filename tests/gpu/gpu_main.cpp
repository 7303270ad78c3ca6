// Catch2 main for GPU tests: exits 77 (CTest: skipped) when no CUDA device is present, so
// that a CPU-only machine reports the tests as skipped, not passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
