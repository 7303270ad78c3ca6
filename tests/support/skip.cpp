#include "tests/support/skip.hpp"

#include <atomic>
#include <iostream>

namespace squall::test {
namespace {

std::atomic<int> g_skips{0};  // atomic: a case may skip from a helper thread

}  // namespace

void record_skip(const std::string& reason) {
  std::cout << "SKIP: " << reason << std::endl;  // flushed: the line must survive a crash later on
  ++g_skips;
}

int skip_count() { return g_skips.load(); }

}  // namespace squall::test
