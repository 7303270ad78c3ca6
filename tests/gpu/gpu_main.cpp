// Catch2 main for the GPU tests: exits 77 (CTest: skipped) when the CUDA backend cannot get a
// device, printing why, so that a CPU-only machine reports the tests as skipped, not passed.
#include <cstdio>
#include <string>

#include "src/nn/backend.hpp"
#include "tests/support/catch_session.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (squall::nn::cuda_device_count(&why) == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  if (const int rc = squall::test::catch_parse(argc, argv); rc != 0) return rc;
  return squall::test::catch_run();
}
