#include "mpi/comm.hpp"
#include "mpi/device_allreduce.hpp"

#include <algorithm>
#include <numeric>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support
#endif

namespace squall::mpi {
namespace {

std::unique_ptr<Communicator::Impl> make_impl(MPI_Comm comm, bool owned) {
  auto impl = std::make_unique<Communicator::Impl>();
  impl->comm = comm;
  impl->owned = owned;
  SQUALL_MPI_CHECK(MPI_Comm_rank(comm, &impl->rank));
  SQUALL_MPI_CHECK(MPI_Comm_size(comm, &impl->size));
  return impl;
}

int64_t allreduce_i64(MPI_Comm comm, int64_t value, MPI_Op op) {
  int64_t out = 0;
  SQUALL_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, op, comm));
  return out;
}

}  // namespace

Communicator Communicator::world() { return Communicator(make_impl(MPI_COMM_WORLD, false)); }

Communicator::Communicator() = default;
Communicator::Communicator(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

Communicator::~Communicator() {
  if (m_impl && m_impl->owned && m_impl->comm != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&m_impl->comm);  // destructors never throw or abort
  }
}

int Communicator::rank() const { return m_impl->rank; }
int Communicator::size() const { return m_impl->size; }

Communicator Communicator::split(int color, int key) const {
  MPI_Comm out = MPI_COMM_NULL;
  SQUALL_MPI_CHECK(MPI_Comm_split(m_impl->comm, color, key, &out));
  SQUALL_MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return Communicator(make_impl(out, true));
}

void Communicator::barrier() const { SQUALL_MPI_CHECK(MPI_Barrier(m_impl->comm)); }

std::vector<int> Communicator::allgather(int value) const {
  std::vector<int> out(static_cast<size_t>(m_impl->size));
  SQUALL_MPI_CHECK(MPI_Allgather(&value, 1, MPI_INT, out.data(), 1, MPI_INT, m_impl->comm));
  return out;
}

int64_t Communicator::allreduce_sum(int64_t v) const { return allreduce_i64(m_impl->comm, v, MPI_SUM); }
int64_t Communicator::allreduce_max(int64_t v) const { return allreduce_i64(m_impl->comm, v, MPI_MAX); }
int64_t Communicator::allreduce_min(int64_t v) const { return allreduce_i64(m_impl->comm, v, MPI_MIN); }

void Communicator::allreduce_sum(std::span<double> values) const {
  if (values.empty()) return;
  SQUALL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()),
                                 MPI_DOUBLE, MPI_SUM, m_impl->comm));
}

void Communicator::allreduce_max(std::span<double> values) const {
  if (values.empty()) return;
  SQUALL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()),
                                 MPI_DOUBLE, MPI_MAX, m_impl->comm));
}

std::vector<std::string> Communicator::gather_strings(const std::string& mine, int root) const {
  const int n = m_impl->size;
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  SQUALL_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, m_impl->comm));
  std::string all;
  if (m_impl->rank == root) {
    std::exclusive_scan(lens.begin(), lens.end(), displs.begin(), 0);
    all.resize(static_cast<size_t>(displs.back() + lens.back()));
  }
  SQUALL_MPI_CHECK(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(),
                               MPI_CHAR, root, m_impl->comm));
  std::vector<std::string> out;
  if (m_impl->rank == root) {
    for (int r = 0; r < n; ++r) out.push_back(all.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(lens[r])));
  }
  return out;
}

bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;  // the library says nothing about CUDA: treat device pointers as unsupported
#endif
}

std::string Communicator::broadcast_string(const std::string& value, int root) const {
  // 64-bit length and 1 GiB pieces: a checkpoint's model broadcast may pass MPI's int counts.
  uint64_t len = value.size();
  SQUALL_MPI_CHECK(MPI_Bcast(&len, 1, MPI_UINT64_T, root, m_impl->comm));
  std::string out = m_impl->rank == root ? value : std::string(static_cast<size_t>(len), '\0');
  constexpr uint64_t k_piece = uint64_t{1} << 30;
  for (uint64_t at = 0; at < len; at += k_piece) {
    const int n = static_cast<int>(std::min(k_piece, len - at));
    SQUALL_MPI_CHECK(MPI_Bcast(out.data() + at, n, MPI_CHAR, root, m_impl->comm));
  }
  return out;
}

}  // namespace squall::mpi
