#include "src/train/fault.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "src/core/error.hpp"

namespace squall::train {

FaultInjection FaultInjection::from_env() {
  FaultInjection f;
  const char* env = std::getenv("SQUALL_FAIL_AT");
  if (env == nullptr || *env == '\0') return f;
  int rank = -1;
  long long step = -1;
  char mode[8] = {};
  const int got = std::sscanf(env, "%d:%lld:%7s", &rank, &step, mode);
  const std::string m(mode);
  if (got < 2 || rank < 0 || step < 1 || (got == 3 && m != "kill"))
    throw UsageError(std::string("SQUALL_FAIL_AT must be RANK:STEP or RANK:STEP:kill (a rank >= 0 and a step >= 1), "
                                 "got '") +
                     env + "'");
  f.m_rank = rank;
  f.m_step = static_cast<int64_t>(step);
  f.m_kill = m == "kill";
  return f;
}

void FaultInjection::before_step(int rank, int64_t step) const {
  if (rank != m_rank || step != m_step) return;
  if (m_kill) ::raise(SIGKILL);
  throw Error("SQUALL_FAIL_AT: rank " + std::to_string(rank) + " fails at step " + std::to_string(step) + " on purpose");
}

}  // namespace squall::train
