// The shapes of the plan descriptions (kernels.hpp).
#include "src/nn/kernels.hpp"

namespace squall::nn {

Shape ConvDesc::output() const {
  if (transposed) {
    const int64_t p = (h - 1) * stride_h - 2 * pad_h + dil_h * (r - 1) + out_pad_h + 1;
    const int64_t q = (w - 1) * stride_w - 2 * pad_w + dil_w * (s - 1) + out_pad_w + 1;
    return Shape(n, k, p, q);
  }
  const int64_t p = (h + 2 * pad_h - dil_h * (r - 1) - 1) / stride_h + 1;
  const int64_t q = (w + 2 * pad_w - dil_w * (s - 1) - 1) / stride_w + 1;
  return Shape(n, k, p, q);
}

Shape ConvDesc::weight() const { return transposed ? Shape(c, k, r, s) : Shape(k, c, r, s); }

Shape PoolDesc::output() const {
  return Shape(n, c, (h + 2 * pad_h - r) / stride_h + 1, (w + 2 * pad_w - s) / stride_w + 1);
}

}  // namespace squall::nn
