// Fails on purpose, on one rank, through the project's check macros, while the other ranks
// wait in a collective. The launch tests check that the whole job ends (no hang), non-zero,
// with one line naming the call, the rank and the source location.
//   fault_probe mpi   rank 1 sends to a rank that does not exist (SQUALL_MPI_CHECK)
//   fault_probe hdf5  rank 1 opens a file that does not exist (SQUALL_H5_CHECK)
//   fault_probe check rank 1 breaks an invariant (SQUALL_CHECK)
#include <hdf5.h>
#include <mpi.h>

#include <cstring>

#include "io/h5_check.hpp"
#include "mpi/check.hpp"
#include "mpi/runtime.hpp"
#include "src/core/error.hpp"

int main(int argc, char** argv) {
  squall::mpi::Runtime runtime(argc, argv);
  const char* mode = argc > 1 ? argv[1] : "mpi";
  if (runtime.rank() == 1 || runtime.size() == 1) {
    if (std::strcmp(mode, "mpi") == 0) {
      int x = 0;
      SQUALL_MPI_CHECK(MPI_Send(&x, 1, MPI_INT, runtime.size() + 7, 0, MPI_COMM_WORLD));
    } else if (std::strcmp(mode, "hdf5") == 0) {
      H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
      SQUALL_H5_CHECK(H5Fopen("/nonexistent/squall-probe.h5", H5F_ACC_RDONLY, H5P_DEFAULT));
    } else {
      SQUALL_CHECK(runtime.size() < 0, "the probe's invariant is broken on purpose");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the healthy ranks wait here; the abort must end them
  return 0;
}
