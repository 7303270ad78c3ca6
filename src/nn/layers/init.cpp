#include "src/nn/init.hpp"

#include <cmath>
#include <numbers>

#include "src/core/error.hpp"

namespace squall::nn {
namespace {

// Uniform in [0, 1) from the top 53 bits. std::uniform_real_distribution and
// std::normal_distribution are implementation-defined; these keep initial values the same
// across standard libraries for a given seed.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Standard normal by Box-Muller (one value per call: simplicity over speed, this runs once).
double standard_normal(std::mt19937_64& rng) {
  const double u1 = 1.0 - uniform01(rng);  // (0, 1]: log stays finite
  const double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

void initialize(const ParamSpec& spec, float* host_values, std::mt19937_64& rng) {
  const int64_t count = spec.shape.numel();
  switch (spec.init) {
    case Init::zeros:
      for (int64_t i = 0; i < count; ++i) host_values[i] = 0.0f;
      return;
    case Init::ones:
      for (int64_t i = 0; i < count; ++i) host_values[i] = 1.0f;
      return;
    case Init::uniform_fan_in: {
      if (spec.fan_in <= 0) throw Error("initialize " + spec.name + ": fan_in must be positive");
      const double bound = 1.0 / std::sqrt(static_cast<double>(spec.fan_in));
      for (int64_t i = 0; i < count; ++i)
        host_values[i] = static_cast<float>((2.0 * uniform01(rng) - 1.0) * bound);
      return;
    }
    case Init::kaiming_normal_out: {
      if (spec.fan_out <= 0) throw Error("initialize " + spec.name + ": fan_out must be positive");
      const double stddev = std::sqrt(2.0 / static_cast<double>(spec.fan_out));
      for (int64_t i = 0; i < count; ++i) host_values[i] = static_cast<float>(stddev * standard_normal(rng));
      return;
    }
  }
  throw Error("initialize " + spec.name + ": unknown init kind");
}

}  // namespace squall::nn
