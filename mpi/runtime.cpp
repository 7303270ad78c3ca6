#include "mpi/runtime.hpp"

#include <cstdlib>
#include <string>

#include "mpi/check.hpp"
#include "mpi/launch_env.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::mpi {

void check_failed(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  fatal(std::string(call) + " failed: " + std::string(text, static_cast<size_t>(len)), file, line);
}

void abort_job(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

Runtime::Runtime(int& argc, char**& argv) {
  // What the MPI library reads from the environment at MPI_Init (mpi/launch_env.hpp).
  const std::string launch_line = apply_mpi_launch_settings();
  // MULTIPLE: the stall watchdog's thread sends and receives on its own communicator while the
  // caller's thread is inside a collective (mpi/stall.hpp).
  SQUALL_MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &m_thread_level));
  set_abort_hook(&abort_job);
  SQUALL_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  SQUALL_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &m_rank));
  SQUALL_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &m_size));
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  SQUALL_MPI_CHECK(MPI_Get_processor_name(name, &len));
  m_host.assign(name, static_cast<size_t>(len));
  set_process_identity(m_rank, m_host);
  if (!launch_line.empty()) log::info(launch_line);
}

int Runtime::max_over_ranks(int value) const {
  int out = value;
  SQUALL_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return out;
}

int Runtime::first_rank_with(bool flag) const {
  const int mine = flag ? m_rank : m_size;
  int out = mine;
  SQUALL_MPI_CHECK(MPI_Allreduce(&mine, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return out;
}

Runtime::~Runtime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  SQUALL_MPI_CHECK(MPI_Get_library_version(text, &len));
  std::string s(text, static_cast<size_t>(len));
  // Keep the first line; some libraries count the terminating NUL in len.
  if (const auto end = s.find_first_of(std::string("\r\n\0", 3)); end != std::string::npos) s.resize(end);
  return s;
}

std::string standard_version() {
  int major = 0, minor = 0;
  SQUALL_MPI_CHECK(MPI_Get_version(&major, &minor));
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace squall::mpi
