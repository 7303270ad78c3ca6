#include "src/nn/tensor.hpp"

#include "src/core/error.hpp"

namespace squall::nn {

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

}  // namespace squall::nn
