#include "src/train/pace.hpp"

#include <algorithm>
#include <cmath>

namespace squall::train {

void StepTimes::add(double seconds) {
  if (m_window == 0) return;
  if (m_times.size() < m_window) {
    m_times.push_back(seconds);
    return;
  }
  m_times[m_next] = seconds;
  m_next = (m_next + 1) % m_window;
}

double StepTimes::mean() const {
  if (m_times.empty()) return 0;
  double sum = 0;
  for (const double t : m_times) sum += t;
  return sum / static_cast<double>(m_times.size());
}

std::vector<int64_t> fit_round_steps(const std::vector<double>& seconds, const std::vector<int64_t>& weights,
                                     int64_t round, double quorum) {
  const size_t n = seconds.size();
  round = std::max<int64_t>(1, round);
  std::vector<int64_t> steps(n, round);
  // The typical node's seconds (the lower median of those known): the round's length follows
  // it, not the fastest, so that one node a little faster than the rest cuts nobody's rounds.
  std::vector<double> known;
  for (double t : seconds)
    if (t > 0) known.push_back(t);
  if (known.empty()) return steps;
  std::sort(known.begin(), known.end());
  const double typical = known[(known.size() - 1) / 2];
  for (size_t i = 0; i < n; ++i) {
    // Up to k_pace_tolerance times slower: the whole round. The wait it costs the others is
    // within what a shared node's seconds vary from round to round.
    if (seconds[i] <= 0 || seconds[i] <= k_pace_tolerance * typical) continue;
    const auto fitted = static_cast<int64_t>(std::llround(static_cast<double>(round) * typical / seconds[i]));
    steps[i] = std::clamp<int64_t>(fitted, 1, round);
  }
  // The quorum, in whole samples: sum_n w_n h_n >= q H sum_n w_n (rounded up).
  int64_t total = 0, trained = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t w = i < weights.size() ? std::max<int64_t>(1, weights[i]) : 1;
    total += w * round;
    trained += w * steps[i];
  }
  const auto needed = static_cast<int64_t>(std::ceil(quorum * static_cast<double>(total) - 1e-9));
  while (trained < needed) {
    size_t pick = n;
    for (size_t i = 0; i < n; ++i)
      if (steps[i] < round && (pick == n || steps[i] < steps[pick])) pick = i;
    if (pick == n) break;
    ++steps[pick];
    trained += pick < weights.size() ? std::max<int64_t>(1, weights[pick]) : 1;
  }
  return steps;
}

void SampleStream::append(SampleRange r) {
  if (r.end <= r.begin) return;
  if (!m_ranges.empty() && m_ranges.back().epoch == r.epoch && m_ranges.back().from == r.from && m_ranges.back().end == r.begin) {
    m_ranges.back().end = r.end;
    return;
  }
  m_ranges.push_back(r);
}

void SampleStream::take(int64_t n) {
  size_t drop = 0;
  for (; drop < m_ranges.size() && n > 0; ++drop) {
    SampleRange& r = m_ranges[drop];
    const int64_t here = std::min(n, r.end - r.begin);
    r.begin += here;
    n -= here;
    if (r.begin < r.end) break;
  }
  m_ranges.erase(m_ranges.begin(), m_ranges.begin() + static_cast<std::ptrdiff_t>(drop));
}

void SampleStream::keep_first(int64_t n) {
  size_t keep = 0;
  for (; keep < m_ranges.size() && n > 0; ++keep) {
    SampleRange& r = m_ranges[keep];
    r.end = r.begin + std::min(n, r.end - r.begin);
    n -= r.end - r.begin;
  }
  m_ranges.resize(keep);
}

int64_t SampleStream::size() const {
  int64_t s = 0;
  for (const SampleRange& r : m_ranges) s += r.end - r.begin;
  return s;
}

}  // namespace squall::train
