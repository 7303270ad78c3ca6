#pragma once
// The one place that chooses an allreduce (mpi/sum.hpp) for a job.
//
// Both the host sums and the device sums are squall_mpi's (mpi/nccl.cpp, or in a build without
// CUDA mpi/nccl_absent.cpp, which refuses them).
#include <memory>
#include <string>
#include <vector>

#include "mpi/allreduce.hpp"
#include "mpi/device_allreduce.hpp"
#include "mpi/sum.hpp"
#include "mpi/sum_check.hpp"
#include "mpi/topology.hpp"
#include "src/core/error.hpp"

namespace squall::mpi {

// The kinds this build can run: host, and the device kinds (nccl, device-hier with CUDA).
inline std::vector<AllreduceKind> allreduce_kinds() {
  std::vector<AllreduceKind> kinds{AllreduceKind::host};
  for (const AllreduceKind d : device_allreduce_kinds()) kinds.push_back(d);
  return kinds;
}

// Collective over the job (every rank passes the same kind). A job of one rank gets
// OneRankAllreduce whatever the kind; host the hierarchical allreduce of host memory; nccl
// and device-hier the device sums on GPU `device`. With options.check_sums or
// SQUALL_CHECK_SUMS=1 every sum is compared across ranks before it runs (mpi/sum_check.hpp).
// Throws squall::Error naming the kind when it cannot run here.
inline std::unique_ptr<Allreduce> make_allreduce(AllreduceKind kind, const Topology& topo, int device,
                                                 const AllreduceOptions& options = {}) {
  if (topo.world_size() == 1) return std::make_unique<OneRankAllreduce>();
  std::unique_ptr<Allreduce> made;
  if (kind == AllreduceKind::host)
    made = std::make_unique<HierAllreduce>(topo, options);
  else
    made = make_device_allreduce(kind, topo, device, options);  // its errors open with the kind
  return with_sum_check(std::move(made), topo.world(), options);
}

}  // namespace squall::mpi
