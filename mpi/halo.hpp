#pragma once
// Halo exchanges over a communicator: a set of point-to-point messages started together and
// completed together, which travel while the caller computes, and the gathers the same group
// of ranks needs between them. Built for one sample split across ranks (src/parallel's
// MpiTileComm puts src/nn's tile interface over it), in MPI's own terms here: ranks of the
// communicator, tags, bytes.
//
// Progress. Open MPI moves a large message (its rendezvous protocol) only while some thread is
// inside an MPI call, so a message posted with MPI_Isend and left alone while the caller
// convolves would not travel until the caller waits. Each exchanger therefore has a progress
// thread of its own: start() hands it the messages and returns; the thread posts them
// (MPI_Irecv, then MPI_Isend) and tests them until all are done, then stamps the time. While
// nobody waits it sleeps a few microseconds between tests, so that it takes little of a core
// the caller's compute threads want; once the caller waits, it tests without sleeping. With no
// exchange in flight it sleeps on a condition variable.
//
// This needs MPI_THREAD_MULTIPLE (mpi/runtime.cpp asks for it): the progress thread's calls
// run beside the caller's (a gather, an allreduce on another communicator). Where the library
// granted less, there is no thread: start() posts the messages from the caller's thread and
// wait() completes them there (MPI_Waitall), so large messages move only inside MPI calls and
// little of the exchange hides under the caller's compute; `threaded()` says which it is.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mpi/comm.hpp"

namespace squall::mpi {

// One buffer of an exchange: sent to, or received from, rank `peer` of the exchanger's
// communicator, matched by `tag` (0 to max_tag()). The buffer is host memory and belongs to
// the exchange until its wait() returns.
struct HaloMessage {
  int peer = 0;
  int64_t tag = 0;
  void* data = nullptr;
  size_t bytes = 0;
};

// Seconds summed over every completed exchange, as the allreduce's: exposed, the caller waited
// in wait(); hidden, the messages were in flight while the caller did something else (from
// start() to the earlier of their completion and the caller's wait()).
struct HaloTotals {
  double exposed_s = 0, hidden_s = 0;
  int64_t exchanges = 0;
  double bytes_sent = 0, bytes_received = 0;
};

struct HaloOptions {
  // A progress thread when the library allows it (MPI_THREAD_MULTIPLE); false: every MPI call
  // on the caller's thread, as where the library does not (the tests run both ways).
  bool progress_thread = true;
  // How long the progress thread sleeps between tests of an exchange nobody waits for yet.
  double poll_s = 20e-6;
};

class HaloExchanger {
 public:
  class Exchange;

  // Collective over `comm`: duplicates it, so that the exchanges and gathers match no other
  // message on it. Starts the progress thread.
  explicit HaloExchanger(const Communicator& comm, HaloOptions options = {});
  // Waits for every exchange still in flight, then stops the thread and frees the duplicate.
  ~HaloExchanger();
  HaloExchanger(const HaloExchanger&) = delete;
  HaloExchanger& operator=(const HaloExchanger&) = delete;

  int rank() const;
  int size() const;
  bool threaded() const;  // messages progress on a thread of their own
  int64_t max_tag() const;  // MPI_TAG_UB of the communicator

  // Starts one exchange and returns at once. Throws squall::Error naming the message (its
  // peer and tag) when a peer is outside the communicator, a tag outside [0, max_tag()], a
  // size beyond MPI's int count, or a buffer null where it has bytes. Every rank of a pair
  // must start its exchanges with each other in the same order.
  Exchange start(const std::vector<HaloMessage>& sends, const std::vector<HaloMessage>& receives);

  // all[r * n + i] = rank r's mine[i] for every rank r (MPI_Allgather, from the caller's
  // thread; blocks until every rank has called it). Throws squall::Error when MPI fails.
  void gather(const double* mine, size_t n, double* all);

  HaloTotals totals() const;

  struct Impl;
  struct Pending;

 private:
  std::shared_ptr<Impl> m_impl;
};

// An exchange in flight. wait() returns when every receive buffer is written and every send
// buffer may be reused; it throws squall::Error naming the peer and tag of the first message
// that failed (an MPI error, or a receive whose message had another size than its buffer),
// after every other message of the exchange has completed. Destroying an exchange that was
// not waited for waits for it (an error is then logged, not thrown). Valid after the
// exchanger is gone (whose destructor completed it).
class HaloExchanger::Exchange {
 public:
  Exchange() = default;
  Exchange(std::shared_ptr<Impl> impl, std::shared_ptr<Pending> pending);
  ~Exchange();
  Exchange(Exchange&&) noexcept;
  Exchange& operator=(Exchange&&) noexcept;

  void wait();
  // Whether wait() would return at once. With a progress thread it reads what the thread
  // recorded (no MPI call); without one it tests the messages once, which also moves them.
  bool ready();
  bool active() const { return m_pending != nullptr; }

 private:
  void finish(bool throwing);

  std::shared_ptr<Impl> m_impl;
  std::shared_ptr<Pending> m_pending;
};

}  // namespace squall::mpi
