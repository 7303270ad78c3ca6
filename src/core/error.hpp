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
