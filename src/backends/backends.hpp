#pragma once
// The backends a run can have and the one it gets (run.backend; docs/design.md, "Backends"):
// the CPU backend (src/cpu), always built, and the CUDA backend (cuda/), when this build has
// it. One floor above both, so that what depends on the choice (src/config's setup, the
// commands, the tests) includes this header and the floors test sees it.
#include <memory>
#include <string>

#include "src/cpu/cpu_options.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/backend_kind.hpp"

namespace squall::backends {

// The CPU backend (the reference). threads: 0 = every core this process may use.
std::unique_ptr<nn::Backend> make_cpu_backend(int threads = 0);
std::unique_ptr<nn::Backend> make_cpu_backend(const cpu::CpuBackendOptions& options);

// The GPUs this process can use; 0 with the reason in *why_none when there are none (no
// driver, no device, or a build without CUDA).
int cuda_device_count(std::string* why_none = nullptr);
// The CUDA backend on visible device `device`; throws squall::Error when there is no such
// device or the build has no CUDA backend.
std::unique_ptr<nn::Backend> make_cuda_backend(int device);

// run.backend: cpu, cuda or auto (cuda when this build has it and a device is visible, else
// cpu). local_rank picks the GPU (local_rank modulo the visible devices); threads is the CPU
// backend's team size. cuda that cannot be had throws squall::Error saying why (no device,
// or a build without CUDA). cpu_streams (run.cpu_streams): for the CPU backend only.
std::unique_ptr<nn::Backend> make_backend(nn::BackendKind kind, int local_rank, int threads,
                                          nn::CpuStreams cpu_streams = nn::CpuStreams::inline_);

}  // namespace squall::backends
