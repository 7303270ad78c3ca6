#pragma once
// Element types on the wire, for callers outside mpi/: the plain MPI_Allreduce, free of <mpi.h>
// (the datatypes, the bf16 operation and the wait that every host sum shares are
// wire_native.hpp's, for sources in mpi/ only; both are defined in wire.cpp).
#include <cstddef>

#include "mpi/comm.hpp"
#include "mpi/sum.hpp"

namespace squall::mpi {

// Plain MPI_Allreduce (in place, sum) on `comm`: the reference and the benchmark's baseline.
void plain_allreduce_sum(const Communicator& comm, void* data, size_t count, DType type);

}  // namespace squall::mpi
