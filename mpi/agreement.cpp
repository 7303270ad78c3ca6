#include "mpi/agreement.hpp"

#include <mpi.h>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"

namespace squall::mpi {

struct FlagAgreement::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int size = 1;
  MPI_Request request = MPI_REQUEST_NULL;
  uint64_t sent = 0, result = 0;
  // exchange() with a value: its own request, posted beside the flags'.
  MPI_Request values_request = MPI_REQUEST_NULL;
  double value = 0;
  std::vector<double> values;
  bool values_posted = false;
};

FlagAgreement::FlagAgreement(const Communicator& comm) : m_impl(std::make_unique<Impl>()) {
  m_impl->size = comm.size();
  if (m_impl->size > 1) SQUALL_MPI_CHECK(MPI_Comm_dup(native_handle(comm), &m_impl->comm));
}

FlagAgreement::~FlagAgreement() {
  if (m_impl->comm == MPI_COMM_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (m_impl->request != MPI_REQUEST_NULL) MPI_Wait(&m_impl->request, MPI_STATUS_IGNORE);
  if (m_impl->values_request != MPI_REQUEST_NULL) MPI_Wait(&m_impl->values_request, MPI_STATUS_IGNORE);
  MPI_Comm_free(&m_impl->comm);
}

uint64_t FlagAgreement::drain() {
  if (m_impl->size == 1) {
    const uint64_t r = m_impl->sent;
    m_impl->sent = 0;
    return r;
  }
  if (m_impl->request == MPI_REQUEST_NULL) return 0;
  SQUALL_MPI_CHECK(MPI_Wait(&m_impl->request, MPI_STATUS_IGNORE));
  return m_impl->result;
}

uint64_t FlagAgreement::exchange(uint64_t mine) {
  std::vector<double> unused;
  const uint64_t previous = drain();
  drain_values(unused);
  m_impl->sent = mine;
  if (m_impl->size > 1)
    SQUALL_MPI_CHECK(MPI_Iallreduce(&m_impl->sent, &m_impl->result, 1, MPI_UINT64_T, MPI_BOR, m_impl->comm,
                                    &m_impl->request));
  return previous;
}

void FlagAgreement::drain_values(std::vector<double>& out) {
  out.clear();
  if (!m_impl->values_posted) return;
  m_impl->values_posted = false;
  if (m_impl->values_request != MPI_REQUEST_NULL)
    SQUALL_MPI_CHECK(MPI_Wait(&m_impl->values_request, MPI_STATUS_IGNORE));
  out = m_impl->values;
}

uint64_t FlagAgreement::exchange(uint64_t mine, double value, std::vector<double>& previous) {
  drain_values(previous);
  const uint64_t flags = exchange(mine);
  m_impl->value = value;
  m_impl->values.assign(static_cast<size_t>(m_impl->size), value);
  m_impl->values_posted = true;
  if (m_impl->size > 1)
    SQUALL_MPI_CHECK(MPI_Iallgather(&m_impl->value, 1, MPI_DOUBLE, m_impl->values.data(), 1, MPI_DOUBLE,
                                    m_impl->comm, &m_impl->values_request));
  return flags;
}

}  // namespace squall::mpi

#include <string>

#include "src/core/error.hpp"

namespace squall::mpi {

void run_agreed(const Communicator& comm, const std::function<void()>& work, const FailureWording& wording) {
  int code = 0;
  std::string message;
  try {
    work();
  } catch (const CollectiveError& e) {
    code = e.exit_code();
    message = e.what();
  } catch (const UsageError& e) {
    code = k_exit_usage;
    message = e.what();
  } catch (const std::exception& e) {
    code = k_exit_failure;
    message = e.what();
  }
  if (comm.size() == 1) {
    if (code != 0) throw CollectiveError(wording(0, 1, 1, message), code);
    return;
  }
  const int64_t first = comm.allreduce_min(code != 0 ? comm.rank() : comm.size());
  if (first == comm.size()) return;
  const int64_t failed = comm.allreduce_sum(code != 0 ? 1 : 0);
  const int agreed_code = static_cast<int>(comm.allreduce_max(code));
  message = comm.broadcast_string(message, static_cast<int>(first));
  throw CollectiveError(wording(static_cast<int>(first), static_cast<int>(failed), comm.size(), message), agreed_code);
}

void run_agreed(const Communicator& comm, const std::function<void()>& work) {
  // A failure every rank saw alike (a bad config) reads as it is; one that some ranks saw only
  // names the first of them.
  run_agreed(comm, work, [](int first, int failed, int size, const std::string& message) {
    if (failed == size) return message;
    return "rank " + std::to_string(first) + ": " + message +
           (failed > 1 ? " (and " + std::to_string(failed - 1) + " other rank(s))" : std::string());
  });
}

}  // namespace squall::mpi
