#pragma once
// Initial values of parameters and state, PyTorch-compatible in distribution (not in the
// exact numbers: the random streams differ). Runs on the host; the model uploads the result.
#include <random>

#include "src/nn/layer.hpp"

namespace squall::nn {

// Fills spec.shape.numel() floats at host_values according to spec.init:
//   zeros, ones;
//   uniform_fan_in:     U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (conv/linear weights and biases);
//   kaiming_normal_out: N(0, sqrt(2 / fan_out)).
void initialize(const ParamSpec& spec, float* host_values, std::mt19937_64& rng);

}  // namespace squall::nn
