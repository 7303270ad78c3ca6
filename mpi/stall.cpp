#include "mpi/stall.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "mpi/runtime.hpp"
#include "mpi/topology.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::mpi {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int k_arrival_tag = 1;      // payload: the collective's number (int64)
constexpr int k_max_listed = 32;      // missing ranks named in one line; the rest are counted
constexpr size_t k_send_slots = 4;    // arrival messages a rank may have in flight

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// 3600 -> "3600", 60 -> "60", 1.5 -> "1.5", 3.0217 -> "3.02".
std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), s >= 100 ? "%.0f" : "%.3g", s);
  return buf;
}

template <typename T>
bool parse_number(std::string_view text, T& out) {
  if (text.empty()) return false;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

std::optional<StallFault> parse_stall_fault(const char* value) {
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::string_view text(value);
  const auto bad = [&] {
    return UsageError("SQUALL_STALL_AT must be RANK:CALL[:SECONDS] (RANK >= 0, CALL >= 1, SECONDS >= 0), got '" +
                      std::string(text) + "'");
  };
  std::vector<std::string_view> fields;
  for (size_t begin = 0;;) {
    const size_t colon = text.find(':', begin);
    fields.push_back(text.substr(begin, colon == std::string_view::npos ? colon : colon - begin));
    if (colon == std::string_view::npos) break;
    begin = colon + 1;
  }
  if (fields.size() < 2 || fields.size() > 3) throw bad();
  StallFault fault;
  if (!parse_number(fields[0], fault.rank) || fault.rank < 0) throw bad();
  if (!parse_number(fields[1], fault.call) || fault.call < 1) throw bad();
  if (fields.size() == 3 &&
      (!parse_number(fields[2], fault.seconds) || !std::isfinite(fault.seconds) || fault.seconds < 0))
    throw bad();
  return fault;
}

struct StallWatch::Impl {
  MPI_Comm comm = MPI_COMM_NULL;  // private duplicate of the world: arrival messages only
  int rank = 0, size = 1;
  double warn_s = 60, abort_s = 1800;
  double grace_s = 10;  // extra wait of non-root ranks, so that rank 0 speaks first
  double check_every_s = 0.05;
  std::optional<StallFault> fault;

  // Rank 0: who everyone is, what each rank announced last, and one posted receive per rank.
  std::vector<std::string> hosts;
  std::vector<int> nodes;
  std::vector<int64_t> arrived;
  std::vector<MPI_Request> recvs;
  std::vector<int64_t> recv_values;
  std::vector<int> done_indices;

  // Other ranks: arrival messages in flight.
  std::array<MPI_Request, k_send_slots> sends{};
  std::array<int64_t, k_send_slots> send_values{};

  // The collectives in progress on this rank, oldest first (several may be in flight: the
  // nonblocking sums of mpi/allreduce.hpp). The watch judges the oldest. Guarded by `mutex`:
  // the caller's thread enters and leaves, the watch thread reads.
  struct Active {
    int64_t call = 0;
    std::string what;
    Clock::time_point entered;
  };
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Active> active;
  bool stop = false;
  std::thread thread;

  // The watch thread's own state.
  int64_t announced = 0;  // non-root: the newest call rank 0 has been told of
  int64_t warned = 0;     // the call a warning was printed for
  bool can_message = true;  // MPI_THREAD_MULTIPLE: the watch thread may call MPI

  void loop();
  void check(const Active& oldest, int64_t newest, double waited);

  void post_receive(int source) {
    SQUALL_MPI_CHECK(MPI_Irecv(&recv_values[static_cast<size_t>(source)], 1, MPI_INT64_T, source, k_arrival_tag,
                               comm, &recvs[static_cast<size_t>(source)]));
  }

  void drain_arrivals() {
    for (;;) {
      int count = 0;
      SQUALL_MPI_CHECK(MPI_Testsome(size, recvs.data(), &count, done_indices.data(), MPI_STATUSES_IGNORE));
      if (count == MPI_UNDEFINED || count == 0) return;
      for (int i = 0; i < count; ++i) {
        const int source = done_indices[static_cast<size_t>(i)];
        auto& a = arrived[static_cast<size_t>(source)];
        a = std::max(a, recv_values[static_cast<size_t>(source)]);
        post_receive(source);
      }
    }
  }

  void announce(int64_t call) {
    // Reuse a slot whose message has gone; all are busy only if rank 0 lags several
    // collectives behind, which the collectives themselves prevent.
    size_t slot = k_send_slots;
    for (size_t i = 0; i < k_send_slots && slot == k_send_slots; ++i) {
      int done = 1;
      if (sends[i] != MPI_REQUEST_NULL) SQUALL_MPI_CHECK(MPI_Test(&sends[i], &done, MPI_STATUS_IGNORE));
      if (done) slot = i;
    }
    if (slot == k_send_slots) {
      slot = static_cast<size_t>(call) % k_send_slots;
      SQUALL_MPI_CHECK(MPI_Wait(&sends[slot], MPI_STATUS_IGNORE));
    }
    send_values[slot] = call;
    SQUALL_MPI_CHECK(MPI_Isend(&send_values[slot], 1, MPI_INT64_T, 0, k_arrival_tag, comm, &sends[slot]));
  }

  // "rank 1 (host h, node 0)" / "ranks 1, 3 (host h, node 0), 4 (host g, node 1)"
  std::string missing_ranks_text(const std::vector<int>& missing) const {
    std::string out = missing.size() == 1 ? "rank " : "ranks ";
    size_t listed = 0;
    for (size_t i = 0; i < missing.size() && listed < k_max_listed; ++i, ++listed) {
      const auto r = static_cast<size_t>(missing[i]);
      out += (i ? ", " : "") + std::to_string(r);
      const bool group_ends = i + 1 == missing.size() || listed + 1 == k_max_listed ||
                              nodes[static_cast<size_t>(missing[i + 1])] != nodes[r];
      if (group_ends) out += " (host " + hosts[r] + ", node " + std::to_string(nodes[r]) + ")";
    }
    if (listed < missing.size()) out += " and " + std::to_string(missing.size() - listed) + " more";
    return out;
  }

  // The ranks that have announced no collective as new as `call`.
  std::vector<int> not_joined(int64_t call) const {
    std::vector<int> out;
    for (int r = 0; r < size; ++r)
      if (arrived[static_cast<size_t>(r)] < call) out.push_back(r);
    return out;
  }

  // `newest`: the newest collective rank 0 has joined. A collective in flight needs every rank
  // to drive it to the end (the pipeline's chunks), so one that every rank has joined can still
  // wait for a rank that stopped after joining it, before the next one: rank 0 is in a newer
  // collective then, and the line names the ranks that have not joined that one.
  std::string root_report(int64_t call, const std::string& what, double waited, int64_t newest) {
    drain_arrivals();
    const std::vector<int> missing = not_joined(call);
    std::string msg = "stall: collective " + std::to_string(call) + " (" + what + ") waited " +
                      format_seconds(waited) + " s; ";
    if (missing.empty()) {
      msg += "every rank has joined it, but it has not completed";
      const std::vector<int> behind = newest > call ? not_joined(newest) : std::vector<int>{};
      if (!behind.empty())
        msg += "; " + missing_ranks_text(behind) + (behind.size() == 1 ? " has" : " have") +
               " not joined collective " + std::to_string(newest) + ", which rank 0 has";
    } else {
      msg += missing_ranks_text(missing) + (missing.size() == 1 ? " has" : " have") + " not joined";
    }
    return msg;
  }
};

StallWatch::StallWatch(const Topology& topo, double warn_s, double abort_s) : m_impl(std::make_unique<Impl>()) {
  Impl& s = *m_impl;
  s.fault = parse_stall_fault(std::getenv("SQUALL_STALL_AT"));  // before any collective: every rank throws alike
  s.warn_s = warn_s;
  s.abort_s = abort_s;
  s.grace_s = std::max(10.0, 0.1 * abort_s);
  s.check_every_s = std::clamp(std::min(warn_s, abort_s) / 20, 0.001, 0.05);
  SQUALL_MPI_CHECK(MPI_Comm_dup(native_handle(topo.world()), &s.comm));
  SQUALL_MPI_CHECK(MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN));
  SQUALL_MPI_CHECK(MPI_Comm_rank(s.comm, &s.rank));
  SQUALL_MPI_CHECK(MPI_Comm_size(s.comm, &s.size));
  s.sends.fill(MPI_REQUEST_NULL);

  s.hosts = topo.world().gather_strings(topo.host(), 0);
  s.nodes = topo.world().allgather(topo.node());
  if (s.rank == 0) {
    const auto n = static_cast<size_t>(s.size);
    s.arrived.assign(n, 0);
    s.recvs.assign(n, MPI_REQUEST_NULL);  // index 0 (this rank) stays null
    s.recv_values.assign(n, 0);
    s.done_indices.assign(n, 0);
    for (int r = 1; r < s.size; ++r) s.post_receive(r);
  }
  int level = MPI_THREAD_SINGLE;
  SQUALL_MPI_CHECK(MPI_Query_thread(&level));
  s.can_message = level == MPI_THREAD_MULTIPLE;
  if (s.size > 1) s.thread = std::thread([&s] { s.loop(); });
}

