#pragma once
// Faults on purpose, for the tests of failure and restart (docs/training.md, "Checkpoints and
// restart"): SQUALL_FAIL_AT=RANK:STEP[:kill] makes that rank fail as it starts that step (1 is
// the first), with an error or killed by SIGKILL (what a crashed node looks like to the others).
// The stalled collective of the watchdog's tests is mpi/stall.hpp's SQUALL_STALL_AT. Unset, it
// costs one comparison a step.
// SQUALL_HOLD_AT=STEP:FILE[,STEP:FILE...] makes every rank wait before that step until FILE
// exists or a stop signal arrives (rank 0 says so once), so that a test acts on a running job
// at a known step (loses a node, signals it) however fast the machine is, and then lets it go.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace squall::train {

// SQUALL_TRACE_SAMPLES=DIR: each rank writes a line per step it trained to DIR/rank-R.txt,
// "ATTEMPT EPOCH STEP INDEX...", the global indices of the samples its learners took, so that a
// test counts what every rank trained (train.epoch_quorum's carried samples, across a resume).
class SampleTrace {
 public:
  static SampleTrace from_env(int rank, int64_t attempt);  // a folder that cannot be written: UsageError
  bool on() const { return m_file != nullptr; }
  void step(int64_t epoch, int64_t step, const std::vector<int64_t>& indices);

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> m_file;
  int64_t m_attempt = 1;
};

class FaultInjection {
 public:
  // From SQUALL_FAIL_AT and SQUALL_HOLD_AT; a malformed value is a UsageError quoting it.
  static FaultInjection from_env();

  // Called by rank `rank` before step `step` (1-based): holds, then fails there, when asked to.
  void before_step(int rank, int64_t step) const;

 private:
  int m_rank = -1;  // -1: no fault
  int64_t m_step = 0;
  bool m_kill = false;
  std::vector<std::pair<int64_t, std::string>> m_holds;  // SQUALL_HOLD_AT: (step, file)
};

}  // namespace squall::train
