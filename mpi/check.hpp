#pragma once
// SQUALL_MPI_CHECK(call): on failure prints the call, its MPI error string, file, line,
// rank and host, then MPI_Abort()s the whole job. Include only from mpi/ sources.
#include <mpi.h>

namespace squall::mpi {
[[noreturn]] void check_failed(int code, const char* call, const char* file, int line);
}

#define SQUALL_MPI_CHECK(call)                                                          \
  do {                                                                                  \
    const int squall_mpi_rc_ = (call);                                                  \
    if (squall_mpi_rc_ != MPI_SUCCESS)                                                  \
      ::squall::mpi::check_failed(squall_mpi_rc_, #call, __FILE__, __LINE__);           \
  } while (0)
