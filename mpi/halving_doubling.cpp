// Recursive halving and doubling across nodes (mpi/halving_doubling.hpp).
#include "mpi/halving_doubling.hpp"

#include "mpi/check.hpp"
#include "mpi/cross_algorithm.hpp"
#include "mpi/wire_native.hpp"

namespace squall::mpi::wire {

void HalvingDoubling::begin() {
  m_q = pow2_floor(n);
  m_levels = log2_floor(n);
  m_lo_block = 0;
  m_hi_block = static_cast<size_t>(m_q);
  m_add_n = 0;
  post_from(0);
}

void HalvingDoubling::post_from(int step) {
  for (m_step = step; m_step <= 2 * m_levels + 1; ++m_step)
    if (post(m_step)) return;
  m_step = k_finished;
}

void HalvingDoubling::exchange(int peer, size_t send_lo, size_t send_n, std::byte* recv_into, size_t recv_n) {
  const MPI_Datatype t = mpi_type(type);
  m_requests[0] = m_requests[1] = MPI_REQUEST_NULL;
  if (recv_n > 0) SQUALL_MPI_CHECK(MPI_Irecv(recv_into, static_cast<int>(recv_n), t, peer, tag, comm, &m_requests[0]));
  if (send_n > 0)
    SQUALL_MPI_CHECK(MPI_Isend(data + send_lo * dtype_size(type), static_cast<int>(send_n), t, peer, tag, comm,
                               &m_requests[1]));
}

bool HalvingDoubling::post(int step) {
  const size_t esize = dtype_size(type);
  const int unfold = 2 * m_levels + 1;
  if (step == 0 || step == unfold) {  // the extras' whole part, to their partner and back
    if (!folds()) return false;
    const int peer = extra() ? me - m_q : me + m_q;
    const bool to_partner = step == 0;
    if (extra() == to_partner) {
      exchange(peer, 0, count, nullptr, 0);
    } else if (to_partner) {  // the partner adds the extra's part into its own
      if (m_incoming.size() < count * esize) m_incoming.resize(count * esize);
      exchange(peer, 0, 0, m_incoming.data(), count);
      m_add_lo = 0;
      m_add_n = count;
    } else {  // the extra takes the sum back
      exchange(peer, 0, 0, data, count);
    }
    return true;
  }
  if (extra()) return false;
  const size_t lo = block_begin(m_lo_block), hi = block_begin(m_hi_block);
  if (step <= m_levels) {  // halving: keep one half of the blocks covered, add the peer's copy of it
    const int d = m_q >> step;
    const size_t mid_block = (m_lo_block + m_hi_block) / 2;
    const size_t mid = block_begin(mid_block);
    const bool keep_low = (me & d) == 0;
    const size_t keep_lo = keep_low ? lo : mid, keep_n = keep_low ? mid - lo : hi - mid;
    const size_t send_lo = keep_low ? mid : lo, send_n = keep_low ? hi - mid : mid - lo;
    if (m_incoming.size() < keep_n * esize) m_incoming.resize(keep_n * esize);
    exchange(me ^ d, send_lo, send_n, m_incoming.data(), keep_n);
    m_add_lo = keep_lo;
    m_add_n = keep_n;
    (keep_low ? m_hi_block : m_lo_block) = mid_block;
    return true;
  }
  // doubling: send the blocks held, receive the peer's (as many, beside them)
  const int d = 1 << (step - m_levels - 1);
  const size_t width = m_hi_block - m_lo_block;
  const bool peer_above = (me & d) == 0;
  const size_t peer_lo_block = peer_above ? m_hi_block : m_lo_block - width;
  const size_t peer_lo = block_begin(peer_lo_block), peer_hi = block_begin(peer_lo_block + width);
  exchange(me ^ d, lo, hi - lo, data + peer_lo * esize, peer_hi - peer_lo);
  (peer_above ? m_hi_block : m_lo_block) = peer_above ? m_hi_block + width : peer_lo_block;
  return true;
}

void HalvingDoubling::complete() {
  if (m_add_n > 0)
    SQUALL_MPI_CHECK(MPI_Reduce_local(m_incoming.data(), data + m_add_lo * dtype_size(type), static_cast<int>(m_add_n),
                                      mpi_type(type), sum_op(type)));
  m_add_n = 0;
}

bool HalvingDoubling::advance() {
  while (!done()) {
    int arrived = 0;
    SQUALL_MPI_CHECK(MPI_Testall(2, m_requests, &arrived, MPI_STATUSES_IGNORE));
    if (!arrived) break;
    complete();
    post_from(m_step + 1);
  }
  return done();
}

}  // namespace squall::mpi::wire
