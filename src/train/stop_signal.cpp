#include "src/train/stop_signal.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>

namespace squall::train {
namespace {

std::atomic<int> g_signal{0};

// The first stop signal counts; later ones change nothing. A batch system sends several as it
// ends a job (Slurm: SIGTERM to every step and again as it kills the job, the job script's
// SIGUSR1 through srun, srun's --kill-on-bad-exit SIGTERM to the ranks that exit after the
// first), and a rank that died of the second lost its exit status, or its checkpoint. What
// ends a rank at once is SIGKILL (the batch system's, after its grace: Slurm's KillWait) or
// SIGINT.
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
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
