// Catch2 main for tests that run under mpiexec. Every rank runs every case; rank 0 reports
// in full, other ranks only their failures. The exit status is the OR over ranks, so a
// case that fails on one rank fails the test on all of them (and mpiexec never sees a mix
// of passing and failing ranks). A run in which nothing failed and some rank skipped a case
// (SQUALL_SKIP, support/skip.hpp) exits 77 on every rank: CTest reports it as skipped. Rank 0
// starts with the line that names oneDNN's ISA and the bf16 path (support/cpu_path.hpp).
#include <mpi.h>

#include <cstdio>

#include "mpi/runtime.hpp"
#include "tests/support/catch_session.hpp"
#include "tests/support/cpu_path.hpp"
#include "tests/support/skip.hpp"

int main(int argc, char** argv) {
  squall::test::uncapped_isa();  // a child process where ONEDNN_MAX_CPU_ISA is set: before MPI starts
  squall::mpi::Runtime runtime(argc, argv);
  if (const int rc = squall::test::catch_parse(argc, argv); rc != 0) return rc;
  if (runtime.rank() != 0) squall::test::catch_use_reporter("compact");
  else if (!squall::test::catch_lists()) std::printf("squall tests on %s\n", squall::test::cpu_path().c_str());
  int failed = squall::test::catch_run() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed && runtime.rank() == 0) std::fprintf(stderr, "mpi test: a case failed on at least one rank\n");
  int skipped = squall::test::skip_count() > 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &skipped, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!failed && skipped) return squall::test::k_skip_exit_code;
  return failed;
}
