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

// The squall binary, and mpiexec with the flags the suite needs ("mpiexec -n NP ...").
std::string squall_bin();
std::string mpiexec(int np);

}  // namespace squall::test
