#pragma once
// A Backend: a Device (device.hpp: streams, events, memory, copies, capture, capabilities)
// and the Kernels that run on it (kernels.hpp: plans, element-wise, loss, metric and
// optimizer kernels), implemented together by one class per kind of hardware: cpu::CpuBackend
// (src/cpu) and the CUDA backend (cuda/). Code that only moves memory or orders streams takes
// a Device&; layers, graphs and optimizers take the Backend. The factory that picks one for a
// run is squall::backends (src/backends/backends.hpp). docs/design.md, "Backends".
#include "src/nn/device.hpp"
#include "src/nn/kernels.hpp"

namespace squall::nn {

class Backend : public Device, public Kernels {};

}  // namespace squall::nn
