// Linked instead of nccl.cpp and nccl_halo.cpp when squall is built without CUDA: there are no
// device-buffer allreduces or halo exchanges, and asking for one says why.
#include "mpi/device_allreduce.hpp"
#include "mpi/device_halo.hpp"
#include "src/core/error.hpp"

namespace squall::mpi {

std::string nccl_version() { return ""; }

std::vector<AllreduceKind> device_allreduce_kinds() { return {}; }

std::unique_ptr<DeviceAllreduce> make_device_allreduce(AllreduceKind kind, const Topology&, int,
                                                       const AllreduceOptions&) {
  throw Error(std::string(k_allreduce_kinds.name(kind)) + ": squall was built without the CUDA backend");
}

std::string device_halo_refusal(const Communicator&, int) { return "squall was built without the CUDA backend"; }

std::unique_ptr<DeviceHaloExchanger> make_device_halo_exchanger(const Communicator& group, int device, double) {
  throw Error("halos in GPU memory over NCCL: " + device_halo_refusal(group, device));
}

}  // namespace squall::mpi
