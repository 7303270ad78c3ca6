#include "src/parallel/autotune.hpp"

#include <algorithm>

namespace squall::parallel {

int AutoTuner::after_step(const mpi::Communicator& world, int learners, int64_t samples, double seconds) {
  if (!active()) return 0;
  if (++m_steps <= m_skip) return 0;  // a new configuration's first steps build and warm up
  m_samples += samples;
  m_seconds += seconds;
  if (m_steps < m_skip + m_window) return 0;
  double rate = m_samples / std::max(m_seconds, 1e-9);
  const std::string decided = world.broadcast_string(std::to_string(rate));
  rate = std::stod(decided);
  m_steps = 0;
  m_samples = 0;
  m_seconds = 0;
  int change = 0;
  std::string verdict;
  if (m_best_rate > 0 && rate <= m_best_rate * (1.0 + m_threshold)) {
    change = -1;
    m_done = true;
    verdict = "gain below the threshold: back to " + std::to_string(learners - 1) + " learner(s), tuning ends";
  } else if (learners >= m_max) {
    m_best_rate = rate;
    m_done = true;
    verdict = "at parallel.max_replicas_per_device, tuning ends";
  } else {
    m_best_rate = rate;
    change = +1;
    verdict = "trying " + std::to_string(learners + 1) + " learners";
  }
  m_decisions.push_back({{"learners", learners}, {"samples_per_s", rate}, {"decision", verdict}});
  return change;
}

}  // namespace squall::parallel
