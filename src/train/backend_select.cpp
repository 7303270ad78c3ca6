// run.backend: which Backend a rank trains on, and which GPU (docs/design.md, "Backends").
#include <string>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"

namespace squall::nn {

std::unique_ptr<Backend> make_backend(const std::string& kind, int local_rank, int threads,
                                      const std::string& cpu_streams) {
  if (cpu_streams != "inline" && cpu_streams != "async")
    throw UsageError("run.cpu_streams must be one of inline | async (got \"" + cpu_streams + "\")");
  const CpuBackendOptions cpu{threads, cpu_streams == "async"};
  if (kind == "cpu") return make_cpu_backend(cpu);
  if (kind != "cuda" && kind != "auto")
    throw UsageError("run.backend must be one of cpu | cuda | auto (got \"" + kind + "\")");
  std::string why;
  const int devices = cuda_device_count(&why);
  if (devices == 0) {
    if (kind == "auto") return make_cpu_backend(cpu);
    // Not a usage error (exit 1, not 2): the same command is right on a GPU node.
    throw Error("run.backend = cuda, but no GPU can be used: " + why +
                " (use run.backend = cpu or auto to train on the CPU)");
  }
  // Ranks of one host share its GPUs round-robin by local rank; CUDA_VISIBLE_DEVICES has
  // already narrowed what "visible" means.
  return make_cuda_backend(local_rank % devices);
}

}  // namespace squall::nn