StallWatch::~StallWatch() {
  Impl& s = *m_impl;
  if (s.thread.joinable()) {
    {
      std::lock_guard lock(s.mutex);
      s.stop = true;
    }
    s.wake.notify_one();
    s.thread.join();
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || s.comm == MPI_COMM_NULL) return;
  // Never block here: receives are cancelled, sends (eight bytes, long delivered or matched
  // by a posted receive) are left to complete on their own.
  for (MPI_Request& r : s.recvs) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Request_free(&r);
  }
  for (MPI_Request& r : s.sends)
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  MPI_Comm_free(&s.comm);
}

// The watch thread: awake every check_every_s to judge the oldest collective in progress.
// It alone uses the private communicator.
void StallWatch::Impl::loop() {
  std::unique_lock lock(mutex);
  while (!stop) {
    // A timed sleep, not a wake-up from enter(): a collective that ends within check_every_s
    // then costs no context switch.
    wake.wait_for(lock, to_duration(check_every_s));
    if (stop || active.empty()) continue;
    const Active oldest = active.front();
    const int64_t newest = active.back().call;
    const double waited = seconds_between(oldest.entered, Clock::now());
    if (waited < check_every_s) continue;
    lock.unlock();
    check(oldest, newest, waited);
    lock.lock();
  }
}

