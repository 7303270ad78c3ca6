#pragma once
// The one clock for durations and timeline stamps: seconds on the steady clock (monotonic, so a
// changed system time never makes a phase negative), as doubles. The allreduce's level hooks
// and the timeline use the same origin, so their stamps line up.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <exception>
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

// The CPU seconds the calling thread has used (0 where the clock is not there).
inline double thread_cpu_seconds() {
  timespec t{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
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

// Calls done(begin, end) with the steady seconds at its making and at its scope's end: a phase
// timed by the scope it runs in (`const ScopedSpan span([&](double t0, double t1) { ... });`).
// A scope left by an exception records nothing, as a stamp after the work would not have been
// taken. The destructor may throw: what `done` throws reaches the caller as it would from a
// call after the work (never during an unwinding, which records nothing).
template <typename Done>
class ScopedSpan {
 public:
  explicit ScopedSpan(Done done) : m_done(std::move(done)) {}
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  ~ScopedSpan() noexcept(false) {
    if (std::uncaught_exceptions() == m_exceptions) m_done(m_begin, steady_seconds());
  }

 private:
  Done m_done;
  double m_begin = steady_seconds();
  int m_exceptions = std::uncaught_exceptions();  // those in flight at its making
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
