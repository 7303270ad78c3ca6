#pragma once
// Stall watchdog for collectives: a collective that waits too long is reported with the ranks
// that have not joined it, and a job that would hang ends instead.
//
// Every collective a StallWatch guards gets a number N (1, 2, ...). The caller only marks where
// collectives begin and end (enter/leave, a lock and no message), so the collective itself may
// be a blocking MPI call. A watch thread wakes every few milliseconds (at most 20 times a
// second with the default limits): on a rank other than 0 it tells rank 0 of the arrival with a
// small nonblocking message on a private communicator (only for collectives that have waited
// that long, so fast ones cost no message); on rank 0 it drains these and judges the oldest
// collective in progress. The thread calls MPI, so the runtime asks for MPI_THREAD_MULTIPLE;
// without it the watch can only speak for its own rank. Past warn_s, rank 0 prints one warning line naming the collective and the
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

  // Starts collective number `call` on this rank (calls start in increasing order; several may
  // be in progress at once). `what` names it in messages.
  void enter(int64_t call, std::string_view what);
  // Collective `call` has completed on this rank.
  void leave(int64_t call);

  double warn_seconds() const;
  double abort_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace squall::mpi
