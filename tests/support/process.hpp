#pragma once
// Runs a shell command for a test and captures what it printed and how it ended.
#include <string>

namespace squall::test {

struct ProcessResult {
  int exit_code = -1;   // the command's exit status, or 128+signal
  std::string out;      // stdout
  std::string err;      // stderr
};

ProcessResult run_command(const std::string& command);

// The last `chars` characters of a command's stdout and stderr together, for a test's INFO.
inline std::string output_tail(const ProcessResult& r, size_t chars = 4000) {
  const std::string all = r.out + r.err;
  return all.substr(all.size() > chars ? all.size() - chars : 0);
}

// The squall binary, and mpiexec with the flags the suite needs ("mpiexec -n NP ...").
std::string squall_bin();
std::string mpiexec(int np);

}  // namespace squall::test
