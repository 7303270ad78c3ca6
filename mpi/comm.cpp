#include "mpi/comm.hpp"

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

namespace {

// Strings of any length between one root and every rank, moved in rounds: each round carries
// at most k_round bytes in all (so that MPI's int counts and displacements hold) and at most
// k_round / n of each rank's string. Used by gather_strings and scatter_strings, which move
// checkpoint parts of hundreds of MB from every rank of a node.
constexpr uint64_t k_round = uint64_t{1} << 30;

uint64_t round_share(int n) { return std::max<uint64_t>(1, k_round / static_cast<uint64_t>(n)); }

// The count and displacement of each rank's slice in round `at` (the byte offset into every
// string), given every string's length; returns the round's total.
int round_layout(const std::vector<uint64_t>& lens, uint64_t at, uint64_t share, std::vector<int>& counts,
                 std::vector<int>& displs) {
  int total = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    counts[r] = static_cast<int>(lens[r] > at ? std::min(share, lens[r] - at) : 0);
    displs[r] = total;
    total += counts[r];
  }
  return total;
}

}  // namespace

std::vector<std::string> Communicator::gather_strings(const std::string& mine, int root) const {
  const int n = m_impl->size;
  const bool is_root = m_impl->rank == root;
  uint64_t len = mine.size();
  std::vector<uint64_t> lens(static_cast<size_t>(n));
  SQUALL_MPI_CHECK(MPI_Gather(&len, 1, MPI_UINT64_T, lens.data(), 1, MPI_UINT64_T, root, m_impl->comm));
  uint64_t longest = 0;
  if (is_root) longest = *std::max_element(lens.begin(), lens.end());
  SQUALL_MPI_CHECK(MPI_Bcast(&longest, 1, MPI_UINT64_T, root, m_impl->comm));
  std::vector<std::string> out;
  if (is_root)
    for (const uint64_t l : lens) out.emplace_back(static_cast<size_t>(l), '\0');
  const uint64_t share = round_share(n);
  std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  std::string buffer;
  // One round at least, so that every rank takes part even when every string is empty.
  for (uint64_t at = 0; at == 0 || at < longest; at += share) {
    const int send = static_cast<int>(len > at ? std::min(share, len - at) : 0);
    if (is_root) buffer.resize(static_cast<size_t>(round_layout(lens, at, share, counts, displs)));
    SQUALL_MPI_CHECK(MPI_Gatherv(mine.data() + std::min(at, len), send, MPI_CHAR, buffer.data(), counts.data(),
                                 displs.data(), MPI_CHAR, root, m_impl->comm));
    if (is_root)
      for (int r = 0; r < n; ++r)
        std::copy_n(buffer.data() + displs[static_cast<size_t>(r)], counts[static_cast<size_t>(r)],
                    out[static_cast<size_t>(r)].data() + at);
  }
  return out;
}

std::string Communicator::scatter_strings(const std::vector<std::string>& parts, int root) const {
  const int n = m_impl->size;
  const bool is_root = m_impl->rank == root;
  SQUALL_CHECK(!is_root || static_cast<int>(parts.size()) == n, "scatter_strings: the root needs one string per rank");
  std::vector<uint64_t> lens(static_cast<size_t>(n));
  if (is_root)
    for (int r = 0; r < n; ++r) lens[static_cast<size_t>(r)] = parts[static_cast<size_t>(r)].size();
  uint64_t len = 0;
  SQUALL_MPI_CHECK(MPI_Scatter(lens.data(), 1, MPI_UINT64_T, &len, 1, MPI_UINT64_T, root, m_impl->comm));
  uint64_t longest = is_root ? *std::max_element(lens.begin(), lens.end()) : 0;
  SQUALL_MPI_CHECK(MPI_Bcast(&longest, 1, MPI_UINT64_T, root, m_impl->comm));
  std::string mine(static_cast<size_t>(len), '\0');
  const uint64_t share = round_share(n);
  std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  std::string buffer;
  for (uint64_t at = 0; at == 0 || at < longest; at += share) {
    if (is_root) {
      buffer.resize(static_cast<size_t>(round_layout(lens, at, share, counts, displs)));
      for (int r = 0; r < n; ++r)
        std::copy_n(parts[static_cast<size_t>(r)].data() + std::min<uint64_t>(at, lens[static_cast<size_t>(r)]),
                    counts[static_cast<size_t>(r)], buffer.data() + displs[static_cast<size_t>(r)]);
    }
    const int receive = static_cast<int>(len > at ? std::min(share, len - at) : 0);
    SQUALL_MPI_CHECK(MPI_Scatterv(buffer.data(), counts.data(), displs.data(), MPI_CHAR, mine.data() + std::min(at, len),
                                  receive, MPI_CHAR, root, m_impl->comm));
  }
  return mine;
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
