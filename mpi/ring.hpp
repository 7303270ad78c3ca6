#pragma once
// One of the cross-node stage's algorithms (for sources in mpi/ only; the other is
// mpi/halving_doubling.hpp, the choice mpi/cross_algorithm.hpp's): a ring allreduce of one
// part of a chunk among the part's owners, one per node, by point-to-point messages. The part is cut into n blocks; in n-1 reduce-scatter steps each rank sends one
// block to its right neighbour and adds the block it receives from its left one, then in n-1
// allgather steps the summed blocks travel once round the ring. Each rank sends 2(n-1)/n of
// the part, the least an allreduce can, and every step moves data in both directions of every
// link at once. (Open MPI's nonblocking MPI_Iallreduce on two ranks is a reduce then a
// broadcast: twice the time on a link, bench/RESULTS.md.) Its 2(n-1) steps are each a
// message's latency, which is what halving-doubling saves on many nodes.
#include <mpi.h>

#include <cstddef>
#include <vector>

#include "mpi/sum.hpp"

namespace squall::mpi::wire {

struct Ring {
  MPI_Comm comm = MPI_COMM_NULL;
  int me = 0, n = 1, left = 0, right = 0;
  std::byte* data = nullptr;  // the part, in the shard
  size_t count = 0;           // elements
  DType type = DType::f32;
  int tag = 0;                // of its messages
  int step = 0;               // 0 .. 2(n-1); 2(n-1) is done
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::vector<std::byte> incoming;  // a reduce-scatter step's received block

  size_t block_begin(int b) const { return static_cast<size_t>(b) * count / static_cast<size_t>(n); }
  bool done() const { return step == 2 * (n - 1); }

  // Starts the ring from step 0 (comm, me, n, data, count, type and tag set).
  void begin();
  // Moves the ring on as far as its messages allow; true when it is done.
  bool advance();

 private:
  void post_step();  // receive from the left, send to the right
};

}  // namespace squall::mpi::wire
