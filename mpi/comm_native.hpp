#pragma once
// The MPI side of Communicator, for sources in mpi/ only.
#include <mpi.h>

#include "mpi/comm.hpp"

namespace squall::mpi {

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;   // MPI_Comm_free on destruction (not for COMM_WORLD)
  int rank = 0;
  int size = 1;
};

inline MPI_Comm native_handle(const Communicator& c) { return c.impl().comm; }

}  // namespace squall::mpi
