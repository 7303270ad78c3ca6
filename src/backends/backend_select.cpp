// run.backend: which Backend a rank trains on, and which GPU (docs/design.md, "Backends").
#include <string>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"

namespace squall::nn {

std::unique_ptr<Backend> make_backend(BackendKind kind, int local_rank, int threads, CpuStreams cpu_streams) {
  const CpuBackendOptions cpu{threads, cpu_streams == CpuStreams::async};
  if (kind == BackendKind::cpu) return make_cpu_backend(cpu);
  std::string why;
  const int devices = cuda_device_count(&why);
  if (devices == 0) {
    if (kind == BackendKind::auto_) return make_cpu_backend(cpu);
    // Not a usage error (exit 1, not 2): the same command is right on a GPU node.
    throw Error("run.backend = cuda, but no GPU can be used: " + why +
                " (use run.backend = cpu or auto to train on the CPU)");
  }
  // Ranks of one host share its GPUs round-robin by local rank; CUDA_VISIBLE_DEVICES has
  // already narrowed what "visible" means.
  return make_cuda_backend(local_rank % devices);
}

}  // namespace squall::nn
