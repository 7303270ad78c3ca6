// Catch2 main for the GPU tests: exits 77 (CTest: skipped) when the CUDA backend cannot get a
// device, printing why, so that a CPU-only machine reports the tests as skipped, not passed.
// A run starts with a line naming the devices and the CPU path the GPU's results are compared
// with (the CPU backend is the reference: tests/support/cpu_path.hpp), as the CPU tests' do.
#include <cstdio>
#include <string>

#include "src/backends/backends.hpp"
#include "src/nn/backend.hpp"
#include "tests/support/catch_session.hpp"
#include "tests/support/cpu_path.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (squall::backends::cuda_device_count(&why) == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  if (const int rc = squall::test::catch_parse(argc, argv); rc != 0) return rc;
  if (!squall::test::catch_lists()) {
    std::printf("squall GPU tests on %d CUDA device(s), the CPU reference on %s\n", squall::backends::cuda_device_count(),
                squall::test::cpu_path().c_str());
    std::fflush(stdout);
  }
  return squall::test::catch_run();
}
