#pragma once
// The auto-tuner of a training run (docs/training.md, "The auto-tuner").
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "mpi/comm.hpp"

namespace squall::parallel {

// Crossbow's auto-tuner, simplified: measure the throughput over a window of steps, add a
// learner, measure again; keep it while the gain exceeds the threshold, else take it back
// and stop. Rank 0's clock decides (every step ends in a collective, so the ranks agree to
// within one step) and the decision is broadcast.
class AutoTuner {
 public:
  AutoTuner(bool enabled, double threshold, int max_learners, int64_t window)
      : m_enabled(enabled), m_threshold(threshold), m_max(max_learners), m_window(window) {}
  bool active() const { return m_enabled && !m_done; }
  void stop() { m_done = true; }  // a resumed run whose tuning had ended

  // Called after every step with the global samples processed in it; returns +1 (add a
  // learner), -1 (remove the last one) or 0. Collective when active.
  int after_step(const mpi::Communicator& world, int learners, int64_t samples, double seconds);
  const nlohmann::json& decisions() const { return m_decisions; }

 private:
  bool m_enabled;
  double m_threshold;
  int m_max;
  int64_t m_window;
  int64_t m_skip = 3;
  bool m_done = false;
  int64_t m_steps = 0;
  double m_samples = 0, m_seconds = 0, m_best_rate = 0;
  nlohmann::json m_decisions = nlohmann::json::array();
};

}  // namespace squall::parallel
