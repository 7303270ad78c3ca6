#pragma once
// How a split sample's halos travel between the ranks of its group (parallel.halo_exchange),
// with the one list of their names:
//   host  through host memory over MPI (mpi/halo.hpp; a GPU's halos staged through pinned
//         buffers);
//   nccl  in GPU memory, NCCL's send and receive on the learner's buffers and stream
//         (mpi/device_halo.hpp; one GPU per rank);
//   auto  nccl where the job trains on GPUs that are each one rank's, else host.
#include "src/core/enum_table.hpp"

namespace squall::mpi {

enum class HaloKind { auto_, host, nccl };
inline constexpr auto k_halo_kinds =
    enum_table<HaloKind>({{"auto", HaloKind::auto_}, {"host", HaloKind::host}, {"nccl", HaloKind::nccl}});

}  // namespace squall::mpi
