// The centre in one-sided MPI windows (window_centre.hpp).
#include "mpi/window_centre.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>

#include "mpi/async_centre.hpp"
#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"

namespace squall::mpi {

struct WindowCentre::Impl {
  size_t n = 0;
  double share = 1;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Win data = MPI_WIN_NULL, count = MPI_WIN_NULL;
  float* shard = nullptr;
  int64_t* counter = nullptr;
  int nodes = 1, node = 0;
  bool open = false;
  std::string unavailable;
  std::vector<float> base, send;
  // Per shard: its pushes when this node last took it, and as this push found them.
  std::vector<int64_t> base_total, before;
  std::vector<double> applied;

  size_t first(int s) const { return async_shard_first(n, nodes, s); }
};

WindowCentre::WindowCentre(const Communicator& world, const float* initial, size_t n, double share)
    : m_impl(std::make_unique<Impl>()) {
  Impl& m = *m_impl;
  m.n = n;
  m.share = share;
  SQUALL_MPI_CHECK(MPI_Comm_dup(native_handle(world), &m.comm));
  MPI_Comm_set_errhandler(m.comm, MPI_ERRORS_RETURN);
  MPI_Comm_size(m.comm, &m.nodes);
  MPI_Comm_rank(m.comm, &m.node);
  const size_t lo = m.first(m.node), hi = m.first(m.node + 1);
  int rc = MPI_Win_allocate(static_cast<MPI_Aint>((hi - lo) * sizeof(float)), sizeof(float), MPI_INFO_NULL, m.comm,
                            &m.shard, &m.data);
  if (rc == MPI_SUCCESS)
    rc = MPI_Win_allocate(sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, m.comm, &m.counter, &m.count);
  // Whether every rank has its windows (a component may refuse on some ranks only).
  int ok = rc == MPI_SUCCESS ? 1 : 0, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, m.comm);
  if (!all) {
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      m.unavailable = std::string(text, static_cast<size_t>(len));
    }
    m.unavailable = world.broadcast_string(m.unavailable, 0);
    if (m.unavailable.empty()) m.unavailable = "MPI_Win_allocate failed on some rank";
    // A window some ranks opened stays open: freeing it is collective over ranks that have none.
    m.data = m.count = MPI_WIN_NULL;
    return;
  }
  std::memcpy(m.shard, initial + lo, (hi - lo) * sizeof(float));
  *m.counter = 0;
  m.base.assign(initial, initial + n);
  m.base_total.assign(static_cast<size_t>(m.nodes), 0);
  m.before.assign(static_cast<size_t>(m.nodes), 0);
  m.send.assign(n, 0.0f);
  m.applied.assign(n, 0.0);
  SQUALL_MPI_CHECK(MPI_Barrier(m.comm));
  SQUALL_MPI_CHECK(MPI_Win_lock_all(0, m.data));
  SQUALL_MPI_CHECK(MPI_Win_lock_all(0, m.count));
  m.open = true;
}

WindowCentre::~WindowCentre() {
  Impl& m = *m_impl;
  if (m.open) {
    MPI_Win_unlock_all(m.count);
    MPI_Win_unlock_all(m.data);
  }
  if (m.count != MPI_WIN_NULL) MPI_Win_free(&m.count);
  if (m.data != MPI_WIN_NULL) MPI_Win_free(&m.data);
  MPI_Comm_free(&m.comm);
}

const std::string& WindowCentre::unavailable() const { return m_impl->unavailable; }

int64_t WindowCentre::push_pull(const float* model, float* out) {
  Impl& m = *m_impl;
  const int64_t one = 1;
  for (int s = 0; s < m.nodes; ++s)
    SQUALL_MPI_CHECK(MPI_Fetch_and_op(&one, &m.before[static_cast<size_t>(s)], MPI_INT64_T, s, 0, MPI_SUM, m.count));
  SQUALL_MPI_CHECK(MPI_Win_flush_all(m.count));
  int64_t most = 0;
  for (int s = 0; s < m.nodes; ++s) {
    const auto k = static_cast<size_t>(s);
    const size_t a = m.first(s), z = m.first(s + 1);
    const int64_t tau = async_staleness(m.before[k] - m.base_total[k], m.nodes);
    most = std::max(most, tau);
    const double w = m.share / (1.0 + static_cast<double>(tau));
    for (size_t i = a; i < z; ++i) {
      m.send[i] = static_cast<float>(-w * (m.base[i] - model[i]));
      m.applied[i] += static_cast<double>(m.send[i]);
    }
    SQUALL_MPI_CHECK(MPI_Accumulate(m.send.data() + a, static_cast<int>(z - a), MPI_FLOAT, s, 0,
                                    static_cast<int>(z - a), MPI_FLOAT, MPI_SUM, m.data));
  }
  SQUALL_MPI_CHECK(MPI_Win_flush_all(m.data));
  for (int s = 0; s < m.nodes; ++s) {
    const auto k = static_cast<size_t>(s);
    const size_t a = m.first(s), z = m.first(s + 1);
    SQUALL_MPI_CHECK(MPI_Get(m.base.data() + a, static_cast<int>(z - a), MPI_FLOAT, s, 0, static_cast<int>(z - a),
                             MPI_FLOAT, m.data));
    m.base_total[k] = m.before[k] + 1;
  }
  SQUALL_MPI_CHECK(MPI_Win_flush_all(m.data));
  std::copy(m.base.begin(), m.base.end(), out);
  return most;
}

void WindowCentre::finish(std::vector<float>& centre, std::vector<double>& applied) {
  Impl& m = *m_impl;
  SQUALL_MPI_CHECK(MPI_Win_unlock_all(m.count));
  SQUALL_MPI_CHECK(MPI_Win_unlock_all(m.data));
  m.open = false;
  SQUALL_MPI_CHECK(MPI_Barrier(m.comm));
  const size_t lo = m.first(m.node), hi = m.first(m.node + 1);
  std::vector<int> counts(static_cast<size_t>(m.nodes)), offsets(static_cast<size_t>(m.nodes));
  for (int s = 0; s < m.nodes; ++s) {
    offsets[static_cast<size_t>(s)] = static_cast<int>(m.first(s));
    counts[static_cast<size_t>(s)] = static_cast<int>(m.first(s + 1)) - offsets[static_cast<size_t>(s)];
  }
  // This rank's shard as the other ranks' accumulates left it: read through the window, in an
  // epoch of its own (a plain load need not see them under MPI's separate memory model).
  std::vector<float> mine(hi - lo);
  SQUALL_MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, m.node, 0, m.data));
  SQUALL_MPI_CHECK(MPI_Get(mine.data(), static_cast<int>(hi - lo), MPI_FLOAT, m.node, 0, static_cast<int>(hi - lo),
                           MPI_FLOAT, m.data));
  SQUALL_MPI_CHECK(MPI_Win_unlock(m.node, m.data));
  centre.resize(m.n);
  SQUALL_MPI_CHECK(MPI_Allgatherv(mine.data(), static_cast<int>(hi - lo), MPI_FLOAT, centre.data(), counts.data(),
                                  offsets.data(), MPI_FLOAT, m.comm));
  applied = m.applied;
  SQUALL_MPI_CHECK(
      MPI_Allreduce(MPI_IN_PLACE, applied.data(), static_cast<int>(m.n), MPI_DOUBLE, MPI_SUM, m.comm));
}

}  // namespace squall::mpi
