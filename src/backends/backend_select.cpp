// run.backend: which Backend a rank trains on, and which GPU (docs/design.md, "Backends").
#include <string>

#include "src/backends/backends.hpp"
#include "src/cpu/cpu_backend.hpp"
#include "src/core/error.hpp"

namespace squall::backends {

std::unique_ptr<nn::Backend> make_cpu_backend(int threads) {
  return std::make_unique<cpu::CpuBackend>(threads);
}

std::unique_ptr<nn::Backend> make_cpu_backend(const cpu::CpuBackendOptions& options) {
  return std::make_unique<cpu::CpuBackend>(options);
}

std::unique_ptr<nn::Backend> make_backend(nn::BackendKind kind, int local_rank, int threads,
                                          nn::CpuStreams cpu_streams) {
  cpu::CpuBackendOptions cpu;
  cpu.threads = threads;
  cpu.async_streams = cpu_streams == nn::CpuStreams::async;
  if (kind == nn::BackendKind::cpu) return make_cpu_backend(cpu);
  std::string why;
  const int devices = cuda_device_count(&why);
  if (devices == 0) {
    if (kind == nn::BackendKind::auto_) return make_cpu_backend(cpu);
    // Not a usage error (exit 1, not 2): the same command is right on a GPU node.
    throw Error("run.backend = cuda, but no GPU can be used: " + why +
                " (use run.backend = cpu or auto to train on the CPU)");
  }
  // Ranks of one host share its GPUs round-robin by local rank; CUDA_VISIBLE_DEVICES has
  // already narrowed what "visible" means.
  return make_cuda_backend(local_rank % devices);
}

}  // namespace squall::backends
