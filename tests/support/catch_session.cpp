// The one file that compiles Catch2's implementation (catch_session.hpp says why).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/support/catch_session.hpp"

namespace squall::test {
namespace {

// SQUALL_TEST_HANG_AT_CASE=N: the N-th case this process starts (1-based) hangs at its start,
// after the reporter has been told of it, until a signal ends the process: what a test of a
// killed run (scripts/gpu-check's streamed reports, tests/gpu/test_gpu_check_rehearsal.sh) needs
// to find a case running at the kill however fast the cases before it ran.
class HangAtCase : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    TestEventListenerBase::testCaseStarting(info);
    ++m_started;
    m_case = info.name;
    m_hang = m_started == hang_at();
  }
  // A case's first section is the case itself, and the reporter has seen the case start by then
  // (listeners hear of a case before the reporter does).
  void sectionStarting(Catch::SectionInfo const& info) override {
    TestEventListenerBase::sectionStarting(info);
    if (!m_hang || info.name != m_case) return;
    m_hang = false;
    std::printf("SQUALL_TEST_HANG_AT_CASE: case %ld, '%s', hangs until a signal ends it\n", m_started, m_case.c_str());
    std::fflush(stdout);
    for (;;) pause();
  }

 private:
  static long hang_at() {
    const char* n = std::getenv("SQUALL_TEST_HANG_AT_CASE");
    return n == nullptr ? 0 : std::strtol(n, nullptr, 10);
  }
  long m_started = 0;
  std::string m_case;
  bool m_hang = false;
};
CATCH_REGISTER_LISTENER(HangAtCase)

Catch::Session& session() {
  static Catch::Session s;
  return s;
}

}  // namespace

int catch_parse(int argc, char** argv) { return session().applyCommandLine(argc, argv); }

void catch_use_reporter(const std::string& name) { session().configData().reporterName = name; }

int catch_run() { return session().run(); }

bool catch_lists() {
  const Catch::ConfigData& c = session().configData();
  return c.listTests || c.listTestNamesOnly || c.listTags || c.listReporters || c.showHelp;
}

}  // namespace squall::test
