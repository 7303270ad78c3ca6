// The one file that compiles Catch2's implementation (catch_session.hpp says why).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/support/catch_session.hpp"

namespace squall::test {
namespace {

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
