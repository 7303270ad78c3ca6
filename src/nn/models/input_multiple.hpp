#pragma once
// The number a zoo model needs its input's height and width to be multiples of: 2^depth for
// unet (depth max pools of 2, undone by as many transposed convolutions that must land on the
// skip connections' sizes), the encoder's output stride for DeepLabv3+ (8 for deeplabv3plus,
// 16 for deeplabv3plus-resnet50), 1 for the classifiers (lenet5 takes 28 x 28 only, resnet20
// any size). data.pad pads or crops a grid to it (io/input/pad_source.hpp). Defined in zoo.cpp
// beside the checks make_model makes, so that the two cannot drift apart.
#include <cstdint>
#include <string>

#include "src/nn/graph.hpp"

namespace squall::nn {

int64_t input_multiple(const ModelSpec& spec);

// The model as a message names it with what fixes the multiple: "unet of depth 4",
// "deeplabv3plus (output stride 8)", "lenet5".
std::string input_multiple_text(const ModelSpec& spec);

}  // namespace squall::nn
