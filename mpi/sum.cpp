// The parts of the one allreduce interface (mpi/sum.hpp) that every implementation shares.
#include "mpi/sum.hpp"

#include "src/core/error.hpp"

namespace squall::mpi {

const char* level_name(Level level) {
  switch (level) {
    case Level::node_reduce_scatter: return "node_reduce_scatter";
    case Level::cross_allreduce: return "cross_allreduce";
    case Level::node_allgather: return "node_allgather";
    case Level::flat_allreduce: return "allreduce";
  }
  return "?";
}

const char* memory_name(Memory memory) { return memory == Memory::device ? "device" : "host"; }

void Allreduce::check_type(DType type) const {
  if (!takes(type))
    throw Error("the " + mode() + " allreduce does not sum " + dtype_name(type) + " elements");
}

}  // namespace squall::mpi
