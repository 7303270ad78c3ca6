#pragma once
// Honest skips. Catch2 v2 has no SKIP, and a case that returns early is reported as passed,
// which hides a test that never ran. SQUALL_SKIP(reason) prints "SKIP: <reason>" on stdout,
// records the skip and returns from the test function (a TEST_CASE body or a SECTION in it);
// the test main (tests/support/catch_main.cpp) then exits with k_skip_exit_code when nothing
// failed, and CTest (SKIP_RETURN_CODE, cmake/SquallTests.cmake) reports the case as skipped.
// CTest runs one case per process, so the other cases are unaffected.
//
//   if (!have_dataset()) SQUALL_SKIP(dir << " missing (install dataset-fashion-mnist)");
#include <sstream>
#include <string>

namespace squall::test {

inline constexpr int k_skip_exit_code = 77;  // CTest's conventional "skipped" status

// Prints "SKIP: <reason>" and counts the skip.
void record_skip(const std::string& reason);

// Skips recorded so far in this process.
int skip_count();

}  // namespace squall::test

// `reason` is streamed (a << b works, as in Catch's INFO and WARN).
#define SQUALL_SKIP(reason)                                  \
  do {                                                       \
    std::ostringstream squall_skip_reason_;                  \
    squall_skip_reason_ << reason;                           \
    ::squall::test::record_skip(squall_skip_reason_.str()); \
    return;                                                  \
  } while (false)
