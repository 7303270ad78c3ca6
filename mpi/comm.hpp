#pragma once
// Communicator: an owning handle on an MPI communicator with the few collectives the
// host-side code needs. The MPI_Comm lives behind a pimpl so that src/ never includes
// <mpi.h>; code in mpi/ reaches it through native_handle() in comm_native.hpp.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace squall::mpi {

class Communicator {
 public:
  struct Impl;

  static Communicator world();          // MPI_COMM_WORLD (not freed)
  Communicator();                       // an empty handle
  explicit Communicator(std::unique_ptr<Impl> impl);
  ~Communicator();
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;

  int rank() const;
  int size() const;
  bool valid() const { return m_impl != nullptr; }

  // Collective: ranks with equal color form one communicator, ordered by key.
  Communicator split(int color, int key) const;

  void barrier() const;
  std::vector<int> allgather(int value) const;
  int64_t allreduce_sum(int64_t value) const;
  int64_t allreduce_max(int64_t value) const;
  int64_t allreduce_min(int64_t value) const;
  void allreduce_sum(std::span<double> values) const;
  void allreduce_max(std::span<double> values) const;
  // Rank `root` receives every rank's string in rank order; other ranks get {}. Strings of
  // any length (moved in rounds under MPI's int counts).
  std::vector<std::string> gather_strings(const std::string& mine, int root = 0) const;
  // The reverse: rank r gets parts[r] of rank `root` (which passes one per rank; the other
  // ranks pass {}). Strings of any length.
  std::string scatter_strings(const std::vector<std::string>& parts, int root = 0) const;
  // Every rank gets root's string.
  std::string broadcast_string(const std::string& value, int root = 0) const;

  Impl& impl() const { return *m_impl; }

 private:
  std::unique_ptr<Impl> m_impl;
};

// Whether this MPI library accepts CUDA device pointers (Open MPI: MPIX_Query_cuda_support).
bool mpi_is_cuda_aware();

}  // namespace squall::mpi
