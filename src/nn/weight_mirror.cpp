// The checks every backend's tensor set makes of a weight mirror (docs/design.md, "Weight
// mirrors"): a wrong one would be written out of bounds on every update.
#include <string>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"

namespace squall::nn {

void check_weight_mirror(const TensorRef& t, const char* who) {
  const WeightMirror& m = t.mirror;
  if (m.data == nullptr) return;
  const std::string where = std::string(who) + ": the weight mirror of a tensor of " + std::to_string(t.n) + " elements";
  if (m.k <= 0 || m.c <= 0 || m.rs <= 0 || m.count() != t.n)
    throw Error(where + " has " + std::to_string(m.k) + " x " + std::to_string(m.c) + " x " + std::to_string(m.rs) +
                " elements");
  if (m.dtype != DType::f32 && m.dtype != DType::bf16 && m.dtype != DType::f16)
    throw Error(where + " is of type " + dtype_name(m.dtype) + ", not a float type");
}

}  // namespace squall::nn
