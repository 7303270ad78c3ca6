#include "io/records/timeline.hpp"

#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

namespace squall::records {

Timeline::Timeline(bool enabled, size_t max_events) : m_enabled(enabled), m_max(max_events) {}

void Timeline::add(const char* name, int track, double t_begin, double t_end) {
  if (!m_enabled) return;
  std::lock_guard lock(m_mutex);
  if (m_events.size() >= m_max) {
    ++m_dropped;
    return;
  }
  m_events.push_back({name, track, t_begin, t_end});
}

size_t Timeline::dropped() const {
  std::lock_guard lock(m_mutex);
  return m_dropped;
}

namespace {

std::string track_name(int track) {
  if (track == Timeline::k_rank_track) return "rank";
  if (track >= Timeline::k_allreduce_track) return "allreduce " + std::to_string(track - Timeline::k_allreduce_track);
  return "learner " + std::to_string(track - 1);
}

}  // namespace

std::string Timeline::events_json(int rank, const std::string& host, int node) const {
  using nlohmann::json;
  std::lock_guard lock(m_mutex);
  std::string out;
  auto append = [&](const json& j) {
    if (!out.empty()) out += ",\n";
    out += j.dump();
  };
  append({{"name", "process_name"}, {"ph", "M"}, {"pid", rank},
          {"args", {{"name", "rank " + std::to_string(rank) + " (" + host + ", node " + std::to_string(node) + ")"}}}});
  append({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  std::set<int> tracks;
  for (const auto& e : m_events) tracks.insert(e.track);
  for (int t : tracks)
    append({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", t}, {"args", {{"name", track_name(t)}}}});
  char buf[256];
  for (const auto& e : m_events) {
    // Microseconds, as the trace format wants; printed by hand: there may be millions.
    std::snprintf(buf, sizeof(buf), "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                  e.name, rank, e.track, (e.t0 - m_origin) * 1e6, (e.t1 - e.t0) * 1e6);
    out += ",\n";
    out += buf;
  }
  return out;
}

std::string Timeline::document(const std::vector<std::string>& rank_events) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (const auto& r : rank_events) {
    if (r.empty()) continue;
    if (!first) out += ",\n";
    out += r;
    first = false;
  }
  out += "\n]}\n";
  return out;
}

}  // namespace squall::records
