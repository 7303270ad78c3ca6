// What a Device says it can do (device.hpp).
#include "src/nn/device.hpp"

#include <string>

namespace squall::nn {

Capabilities::ForType& Capabilities::of(DType t) {
  switch (t) {
    case DType::f32: return f32;
    case DType::bf16: return bf16;
    case DType::f16: return f16;
    default: break;
  }
  throw Error(std::string("capabilities: ") + dtype_name(t) + " is not an activation type (f32, bf16 or f16)");
}

const Capabilities::ForType& Capabilities::of(DType t) const { return const_cast<Capabilities&>(*this).of(t); }

}  // namespace squall::nn
