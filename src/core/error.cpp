#include "src/core/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace squall {
namespace {

AbortHook g_abort_hook = nullptr;
int g_rank = -1;

std::string& host_storage() {
  static std::string host = [] {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return std::string("unknown-host");
    return std::string(buf);
  }();
  return host;
}

}  // namespace

void set_abort_hook(AbortHook hook) { g_abort_hook = hook; }

void set_process_identity(int rank, std::string host) {
  g_rank = rank;
  if (!host.empty()) host_storage() = std::move(host);
}

int process_rank() { return g_rank; }
const std::string& process_host() { return host_storage(); }

void fatal(std::string_view what, const char* file, int line) {
  // One write so that lines from many ranks do not interleave mid-line.
  std::string msg = "squall: fatal: rank " + std::to_string(g_rank) + " on " + host_storage() +
                    ": " + std::string(what) + " (" + file + ":" + std::to_string(line) + ")\n";
  std::fwrite(msg.data(), 1, msg.size(), stderr);
  std::fflush(stderr);
  if (g_abort_hook) g_abort_hook(1);
  std::_Exit(1);  // only reached before MPI is up, when this process is the whole job
}

}  // namespace squall
