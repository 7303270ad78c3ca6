#pragma once
// Shorthands shared by the oneDNN plans of the CPU backend (src/cpu/cpu_*.cpp).
#include <oneapi/dnnl/dnnl.hpp>

#include "src/nn/tensor.hpp"

namespace squall::cpu::dnnl_util {

using memory = dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// oneDNN memory objects take void*; inputs are const on our side.
inline void* bind(const float* p) { return const_cast<float*>(p); }

// oneDNN's format tag of a 4-D activation layout; throws for Layout::blocked, a request that
// the graph resolves before any plan is made.
tag activation_tag(squall::nn::Layout l, const char* what);

}  // namespace squall::cpu::dnnl_util
