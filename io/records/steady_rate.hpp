#pragma once
// The attempt's steady rate (docs/metrics.md, "Steady rate"), kept by the loop and written by
// the run log: a pure function of the step ends and the excluded seconds it is told, so that
// tests/unit/test_steady_rate.cpp can check it with made-up times.
#include <algorithm>
#include <cstdint>
#include <optional>

namespace squall::records {

// The attempt's steady rate (docs/metrics.md, "Steady rate"): what a step costs once the
// first steps' one-off work (handles, workspaces, module loading, cuDNN's algorithm search)
// is done, which is what a peer's timed loop after its warm-up measures. The first `skip`
// steps of the attempt are left out; each later step lasts from the end of the step before to
// its own end, both taken after the host's one wait per step (when it reads the losses), so
// the device's work is inside; evaluations, checkpoints and the auto-tuner's re-shaping that
// fall between two ends are taken out.
class SteadyRate {
 public:
  // The steps left out: max(10, 5% of the steps the attempt plans).
  static int64_t skip_for(int64_t planned_steps) { return std::max<int64_t>(10, planned_steps / 20); }
  void start(int64_t planned_steps) {
    *this = SteadyRate();
    m_skip = skip_for(planned_steps);
  }
  // Seconds spent on something other than steps since the last step ended.
  void exclude(double seconds) { m_excluded += seconds; }
  // A step ended at `now` (steady_seconds, after its host wait), having trained `samples`
  // samples over the job.
  void step_ended(double now, int64_t samples) {
    if (++m_ended > m_skip) {
      m_seconds += std::max(0.0, now - m_last_end - m_excluded);
      m_samples += samples;
      ++m_steps;
    }
    m_last_end = now;
    m_excluded = 0;
  }
  // nullopt until a step past the skip has ended: too few steps to tell.
  std::optional<double> samples_per_s() const {
    if (m_steps == 0 || m_seconds <= 0) return std::nullopt;
    return static_cast<double>(m_samples) / m_seconds;
  }
  int64_t skip() const { return m_skip; }
  int64_t steps() const { return m_steps; }      // steps measured
  int64_t samples() const { return m_samples; }  // ... their samples over the job
  double seconds() const { return m_seconds; }   // ... their seconds

 private:
  int64_t m_skip = 10;
  int64_t m_ended = 0;      // steps of the attempt ended so far
  int64_t m_steps = 0, m_samples = 0;
  double m_seconds = 0;
  double m_last_end = 0;    // when the last step ended
  double m_excluded = 0;    // seconds to take out of the next step
};

}  // namespace squall::records
