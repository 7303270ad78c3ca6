#pragma once
// Two kinds of failure, handled differently:
//  - squall::Error (and UsageError): bad input a user can fix (a flag, a config key, a
//    corrupt file). Thrown, caught at the top, reported with a message that names the
//    thing; UsageError exits 2.
//  - fatal(): a broken invariant or a failed library call (MPI, CUDA, HDF5, ...). Prints
//    one line naming the call, source location, rank and host, then takes the whole job
//    down through the abort hook (MPI_Abort once MPI is up), never a one-rank exit().
#include <stdexcept>
#include <string>
#include <string_view>

namespace squall {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad command-line flag or value: the process exits with status 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A failure that every rank of the job throws alike, at the same point, with the same message
// (the ranks agreed on it through a collective: a usage error one rank found, a checkpoint
// that could not be written, a stop on a signal). The top level prints it once (rank 0) and
// every rank exits with `exit_code()`, without MPI_Abort: nobody is left waiting.
class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& what, int exit_code) : Error(what), m_exit_code(exit_code) {}
  int exit_code() const { return m_exit_code; }

 private:
  int m_exit_code;
};

// Exit statuses (docs/training.md, "Exit status"): scripts depend on them.
constexpr int k_exit_failure = 1;      // a failure at run time
constexpr int k_exit_usage = 2;        // a usage error: a flag, key, file or value to fix
constexpr int k_exit_requeue = 75;     // stopped on SIGTERM/SIGUSR1 after writing a checkpoint:
                                       // requeue the job with --resume auto (sysexits' EX_TEMPFAIL)

// Called by fatal() after the message is printed; must not return.
using AbortHook = void (*)(int exit_code);
void set_abort_hook(AbortHook hook);

// Who this process is, for error lines. Set by the MPI runtime once it is up.
void set_process_identity(int rank, std::string host);
int process_rank();               // -1 before MPI is up
const std::string& process_host();

// One line "squall: fatal: rank R on HOST: WHAT (FILE:LINE)" to stderr, then abort the job.
[[noreturn]] void fatal(std::string_view what, const char* file, int line);

}  // namespace squall

// Invariant check that stays on in release builds (unlike assert).
#define SQUALL_CHECK(cond, msg)                                                          \
  do {                                                                                   \
    if (!(cond)) ::squall::fatal(std::string("check failed: " #cond ": ") + (msg),       \
                                 __FILE__, __LINE__);                                    \
  } while (0)
