#pragma once
// A backend whose events look complete to the host in the wrong order (tests of ssgd's
// gradient buckets: tests/unit/test_bucket_order.cpp, tests/mpi/test_sum_check.cpp).
//
// The asynchronous CPU backend, with ready() answering later events first: an event is said
// not to be complete, although it is, while some event recorded after it on the same stream
// has not been reported complete yet (for at most `held_polls` polls of it, so that a host
// that keeps asking gets its answer); an event with no such later one is waited for and
// reported complete. So a host that polls bucket k's event and then bucket k+1's, with both
// recorded, is told every time, not by a race, that k+1 is done and k is not.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "src/cpu/cpu_backend.hpp"

namespace squall::test {

class OutOfOrderBackend final : public cpu::CpuBackend {
 public:
  explicit OutOfOrderBackend(int threads, int held_polls = 200)
      : cpu::CpuBackend(cpu::CpuBackendOptions{threads, true, std::nullopt}), m_held_polls(held_polls) {}

  std::unique_ptr<nn::Stream> create_stream() override {
    auto s = cpu::CpuBackend::create_stream();
    std::lock_guard lock(m_mutex);
    m_created.push_back(s.get());
    return s;
  }

  void record(nn::Event& e, nn::Stream& s) override {
    cpu::CpuBackend::record(e, s);
    std::lock_guard lock(m_mutex);
    // e's place is its latest record: it leaves the list of wherever it was recorded before.
    if (auto it = m_stream_of.find(&e); it != m_stream_of.end()) {
      auto& old = m_recorded[it->second];
      old.erase(std::remove(old.begin(), old.end(), &e), old.end());
    }
    m_stream_of[&e] = &s;
    m_recorded[&s].push_back(&e);
    m_reported[&e] = false;
    m_polls[&e] = 0;
  }

  bool ready(nn::Event& e) override {
    {
      std::lock_guard lock(m_mutex);
      const auto it = m_stream_of.find(&e);
      if (it == m_stream_of.end()) return cpu::CpuBackend::ready(e);
      const auto& list = m_recorded[it->second];
      const auto at = std::find(list.begin(), list.end(), &e);
      const bool later_unreported =
          std::any_of(at + 1, list.end(), [&](nn::Event* later) { return !m_reported[later]; });
      if (later_unreported && ++m_polls[&e] < m_held_polls) {
        ++m_held[it->second];
        return false;
      }
    }
    // Not under the lock: the host threads that record go on meanwhile.
    cpu::CpuBackend::synchronize(e);
    std::lock_guard lock(m_mutex);
    m_reported[&e] = true;
    return true;
  }

  // How often ready() has said "not yet" of a complete event recorded on the n-th stream this
  // backend made (0: the first).
  int64_t held_on_stream(size_t n) {
    std::lock_guard lock(m_mutex);
    return n < m_created.size() ? m_held[m_created[n]] : 0;
  }

 private:
  int m_held_polls;
  std::mutex m_mutex;
  std::vector<nn::Stream*> m_created;
  std::map<nn::Event*, nn::Stream*> m_stream_of;
  std::map<nn::Stream*, std::vector<nn::Event*>> m_recorded;  // by their latest record, oldest first
  std::map<nn::Event*, bool> m_reported;                       // since its latest record
  std::map<nn::Event*, int> m_polls;
  std::map<nn::Stream*, int64_t> m_held;
};

}  // namespace squall::test
