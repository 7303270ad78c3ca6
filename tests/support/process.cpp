#include "tests/support/process.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace squall::test {
namespace {

// Launched tests run as root in CI and start more ranks than there are cores; Open MPI
// refuses both unless told. Set here, not through CTest, so a test binary run by hand
// behaves the same. The jobs they launch compare every sum across ranks (mpi/sum_check.hpp)
// unless the caller's environment says SQUALL_CHECK_SUMS=0.
const bool g_mpi_env_ready = [] {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  setenv("SQUALL_CHECK_SUMS", "1", 0);
  return true;
}();

}  // namespace

ProcessResult run_command(const std::string& command) {
  char err_path[] = "/tmp/squall-test-stderr-XXXXXX";
  const int fd = mkstemp(err_path);
  if (fd >= 0) close(fd);
  ProcessResult r;
  FILE* pipe = popen((command + " 2>" + err_path).c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream err(err_path);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  std::remove(err_path);
  return r;
}

std::string squall_bin() { return SQUALL_BIN; }

std::string mpiexec(int np) {
  return std::string(SQUALL_MPIEXEC) + " -n " + std::to_string(np) + " --oversubscribe";
}

}  // namespace squall::test
