#pragma once
// Stall watchdog for collectives: a collective that waits too long is reported with the ranks
// that have not joined it, and a job that would hang ends instead.
//
// Every collective a StallWatch guards gets a number N (1, 2, ...). On entering it, every rank
// tells rank 0 with a small nonblocking message on a private communicator; rank 0 drains these
// while it waits. Past warn_s, rank 0 prints one warning line naming the collective and the
// ranks that have not arrived; past abort_s it prints the same as an error and ends the job
// (abort_job(1)). A non-root rank that waits past abort_s plus a grace ends the job itself,
// saying that rank 0 did not report (rank 0 is then the one that is stuck).
//
// Fault hook for tests: SQUALL_STALL_AT=RANK:CALL[:SECONDS] makes world rank RANK sleep
// SECONDS (default 3600) before joining collective CALL.
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace squall::mpi {

class Topology;

struct StallFault {
  int rank = 0;          // world rank that sleeps
  int64_t call = 1;      // before joining this collective (1-based)
  double seconds = 3600;
};

// Parses a SQUALL_STALL_AT value; empty or null is no fault. Throws UsageError naming the
// variable when the value is malformed.
std::optional<StallFault> parse_stall_fault(const char* value);

class StallWatch {
 public:
  // Collective over the world communicator: duplicates it and learns every rank's host and
  // node (for the messages). Reads SQUALL_STALL_AT.
  StallWatch(const Topology& topo, double warn_s, double abort_s);
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // Starts collective number `call` on this rank (announces it to rank 0). `what` names it in
  // messages; it must stay valid until leave().
  void enter(int64_t call, std::string_view what);
  // Called while the collective waits: drains arrivals (rank 0) and warns or ends the job when
  // the wait is overdue. Cheap: the real work happens at most every few milliseconds.
  void poll();
  void leave();

  double warn_seconds() const;
  double abort_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace squall::mpi
