#pragma once
// Shared by the cuda-host kernel cases: the CPU backend (the reference), typed test data,
// and the comparisons (bit for bit, or within a tolerance each case states).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/nn/backend.hpp"
#include "tests/cuda_host/kernels_emulated.hpp"

namespace squall::test::kernels {

using nn::DType;
using Bytes = std::vector<unsigned char>;

inline cpu::CpuBackend& cpu() {
  static cpu::CpuBackend* b = new cpu::CpuBackend(1);  // one thread: the reference's plain loops; never destroyed
  return *b;
}

inline nn::Stream& cpu_stream() {
  static nn::Stream* s = cpu().create_stream().release();
  return *s;
}

// The kernels' dtype code of a float type (0 f32, 1 bf16, 2 f16).
inline int code(DType t) { return static_cast<int>(t); }

inline const std::vector<DType>& float_types() {
  static const std::vector<DType> all{DType::f32, DType::bf16, DType::f16};
  return all;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// n values of type t (f32 values rounded to t by the CPU backend).
inline Bytes to_type(DType t, const std::vector<float>& f) {
  Bytes out(f.size() * nn::dtype_size(t));
  cpu().convert(cpu_stream(), f.data(), DType::f32, out.data(), t, f.size());
  return out;
}

inline Bytes random_typed(DType t, size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  return to_type(t, random_floats(n, seed, lo, hi));
}

inline std::vector<float> widen(DType t, const Bytes& b) {
  std::vector<float> out(b.size() / nn::dtype_size(t));
  cpu().convert(cpu_stream(), b.data(), t, out.data(), DType::f32, out.size());
  return out;
}

// Bit-for-bit equality of two arrays of elements of elem_bytes, naming the first mismatch.
inline void require_same_bits(const void* got, const void* want, size_t count, size_t elem_bytes,
                              const std::string& what) {
  const auto* a = static_cast<const unsigned char*>(got);
  const auto* b = static_cast<const unsigned char*>(want);
  size_t mismatches = 0, first = count;
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(a + i * elem_bytes, b + i * elem_bytes, elem_bytes) != 0) {
      if (first == count) first = i;
      ++mismatches;
    }
  INFO(what << ": " << mismatches << " of " << count << " elements differ, the first at " << first);
  REQUIRE(mismatches == 0);
}

inline void require_same_bits(const Bytes& got, const Bytes& want, size_t elem_bytes, const std::string& what) {
  REQUIRE(got.size() == want.size());
  require_same_bits(got.data(), want.data(), got.size() / elem_bytes, elem_bytes, what);
}

inline void require_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  require_same_bits(got.data(), want.data(), got.size(), sizeof(float), what);
}

// The spacing of type t's values at |v| (its unit in the last place; subnormals included).
inline double ulp(DType t, double v) {
  const int mantissa = t == DType::f32 ? 23 : t == DType::bf16 ? 7 : 10;
  const int min_exp = t == DType::f16 ? -14 : -126;
  int e = 0;
  std::frexp(std::abs(v), &e);  // |v| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - mantissa);
}

inline std::string type_name(DType t) { return nn::dtype_name(t); }

}  // namespace squall::test::kernels
