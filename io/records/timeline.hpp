#pragma once
// Timeline: the phases of a run as Chrome trace events ("X" complete events), one process
// per rank and one track per learner or allreduce level, for Perfetto or chrome://tracing.
//
// Every rank records its own spans (thread-safe: learners record from their threads); at
// the end rank 0 gathers the ranks' events and writes one timeline.json. Times are taken on
// each rank's steady clock relative to an origin set right after a barrier, so tracks of
// ranks on one machine line up exactly and those of other machines to within the barrier's
// skew.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace squall::records {

class Timeline {
 public:
  // Track ids: 0 is the rank's own thread, 1 + j learner j, then the allreduce levels.
  static constexpr int k_rank_track = 0;
  static int learner_track(int learner) { return 1 + learner; }
  static constexpr int k_allreduce_track = 90;

  Timeline(bool enabled, size_t max_events = 2'000'000);
  bool enabled() const { return m_enabled; }
  void set_origin(double t0_s) { m_origin = t0_s; }
  // A span [t_begin, t_end] in steady-clock seconds. Past max_events spans are counted and dropped.
  void add(const char* name, int track, double t_begin, double t_end);
  size_t dropped() const;

  // This rank's events as JSON array elements (no brackets), with pid = rank and a
  // process name naming rank, host and node.
  std::string events_json(int rank, const std::string& host, int node) const;
  // {"traceEvents": [...]} from the ranks' events_json() strings.
  static std::string document(const std::vector<std::string>& rank_events);

 private:
  struct Event {
    const char* name;
    int track;
    double t0, t1;
  };
  bool m_enabled;
  size_t m_max;
  double m_origin = 0;
  mutable std::mutex m_mutex;
  std::vector<Event> m_events;
  size_t m_dropped = 0;
};

}  // namespace squall::records
