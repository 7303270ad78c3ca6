#include "src/train/stop_signal.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>

namespace squall::train {
namespace {

std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, sig)) {
    // Asked twice: the default action (termination), now.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

void install_stop_handlers() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // system calls in flight (reads, MPI's polls) carry on
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGUSR1, &action, nullptr);
    return true;
  }();
  (void)installed;
}

int stop_signal() { return g_signal.load(); }

const char* signal_name(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGUSR1) return "SIGUSR1";
  static thread_local char text[32];
  std::snprintf(text, sizeof(text), "signal %d", signal);
  return text;
}

}  // namespace squall::train
