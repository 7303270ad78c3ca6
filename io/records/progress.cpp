#include "io/records/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace squall::records {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s % 3600 / 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  return buf;
}

std::string format_progress(const ProgressSample& p) {
  const double remaining_steps = static_cast<double>(p.total_steps - p.step);
  const int64_t done = p.attempt_steps > 0 ? p.attempt_steps : p.step;
  const double eta = done > 0 ? p.elapsed_s / static_cast<double>(done) * remaining_steps : -1;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "epoch %d/%d step %lld/%lld loss %.4f %.0f samples/s ETA %s", p.epoch,
                p.epochs, static_cast<long long>(p.step), static_cast<long long>(p.total_steps), p.loss,
                p.samples_per_s, format_duration(eta).c_str());
  return buf;
}

namespace {

// Whether a launcher started the process: variables that Open MPI's mpirun, PMIx, Slurm's srun,
// Hydra and LSF set for the processes they start. Read before main() runs, because MPI_Init
// sets some of them in a plain process too (Open MPI's singleton start).
bool launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_STEP_ID", "LSB_JOBID"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}
const bool k_launched = launched();

}  // namespace

bool progress_redraws(int ranks) { return ranks == 1 && !k_launched && isatty(STDOUT_FILENO) != 0; }

Progress::Progress(bool live, int64_t log_every) : m_live(live), m_log_every(log_every > 0 ? log_every : 100) {}

void Progress::update(const ProgressSample& p) {
  const auto now = std::chrono::steady_clock::now();
  if (m_live) {
    if (now - m_last_draw < std::chrono::milliseconds(200) && p.step != p.total_steps) return;
    m_last_draw = now;
    std::printf("\r\033[K%s", format_progress(p).c_str());
    std::fflush(stdout);
    m_open_line = true;
  } else if (p.step % m_log_every == 0 || p.step == p.total_steps) {
    std::printf("%s\n", format_progress(p).c_str());
    std::fflush(stdout);
  }
}

void Progress::finish() {
  if (m_open_line) std::printf("\n");
  m_open_line = false;
  std::fflush(stdout);
}

}  // namespace squall::records
