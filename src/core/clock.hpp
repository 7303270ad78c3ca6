#pragma once
// The one clock for durations and timeline stamps: seconds on the steady clock (monotonic, so a
// changed system time never makes a phase negative), as doubles. The allreduce's level hooks
// and the timeline use the same origin, so their stamps line up.
#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace squall {

// Seconds since the steady clock's epoch.
inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds since the system clock's epoch (wall time, for records other programs read).
inline double system_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Seconds since it was made or restarted.
class Stopwatch {
 public:
  Stopwatch() : m_start(steady_seconds()) {}
  void restart() { m_start = steady_seconds(); }
  double seconds() const { return steady_seconds() - m_start; }
  double started_at() const { return m_start; }

 private:
  double m_start;
};

// Seconds covered by at least one of the intervals [begin, end] (empty ones, end <= begin,
// count nothing): the wall time of work that overlapped itself, such as several sums in flight
// at once, each of which would otherwise be counted in full.
inline double covered_seconds(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double covered = 0, reach = -1e300;
  for (const auto& [begin, end] : intervals) {
    const double from = std::max(begin, reach);
    if (end > from) {
      covered += end - from;
      reach = end;
    }
  }
  return covered;
}

}  // namespace squall
