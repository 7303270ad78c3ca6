#pragma once
// The sum check (docs/allreduce.md, "Checking the job's sums"): with parallel.check_sums or
// SQUALL_CHECK_SUMS=1, every sum started on the job's allreduce (and on a node's) is compared
// across ranks before it runs. A sum is collective: every rank must start the same sums (count
// and type) in the same order. A rank that starts another one is not an error MPI sees: sums
// of equal size add the wrong buffers together in silence, a blocking MPI_Allreduce of another
// size may fail with MPI_ERR_TRUNCATE far from the cause, and NCCL hangs. The check names both
// sides instead:
//
//   sum check: rank 0 started sum 7 'gradients step 3 bucket 2' (4096 f32) where rank 2
//   started sum 7 'gradients step 3 bucket 3' (4096 f32)
//
// CheckedAllreduce wraps any mpi::Allreduce (make_allreduce wraps the job's, make_node_allreduce
// a node's). At each start() every rank contributes a small fixed record (its sum's number,
// element count, type and name) to an allgather on a duplicate of the sum's communicator; only
// if every record agrees is the sum handed to the wrapped allreduce. Collectives on the
// duplicate stay matched one for one even when the sums are not, so the k-th record of every
// rank is its k-th sum. While the allgather waits, the sums already in flight are driven on
// (test()), so no rank that waits here holds back a sum the others wait in.
//
// Threads: sums are started from one thread (the rank's, which drives the learner group's
// sums); a start from another thread is a broken invariant and ends the job. The stall
// watchdog's thread talks MPI on communicators of its own and never touches this one. A
// rank that never starts the sum the others wait for here is named by nobody (it has not
// joined the wrapped sum's watchdog yet): after the stall limits the waiting ranks warn and
// then end the job themselves.
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "mpi/sum.hpp"

namespace squall::mpi {

class Communicator;

// What a mismatch does: end the job (one line from the lower rank of the pair, then
// MPI_Abort: the job is past its agreed stages, docs/design.md "Failure behaviour"), or
// throw the message as squall::Error on every rank of the communicator (tests: no sum has
// been handed over, so nothing is left in flight).
enum class OnMismatch { abort_job, throw_error };

// SQUALL_CHECK_SUMS: unset, empty or "0" is off, "1" on; anything else throws UsageError
// naming the variable.
bool sum_check_from_environment();

class CheckedAllreduce final : public Allreduce {
 public:
  // Collective over `comm`, the communicator the wrapped allreduce sums over (duplicates it).
  // `scope` names it in messages ("" for the job, "node 1"). warn_s, abort_s: how long a start
  // waits for the other ranks' records before a warning, and before the job ends.
  CheckedAllreduce(std::unique_ptr<Allreduce> inner, const Communicator& comm, std::string scope, double warn_s,
                   double abort_s, OnMismatch on_mismatch = OnMismatch::abort_job);
  ~CheckedAllreduce() override;
  CheckedAllreduce(const CheckedAllreduce&) = delete;
  CheckedAllreduce& operator=(const CheckedAllreduce&) = delete;

  using Allreduce::start;
  Ticket start(void* data, size_t count, DType type, std::string_view what, void* after_stream = nullptr) override;
  bool test(Ticket ticket) override;
  void wait(Ticket ticket) override;
  bool order_stream_after(Ticket ticket, void* stream) override { return m_inner->order_stream_after(ticket, stream); }

  int ranks() const override { return m_inner->ranks(); }
  bool takes(DType type) const override { return m_inner->takes(type); }
  Memory memory() const override { return m_inner->memory(); }
  bool orders_after_stream() const override { return m_inner->orders_after_stream(); }
  std::string mode() const override { return m_inner->mode(); }
  std::string cross_node() const override { return m_inner->cross_node(); }
  void set_level_hook(LevelHook hook) override { m_inner->set_level_hook(std::move(hook)); }
  double seconds() const override { return m_inner->seconds(); }
  double level_seconds(Level level) const override { return m_inner->level_seconds(level); }

  Allreduce& inner() { return *m_inner; }
  int64_t checked() const { return m_checked; }  // sums compared so far

 private:
  struct Impl;
  // Allgathers this start's record and compares; returns only when every rank agrees.
  void compare(size_t count, DType type, std::string_view what);

  std::unique_ptr<Allreduce> m_inner;
  std::unique_ptr<Impl> m_impl;
  int64_t m_checked = 0;
  std::set<Ticket> m_open;   // tickets handed out and not yet seen complete
  std::thread::id m_thread;  // the thread that starts sums
};

// `made` wrapped in a CheckedAllreduce when `wanted` (parallel.check_sums) or
// SQUALL_CHECK_SUMS is set on any rank of `comm`, else `made` itself. Collective over `comm`
// (one small allreduce, so that the ranks agree: a check on some ranks only would hang).
std::unique_ptr<Allreduce> with_sum_check(std::unique_ptr<Allreduce> made, const Communicator& comm,
                                          const AllreduceOptions& options, std::string scope = {});

}  // namespace squall::mpi
