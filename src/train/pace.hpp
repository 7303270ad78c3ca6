#pragma once
// Rounds fitted to each node's speed, and the samples a slow node did not reach
// (docs/training.md, "A slow node"; train.epoch_quorum). Pure: no MPI, no clock, no files
// (tests/unit/test_pace.cpp).
//
// Under parallel.algorithm = outer the job's steps come in rounds of H steps, each ending in an
// outer step. A step is a tick of the job's clock: every rank counts the same steps, so the
// evaluations, checkpoints, the learning rate and the end of the run fall at the same step
// everywhere. With train.epoch_quorum = q < 1 a node n trains only the first h_n steps of a
// round and lets the rest pass without work (its learners take no batch), so that a node k
// times slower than the fastest ends its round with it instead of holding it:
//     h_n = clamp(round(H t / t_n), 1, H)    where t_n > 1.25 t, else H
// with t_n the node's seconds per trained step (the slowest of its ranks, each the mean of its
// last k_pace_window trained steps but those that ended a round with the outer step: a shared
// node's steps vary by more than 1.25x from one round to the next, and a round's few steps cut
// rounds on that noise) and t the typical node's (the lower median over the nodes): the round
// lasts as long as the typical node's,
// and a node up to 1.25 times slower than it, within what a shared node's seconds vary by,
// trains it whole. Where that trains less than q of the
// round's samples over the job (sum_n w_n h_n < q H sum_n w_n, w_n the node's ranks), the
// node of the smallest h_n / H takes one step more (the lower node first) until it does: q
// bounds what the job may leave untrained, as Project Adam's 75% did for its epochs.
//
// A node's samples are a stream: each epoch appends the sampler's list for the epoch, each
// trained step takes its batches from the front. The samples of the steps a node let pass
// stay at the front for its next epoch (carried): nothing is lost, and a node that is slow
// for good trains its stream later than the others train theirs. Nor does the run train fewer
// samples: it goes on past its planned steps until the job has trained its epochs' samples
// (step_plan.hpp, fit_end_to_samples).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace squall::train {

// A node up to this many times slower than the typical one trains whole rounds.
inline constexpr double k_pace_tolerance = 1.25;

// The trained steps whose seconds a rank's pace is the mean of (StepTimes): some 8 rounds of
// 8 steps.
inline constexpr size_t k_pace_window = 64;

// A rank's seconds per trained step: the mean of its last `window` steps, the seconds a step
// takes over a round's time, however its slow steps fall. A median is not that: a node held to
// a CPU quota that lets a round's later steps pass may start the next round with its quota
// whole, its first step fast and its second slow, and the median of such an alternation is its
// slow half (tests/unit/test_pace.cpp). Among equally fast nodes the mean also cut fewer steps
// on noise than the median had (bench/RESULTS.md, "The pace as a mean").
class StepTimes {
 public:
  explicit StepTimes(size_t window = k_pace_window) : m_window(window) {}
  void add(double seconds);
  // The mean of the steps kept; 0 before any.
  double mean() const;
  size_t size() const { return m_times.size(); }

 private:
  size_t m_window;
  std::vector<double> m_times;  // a ring of up to m_window, m_next the oldest once full
  size_t m_next = 0;
};

// The steps each node trains in a round of `round` steps: `seconds[n]` is node n's seconds per
// trained step (<= 0: not known yet, which trains the whole round), `weights[n]` its ranks.
std::vector<int64_t> fit_round_steps(const std::vector<double>& seconds, const std::vector<int64_t>& weights,
                                     int64_t round, double quorum);

// A rank's stream of sample positions: ranges [begin, end) of the sampler's list for an epoch
// (the list that starts at position `from` of the epoch's order: 0 but in the epoch an attempt
// on another shape resumed in), in the order they are trained.
struct SampleRange {
  int64_t epoch = 0;
  int64_t from = 0;
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const SampleRange&) const = default;
};

class SampleStream {
 public:
  SampleStream() = default;
  explicit SampleStream(std::vector<SampleRange> ranges) : m_ranges(std::move(ranges)) {}

  // Positions [begin, end) of `epoch`'s list at the back.
  void append(SampleRange r);
  // Drops the first `n` samples (those trained).
  void take(int64_t n);
  // Keeps the first `n` samples (those carried; the rest is the epoch's own leftover, which no
  // run trains: fewer than a step's batches).
  void keep_first(int64_t n);
  int64_t size() const;
  const std::vector<SampleRange>& ranges() const { return m_ranges; }

 private:
  std::vector<SampleRange> m_ranges;
};

}  // namespace squall::train
