#include "src/core/log.hpp"

#include <cstdio>
#include <string>

#include "src/core/error.hpp"

namespace squall::log {
namespace {

void write_line(std::FILE* f, const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), f);
  std::fflush(f);
}

std::string rank_prefix() {
  const int r = process_rank();
  return r >= 0 ? "rank " + std::to_string(r) + " on " + process_host() + ": " : std::string();
}

}  // namespace

void info(std::string_view msg) {
  if (process_rank() > 0) return;
  write_line(stdout, std::string(msg) + "\n");
}

void warn(std::string_view msg) {
  write_line(stderr, "squall: warning: " + rank_prefix() + std::string(msg) + "\n");
}

void error(std::string_view msg) {
  write_line(stderr, "squall: error: " + rank_prefix() + std::string(msg) + "\n");
}

}  // namespace squall::log
