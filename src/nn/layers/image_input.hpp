#pragma once
// The input check the image layers (convolutions, pooling) share.
#include <string>
#include <vector>

#include "src/core/error.hpp"
#include "src/nn/tensor.hpp"

namespace squall::nn {

// The single rank-4 input of an image layer, or an Error naming the layer and the shapes.
inline const Shape& image_input(const std::string& layer, const std::vector<Shape>& inputs) {
  if (inputs.size() != 1) throw Error(layer + ": expects 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.rank != 4 || x.numel() <= 0) throw Error(layer + ": expects a non-empty input [n,c,h,w], got " + x.str());
  return x;
}

}  // namespace squall::nn
