#pragma once
// Which allreduce sums a job's gradients and models (parallel.device_allreduce), with the one
// list of their names: host, the hierarchical allreduce of host memory (mpi/allreduce.hpp);
// nccl and device-hier, the device sums of a CUDA build (mpi/device_allreduce.hpp).
#include "src/core/enum_table.hpp"

namespace squall::mpi {

enum class AllreduceKind { host, nccl, device_hier };
inline constexpr auto k_allreduce_kinds = enum_table<AllreduceKind>(
    {{"host", AllreduceKind::host}, {"nccl", AllreduceKind::nccl}, {"device-hier", AllreduceKind::device_hier}});

}  // namespace squall::mpi
