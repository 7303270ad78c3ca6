// Catch2's main for single-process test binaries. A run in which nothing failed but a case
// called SQUALL_SKIP exits 77, which CTest reports as skipped (tests/support/skip.hpp). A run
// starts with one line naming oneDNN's ISA and the bf16 path (tests/support/cpu_path.hpp), and
// a rerun at a lower ISA (SQUALL_TEST_ISA_RERUN) that would change nothing here is skipped.
#include <cstdio>
#include <string>

#include "tests/support/catch_session.hpp"
#include "tests/support/cpu_path.hpp"
#include "tests/support/skip.hpp"

int main(int argc, char** argv) {
  if (const int rc = squall::test::catch_parse(argc, argv); rc != 0) return rc;
  if (!squall::test::catch_lists()) {
    std::printf("squall tests on %s\n", squall::test::cpu_path().c_str());
    std::fflush(stdout);
    if (const std::string why = squall::test::isa_rerun_skip_reason(); !why.empty()) {
      squall::test::record_skip(why);
      return squall::test::k_skip_exit_code;
    }
  }
  const int failed = squall::test::catch_run();
  // Catch returns the number of failures: exactly 77 of them must not read as a skip.
  if (failed != 0) return failed == squall::test::k_skip_exit_code ? 1 : failed;
  if (const int skips = squall::test::skip_count(); skips > 0) {
    std::printf("%d skip(s): exit status %d (skipped)\n", skips, squall::test::k_skip_exit_code);
    return squall::test::k_skip_exit_code;
  }
  return 0;
}
