#include "src/nn/tensor.hpp"

#include "src/nn/backend.hpp"

#include "src/core/error.hpp"

namespace squall::nn {

void Backend::begin_capture(Stream&) { throw Error("the " + name() + " backend cannot capture work"); }
std::unique_ptr<Captured> Backend::end_capture(Stream&) { throw Error("the " + name() + " backend cannot capture work"); }
void Backend::replay(Captured&, Stream&) { throw Error("the " + name() + " backend cannot replay work"); }

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::nchw: return "nchw";
    case Layout::nhwc: return "nhwc";
    case Layout::blocked: return "blocked";
    case Layout::nchw8c: return "nchw8c";
    case Layout::nchw16c: return "nchw16c";
  }
  return "?";
}

int64_t channel_block(Layout l) {
  return l == Layout::nchw8c ? 8 : l == Layout::nchw16c ? 16 : 0;
}

Layout blocked_layout(int64_t block) {
  if (block == 8) return Layout::nchw8c;
  if (block == 16) return Layout::nchw16c;
  throw Error("no channel-blocked layout of " + std::to_string(block) + " channels (8 or 16)");
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? "," : "") + std::to_string(dims[static_cast<size_t>(i)]);
  return s + "]";
}

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
