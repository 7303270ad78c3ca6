// The cross-node ring of the hierarchical allreduce (mpi/ring.hpp).
#include "mpi/ring.hpp"

#include "mpi/check.hpp"
#include "mpi/wire_native.hpp"

namespace squall::mpi::wire {

void Ring::begin() {
  step = 0;
  left = (me + n - 1) % n;
  right = (me + 1) % n;
  post_step();
}

void Ring::post_step() {
  const MPI_Datatype t = mpi_type(type);
  const size_t esize = dtype_size(type);
  const bool scatter = step < n - 1;
  // Reduce-scatter step s sends block me-s and receives block me-s-1; allgather step s
  // sends block me+1-s and receives block me-s (indices mod n).
  const int s = scatter ? step : step - (n - 1);
  const int send_block = ((scatter ? me - s : me + 1 - s) % n + n) % n;
  const int recv_block = ((scatter ? me - s - 1 : me - s) % n + n) % n;
  const size_t send_lo = block_begin(send_block), send_n = block_begin(send_block + 1) - send_lo;
  const size_t recv_lo = block_begin(recv_block), recv_n = block_begin(recv_block + 1) - recv_lo;
  std::byte* into = data + recv_lo * esize;
  if (scatter) {
    if (incoming.size() < recv_n * esize) incoming.resize(recv_n * esize);
    into = incoming.data();
  }
  SQUALL_MPI_CHECK(MPI_Irecv(into, static_cast<int>(recv_n), t, left, tag, comm, &requests[0]));
  SQUALL_MPI_CHECK(MPI_Isend(data + send_lo * esize, static_cast<int>(send_n), t, right, tag, comm, &requests[1]));
}

bool Ring::advance() {
  while (!done()) {
    int arrived = 0;
    SQUALL_MPI_CHECK(MPI_Testall(2, requests, &arrived, MPI_STATUSES_IGNORE));
    if (!arrived) break;
    if (step < n - 1) {  // add the received block into ours
      const int b = ((me - step - 1) % n + n) % n;
      const size_t lo = block_begin(b), len = block_begin(b + 1) - lo;
      if (len > 0)
        SQUALL_MPI_CHECK(MPI_Reduce_local(incoming.data(), data + lo * dtype_size(type), static_cast<int>(len),
                                          mpi_type(type), sum_op(type)));
    }
    if (++step < 2 * (n - 1)) post_step();
  }
  return done();
}

}  // namespace squall::mpi::wire
