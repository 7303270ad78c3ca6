#pragma once
// A command a test needs to succeed (a training run before its checkpoint is examined, a
// predict before its masks are read): on failure the test case stops there, showing the
// command and everything it printed.
#include <catch2/catch.hpp>
#include <string>

#include "tests/support/process.hpp"

namespace squall::test {

inline void must_run(const std::string& command) {
  const ProcessResult r = run_command(command);
  INFO(command << "\n" << r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

}  // namespace squall::test
