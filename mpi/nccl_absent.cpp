// Linked instead of nccl.cpp when squall is built without CUDA: there are no device-buffer
// allreduces, and asking for one says why.
#include "mpi/device_allreduce.hpp"
#include "src/core/error.hpp"

namespace squall::mpi {

std::string nccl_version() { return ""; }

std::vector<AllreduceKind> device_allreduce_kinds() { return {}; }

std::unique_ptr<DeviceAllreduce> make_device_allreduce(AllreduceKind kind, const Topology&, int,
                                                       const AllreduceOptions&) {
  throw Error(std::string(k_allreduce_kinds.name(kind)) + ": squall was built without the CUDA backend");
}

}  // namespace squall::mpi
