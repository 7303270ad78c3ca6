// Catch2 main for the GPU tests: exits 77 (CTest: skipped) when the CUDA backend cannot get a
// device, printing why, so that a CPU-only machine reports the tests as skipped, not passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "src/nn/backend.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (squall::nn::cuda_device_count(&why) == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
