#pragma once
// Shorthands shared by the oneDNN plans of the CPU backend (src/cpu/cpu_*.cpp).
#include <oneapi/dnnl/dnnl.hpp>

namespace squall::cpu::dnnl_util {

using memory = dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// oneDNN memory objects take void*; inputs are const on our side.
inline void* bind(const float* p) { return const_cast<float*>(p); }

}  // namespace squall::cpu::dnnl_util
