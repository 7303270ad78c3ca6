#pragma once
// Owns MPI for the life of the process: MPI_Init_thread in the constructor (after the launch
// settings of mpi/launch_env.hpp, which the MPI library reads at MPI_Init), MPI_Finalize
// in the destructor. Installs the abort hook (fatal() -> MPI_Abort on COMM_WORLD) and
// sets MPI_ERRORS_RETURN so that SQUALL_MPI_CHECK reports failures with context.
// A plain `squall ...` without mpirun is an MPI singleton: a job of one rank.
#include <string>

namespace squall::mpi {

class Runtime {
 public:
  Runtime(int& argc, char**& argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return m_rank; }
  int size() const { return m_size; }
  const std::string& host() const { return m_host; }
  int thread_level() const { return m_thread_level; }  // MPI_THREAD_* granted
  // Collective over every rank: the largest `value`, and the lowest rank whose `flag` is set
  // (size() when none is): for agreeing on how the command line parsed.
  int max_over_ranks(int value) const;
  int first_rank_with(bool flag) const;

 private:
  int m_rank = 0;
  int m_size = 1;
  int m_thread_level = 0;
  std::string m_host;
};

// Takes the whole job down from any rank with this exit code (MPI_Abort).
[[noreturn]] void abort_job(int exit_code);

// "Open MPI v4.1.4, ..." — the first line of MPI_Get_library_version.
std::string library_version();
// "3.1" — the MPI standard version.
std::string standard_version();

}  // namespace squall::mpi
