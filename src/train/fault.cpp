#include "src/train/fault.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "src/core/error.hpp"
#include "src/train/stop_signal.hpp"

namespace squall::train {

FaultInjection FaultInjection::from_env() {
  FaultInjection f;
  if (const char* hold = std::getenv("SQUALL_HOLD_AT"); hold != nullptr && *hold != '\0') {
    const std::string text(hold);
    for (size_t at = 0; at <= text.size();) {
      const size_t end = std::min(text.find(',', at), text.size());
      const std::string item = text.substr(at, end - at);
      const size_t colon = item.find(':');
      char* rest = nullptr;
      const long long step = colon == std::string::npos ? 0 : std::strtoll(item.c_str(), &rest, 10);
      if (step < 1 || rest != item.c_str() + colon || colon + 1 == item.size())
        throw UsageError("SQUALL_HOLD_AT must be STEP:FILE[,STEP:FILE...] (a step >= 1), got '" + text + "'");
      f.m_holds.emplace_back(static_cast<int64_t>(step), item.substr(colon + 1));
      at = end + 1;
    }
  }
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

SampleTrace SampleTrace::from_env(int rank, int64_t attempt) {
  SampleTrace t;
  const char* dir = std::getenv("SQUALL_TRACE_SAMPLES");
  if (dir == nullptr || *dir == '\0') return t;
  const std::string path = std::string(dir) + "/rank-" + std::to_string(rank) + ".txt";
  t.m_file.reset(std::fopen(path.c_str(), "a"));
  if (!t.m_file) throw UsageError("SQUALL_TRACE_SAMPLES: cannot write " + path);
  t.m_attempt = attempt;
  return t;
}

void SampleTrace::step(int64_t epoch, int64_t step, const std::vector<int64_t>& indices) {
  if (!m_file) return;
  std::fprintf(m_file.get(), "%lld %lld %lld", static_cast<long long>(m_attempt), static_cast<long long>(epoch),
               static_cast<long long>(step));
  for (int64_t i : indices) std::fprintf(m_file.get(), " %lld", static_cast<long long>(i));
  std::fputc('\n', m_file.get());
  std::fflush(m_file.get());
}

void FaultInjection::before_step(int rank, int64_t step) const {
  for (const auto& [at, file] : m_holds) {
    if (at != step || std::filesystem::exists(file) || stop_signal() != 0) continue;
    if (rank == 0) std::fprintf(stderr, "SQUALL_HOLD_AT: holding before step %lld until %s exists\n",
                                static_cast<long long>(step), file.c_str());
    while (!std::filesystem::exists(file) && stop_signal() == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (rank != m_rank || step != m_step) return;
  if (m_kill) ::raise(SIGKILL);
  throw Error("SQUALL_FAIL_AT: rank " + std::to_string(rank) + " fails at step " + std::to_string(step) + " on purpose");
}

}  // namespace squall::train