void StallWatch::Impl::check(const Active& oldest, int64_t newest, double waited) {
  if (!can_message) {
    // No MPI from this thread: this rank speaks for itself only.
    if (waited > warn_s && warned < oldest.call) {
      warned = oldest.call;
      log::warn("stall: collective " + std::to_string(oldest.call) + " (" + oldest.what + ") waited " +
                format_seconds(waited) + " s on this rank (this MPI library offers no MPI_THREAD_MULTIPLE, so the " +
                "ranks that have not joined cannot be named)");
    }
    if (waited > abort_s) {
      log::error("stall: collective " + std::to_string(oldest.call) + " (" + oldest.what + ") waited " +
                 format_seconds(waited) + " s on this rank; ending the job (--stall-abort " + format_seconds(abort_s) +
                 " s)");
      std::_Exit(1);  // the launcher takes the job down when a rank fails
    }
    return;
  }
  if (rank == 0) {
    arrived[0] = newest;
    drain_arrivals();
    if (waited > abort_s) {
      log::error(root_report(oldest.call, oldest.what, waited, newest) + "; ending the job (--stall-abort " +
                 format_seconds(abort_s) + " s)");
      abort_job(1);
    }
    if (waited > warn_s && warned < oldest.call) {
      warned = oldest.call;
      log::warn(root_report(oldest.call, oldest.what, waited, newest));
    }
    return;
  }
  // Joining call N means having joined every call before it: announcing the newest is enough.
  if (newest > announced) {
    announce(newest);
    announced = newest;
  }
  if (waited > abort_s + grace_s) {
    log::error("stall: collective " + std::to_string(oldest.call) + " (" + oldest.what + ") waited " +
               format_seconds(waited) + " s on this rank and rank 0 did not report it (rank 0 may itself be " +
               "stuck before joining it); ending the job");
    abort_job(1);
  }
}

void StallWatch::enter(int64_t call, std::string_view what) {
  Impl& s = *m_impl;
  if (s.fault && s.fault->rank == s.rank && s.fault->call == call) {
    log::warn("SQUALL_STALL_AT: sleeping " + format_seconds(s.fault->seconds) + " s before joining collective " +
              std::to_string(call) + " (" + std::string(what) + ")");
    std::this_thread::sleep_for(std::chrono::duration<double>(s.fault->seconds));
  }
  if (s.size == 1) return;
  std::lock_guard lock(s.mutex);
  s.active.push_back({call, std::string(what), Clock::now()});
}

void StallWatch::leave(int64_t call) {
  Impl& s = *m_impl;
  if (s.size == 1) return;
  std::lock_guard lock(s.mutex);
  for (auto it = s.active.begin(); it != s.active.end(); ++it)
    if (it->call == call) {
      s.active.erase(it);
      return;
    }
}

double StallWatch::warn_seconds() const { return m_impl->warn_s; }
double StallWatch::abort_seconds() const { return m_impl->abort_s; }

}  // namespace squall::mpi
