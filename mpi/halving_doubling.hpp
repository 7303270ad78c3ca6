#pragma once
// The cross-node stage's other algorithm (for sources in mpi/ only): an allreduce of one part
// of a chunk among its n owners, one per node, by recursive halving then recursive doubling
// (Rabenseifner), whose latency grows with log2(n) where the ring's (mpi/ring.hpp) grows with
// n. Costs and the choice between the two: mpi/cross_algorithm.hpp; docs/allreduce.md,
// "The cross-node stage".
//
// Let q be the largest power of two <= n and r = n - q. The owners q .. n-1 (the extras)
// first hand their whole part to owner (me - q) and drop out; the q others, at virtual rank
// v = me, cut the part into q balanced blocks and
//   - reduce-scatter by recursive halving: at distance d = q/2, q/4, ..., 1 each exchanges
//     half of the blocks it still covers with v ^ d (keeping the lower half when its bit d is
//     clear), adding what it receives, until it holds the sum of block v;
//   - allgather by recursive doubling: at distance d = 1, 2, ..., q/2 it sends the blocks it
//     holds to v ^ d and receives that rank's, until it holds every block;
// and owners 0 .. r-1 finally send the whole sum back to their extra. Each block is summed on
// one rank and copied to the others, so every owner ends with the same bits. A message of no
// elements is neither sent nor received (both ends see the same empty range).
//
// Like the ring it is a state machine: begin() posts the first step, advance() moves it on as
// far as its messages allow without blocking, so that the pipeline's progress loop drives
// many parts of many chunks at once. All its messages share one tag and communicator; MPI's
// ordering of messages between one pair of ranks keeps successive steps apart.
#include <mpi.h>

#include <cstddef>
#include <vector>

#include "mpi/sum.hpp"

namespace squall::mpi::wire {

class HalvingDoubling {
 public:
  MPI_Comm comm = MPI_COMM_NULL;
  int me = 0, n = 1;
  std::byte* data = nullptr;  // the part, in the shard
  size_t count = 0;           // elements
  DType type = DType::f32;
  int tag = 0;                // of its messages

  // Starts from the first step (comm, me, n, data, count, type and tag set).
  void begin();
  // Moves on as far as the messages allow; true when done.
  bool advance();
  bool done() const { return m_step == k_finished; }

 private:
  static constexpr int k_finished = -1;
  // Steps: 0 fold (extras hand their part over), 1 .. L halving, L+1 .. 2L doubling,
  // 2L+1 unfold (the sum back to the extras); a rank posts only the steps it takes part in.
  int m_q = 1, m_levels = 0;
  int m_step = k_finished;
  MPI_Request m_requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::vector<std::byte> m_incoming;  // what a fold or halving step adds in
  size_t m_add_lo = 0, m_add_n = 0;   // ... and where (elements of the part); m_add_n = 0: nothing to add
  size_t m_lo_block = 0, m_hi_block = 0;  // the blocks this rank covers: [lo, hi) of q

  size_t block_begin(size_t b) const { return b * count / static_cast<size_t>(m_q); }
  bool extra() const { return me >= m_q; }
  bool folds() const { return n != m_q && (extra() || me < n - m_q); }
  // Posts the first step from `step` on that this rank takes part in; done() when none is left.
  void post_from(int step);
  // Posts step `step` if this rank takes part in it; false when it does not (nothing posted).
  bool post(int step);
  void exchange(int peer, size_t send_lo, size_t send_n, std::byte* recv_into, size_t recv_n);
  // Finishes the step whose messages have arrived (adds what it received).
  void complete();
};

}  // namespace squall::mpi::wire
