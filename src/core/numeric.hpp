#pragma once
// Bit-level helpers that several layers need and that must agree bit for bit wherever they are
// used: splitmix64 (the random streams of dropout, sampling, augmentation and the synthetic
// data are functions of seeds through it, which is what makes a resumed run repeat), and
// bfloat16 rounding (the CPU backend's conversions and the allreduce's bf16 wire sums). The
// CUDA kernels carry their own device copies (cuda/kernel_util.cuh), checked against these by
// the cuda-host tests.
#include <cstdint>
#include <cstring>

namespace squall {

// splitmix64's finaliser: a bijective mixer with full avalanche.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One step of the splitmix64 generator: advances `state` and returns the next value.
inline uint64_t splitmix64_next(uint64_t& state) { return mix64(state += 0x9e3779b97f4a7c15ull); }

// splitmix64 of a single value (the generator's first output for state x).
inline uint64_t splitmix64(uint64_t x) { return mix64(x + 0x9e3779b97f4a7c15ull); }

// bfloat16 (the top half of an f32) from a float, rounded to nearest even as CUDA's
// __float2bfloat16_rn does; a NaN stays a quiet NaN. Branch-free, so that bulk loops vectorise.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace squall
