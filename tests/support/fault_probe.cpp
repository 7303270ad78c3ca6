// Fails on purpose, on one rank, through the project's check macros, while the other ranks
// wait in a collective. The launch tests check that the whole job ends (no hang), non-zero,
// with one line naming the call, the rank and the source location.
//   fault_probe mpi   rank 1 sends to a rank that does not exist (SQUALL_MPI_CHECK)
//   fault_probe hdf5  rank 1 opens a file that does not exist (SQUALL_H5_CHECK)
//   fault_probe check rank 1 breaks an invariant (SQUALL_CHECK)
// And two ways of starting sums that the sum check (mpi/sum_check.hpp) must stop:
//   fault_probe sums       rank 1 starts another sum than the others (the same size, another name)
//   fault_probe sums-stop  rank 1 stops starting sums; the others wait for it in the check
#include <hdf5.h>
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "io/formats/h5_check.hpp"
#include "mpi/allreduce.hpp"
#include "mpi/check.hpp"
#include "mpi/runtime.hpp"
#include "mpi/sum_check.hpp"
#include "mpi/topology.hpp"
#include "src/core/error.hpp"

namespace {

void start_sums(const squall::mpi::Runtime& runtime, bool stop) {
  const auto topo = squall::mpi::Topology::create(0);
  squall::mpi::AllreduceOptions o;
  o.check_sums = true;
  o.stall_warn_s = 0.5;
  o.stall_abort_s = 2;
  auto ar = squall::mpi::with_sum_check(std::make_unique<squall::mpi::HierAllreduce>(topo, o), topo.world(), o);
  std::vector<float> x(1000, 1.0f);
  ar->sum(x.data(), x.size(), "probe sum 1");
  if (runtime.rank() == 1 && stop) std::this_thread::sleep_for(std::chrono::seconds(60));
  ar->sum(x.data(), x.size(), runtime.rank() == 1 ? "probe sum 3" : "probe sum 2");
}

}  // namespace

int main(int argc, char** argv) {
  squall::mpi::Runtime runtime(argc, argv);
  const char* mode = argc > 1 ? argv[1] : "mpi";
  if (std::strncmp(mode, "sums", 4) == 0) {
    start_sums(runtime, std::strcmp(mode, "sums-stop") == 0);
    return 0;  // only a job of one rank gets here
  }
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
