// Element-wise, data-movement and resampling operations: OpenMP loops the compiler can
// vectorise. Below k_parallel_min elements a loop runs serially: waking the team costs more
// than the work.
#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/core/error.hpp"
#include "src/core/numeric.hpp"
#include "src/cpu/cpu_backend.hpp"

namespace squall::cpu {

namespace {

inline int64_t as_signed(size_t n) { return static_cast<int64_t>(n); }


}  // namespace

void CpuBackend::fill(Stream& s, float* x, size_t n, float value) {
  run_on(s, [=, this, &s] {
    const int64_t m = as_signed(n);
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
    for (int64_t i = 0; i < m; ++i) x[i] = value;
  });
}

void CpuBackend::relu_forward_f32(Stream&, const float* x, float* y, size_t n) {
  const int64_t m = as_signed(n);
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
  for (int64_t i = 0; i < m; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void CpuBackend::relu_backward_f32(Stream&, const float* y, const float* dy, float* dx, size_t n) {
  const int64_t m = as_signed(n);
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
  for (int64_t i = 0; i < m; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void CpuBackend::add_f32(Stream&, const float* a, const float* b, float* y, size_t n) {
  const int64_t m = as_signed(n);
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
  for (int64_t i = 0; i < m; ++i) y[i] = a[i] + b[i];
}

void CpuBackend::axpy(Stream& s, float alpha, const float* x, float* y, size_t n) {
  run_on(s, [=, this, &s] {
    const int64_t m = as_signed(n);
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
    for (int64_t i = 0; i < m; ++i) y[i] += alpha * x[i];
  });
}

void CpuBackend::scale(Stream& s, float alpha, float* x, size_t n) {
  run_on(s, [=, this, &s] {
    const int64_t m = as_signed(n);
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
    for (int64_t i = 0; i < m; ++i) x[i] *= alpha;
  });
}

void CpuBackend::axpby(Stream& s, float alpha, const float* x, float beta, float* y, size_t n) {
  run_on(s, [=, this, &s] {
    const int64_t m = as_signed(n);
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
    for (int64_t i = 0; i < m; ++i) y[i] = alpha * x[i] + beta * y[i];
  });
}

namespace {

// IEEE binary16 from float and back, rounding to nearest even, as CUDA's __float2half_rn
// does; NaN stays NaN (bfloat16's conversions: src/core/numeric.hpp).
uint16_t to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);             // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);            // overflow: inf
  if (abs < 0x38800000u) {                                                         // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);                      // below half the smallest
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);                           // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);                                        // rebias 127 -> 15
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= sign;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const uint32_t u = sign | (exp == 31 ? (0xffu << 23) | (mant << 13) : ((exp + 112u) << 23) | (mant << 13));
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

namespace {


#if defined(__x86_64__)
// f16 through the F16C instructions where the CPU has them (the same rounding as to_f16).
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) dst[i] = to_f16(src[i]);
}

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = from_f16(src[i]);
}

bool have_f16c() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}
#else
constexpr bool have_f16c() { return false; }
void f32_to_f16_f16c(const float*, uint16_t*, int64_t) {}
void f16_to_f32_f16c(const uint16_t*, float*, int64_t) {}
#endif

// One type pair over [begin, end).
void convert_range(const void* src, DType from, void* dst, DType to, int64_t begin, int64_t end) {
  const int64_t n = end - begin;
  if (from == DType::f32 && to == DType::bf16) {
    const float* s = static_cast<const float*>(src) + begin;
    uint16_t* d = static_cast<uint16_t*>(dst) + begin;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
  } else if (from == DType::bf16 && to == DType::f32) {
    const uint16_t* s = static_cast<const uint16_t*>(src) + begin;
    uint32_t* d = static_cast<uint32_t*>(dst) + begin;  // the same bits as the float
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
  } else if (from == DType::f32 && to == DType::f16) {
    const float* s = static_cast<const float*>(src) + begin;
    uint16_t* d = static_cast<uint16_t*>(dst) + begin;
    if (have_f16c()) return f32_to_f16_f16c(s, d, n);
    for (int64_t i = 0; i < n; ++i) d[i] = to_f16(s[i]);
  } else if (from == DType::f16 && to == DType::f32) {
    const uint16_t* s = static_cast<const uint16_t*>(src) + begin;
    float* d = static_cast<float*>(dst) + begin;
    if (have_f16c()) return f16_to_f32_f16c(s, d, n);
    for (int64_t i = 0; i < n; ++i) d[i] = from_f16(s[i]);
  } else {  // between the 16-bit types: through f32
    for (int64_t i = begin; i < end; ++i) {
      const uint16_t h = static_cast<const uint16_t*>(src)[i];
      const float f = from == DType::bf16 ? bf16_to_float(h) : from_f16(h);
      static_cast<uint16_t*>(dst)[i] = to == DType::bf16 ? float_to_bf16(f) : to_f16(f);
    }
  }
}

}  // namespace

void convert_elements(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (n <= 0) return;
  if (from == to) {
    std::memmove(dst, src, static_cast<size_t>(n) * dtype_size(from));
    return;
  }
  convert_range(src, from, dst, to, 0, n);
}

void convert_now(const void* src, DType from, void* dst, DType to, size_t n) {
  auto supported = [](DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; };
  if (!supported(from) || !supported(to))
    throw Error(std::string("convert: ") + dtype_name(from) + " -> " + dtype_name(to) + " is not a float conversion");
  const int64_t m = as_signed(n);
  if (from == to) {
    if (src != dst) std::memmove(dst, src, n * dtype_size(from));
    return;
  }
  if (m < k_parallel_min) return convert_range(src, from, dst, to, 0, m);
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (m + nt - 1) / nt;
    const int64_t begin = std::min(m, t * chunk), end = std::min(m, begin + chunk);
    if (begin < end) convert_range(src, from, dst, to, begin, end);
  }
}

void CpuBackend::convert(Stream& s, const void* src, DType from, void* dst, DType to, size_t n) {
  run_on(s, [=] { convert_now(src, from, dst, to, n); });
}

// The mask is a pure function of (seed, offset + i): u_i = top 24 bits of
// mix64(mix64(seed) + offset + i) / 2^24, kept when u_i >= p. Any backend evaluating this
// formula draws the same mask, and a run resumed at the same offset repeats it.
void CpuBackend::dropout_forward_f32(Stream&, const float* x, float* y, float* mask, size_t n, float p,
                                 uint64_t seed, uint64_t offset) {
  if (!(p >= 0.0f && p <= 1.0f)) throw Error("dropout: probability must be in [0, 1], got " + std::to_string(p));
  const int64_t m = as_signed(n);
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  const uint64_t base = mix64(seed) + offset;
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    const float u = static_cast<float>(mix64(base + static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
    const float k = u >= p ? keep_scale : 0.0f;
    mask[i] = k;
    y[i] = x[i] * k;
  }
}

void CpuBackend::multiply_f32(Stream&, const float* a, const float* b, float* y, size_t n) {
  const int64_t m = as_signed(n);
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
  for (int64_t i = 0; i < m; ++i) y[i] = a[i] * b[i];
}

void CpuBackend::copy_strided_f32(Stream&, float* dst, int64_t dst_stride, int64_t dst_offset, const float* src,
                              int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  if (rows <= 0 || count <= 0) return;
#pragma omp parallel for if (rows * count >= k_parallel_min) schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dst + i * dst_stride + dst_offset, src + i * src_stride + src_offset,
                static_cast<size_t>(count) * sizeof(float));
}

void CpuBackend::global_avg_pool_forward_f32(Stream&, const float* x, float* y, int64_t nc, int64_t hw) {
  const float inv = 1.0f / static_cast<float>(hw);
#pragma omp parallel for if (nc * hw >= k_parallel_min) schedule(static)
  for (int64_t i = 0; i < nc; ++i) {
    const float* row = x + i * hw;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < hw; ++j) sum += row[j];
    y[i] = sum * inv;
  }
}

void CpuBackend::global_avg_pool_backward_f32(Stream&, const float* dy, float* dx, int64_t nc, int64_t hw) {
  const float inv = 1.0f / static_cast<float>(hw);
#pragma omp parallel for if (nc * hw >= k_parallel_min) schedule(static)
  for (int64_t i = 0; i < nc; ++i) {
    const float g = dy[i] * inv;
    float* row = dx + i * hw;
#pragma omp simd
    for (int64_t j = 0; j < hw; ++j) row[j] = g;
  }
}

namespace {

// PyTorch's area_pixel_compute_source_index for align_corners=false: the source coordinate
// of output index d, clamped at 0 (not at the far edge: the upper neighbour is clamped).
struct Tap {
  int64_t i0, i1;   // the two source indices
  float l0, l1;     // their weights
};

inline Tap source_tap(int64_t d, int64_t in, int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  float src = scale * (static_cast<float>(d) + 0.5f) - 0.5f;
  if (src < 0.0f) src = 0.0f;
  const int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
  const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
  const float l1 = src - static_cast<float>(i0);
  return Tap{i0, i1, 1.0f - l1, l1};
}

}  // namespace

void CpuBackend::bilinear_forward_f32(Stream&, const float* x, float* y, int64_t nc, int64_t h, int64_t w,
                                  int64_t oh, int64_t ow) {
#pragma omp parallel for if (nc * oh * ow >= k_parallel_min) schedule(static)
  for (int64_t row = 0; row < nc * oh; ++row) {
    const int64_t plane = row / oh, oy = row % oh;
    const Tap ty = source_tap(oy, h, oh);
    const float* r0 = x + plane * h * w + ty.i0 * w;
    const float* r1 = x + plane * h * w + ty.i1 * w;
    float* out = y + row * ow;
    for (int64_t ox = 0; ox < ow; ++ox) {
      const Tap tx = source_tap(ox, w, ow);
      out[ox] = ty.l0 * (tx.l0 * r0[tx.i0] + tx.l1 * r0[tx.i1]) + ty.l1 * (tx.l0 * r1[tx.i0] + tx.l1 * r1[tx.i1]);
    }
  }
}

void CpuBackend::bilinear_backward_f32(Stream&, const float* dy, float* dx, int64_t nc, int64_t h, int64_t w,
                                   int64_t oh, int64_t ow) {
  // Scatter per plane: planes are independent, so threads never write the same element.
#pragma omp parallel for if (nc * oh * ow >= k_parallel_min) schedule(static)
  for (int64_t plane = 0; plane < nc; ++plane) {
    float* g = dx + plane * h * w;
    std::memset(g, 0, static_cast<size_t>(h * w) * sizeof(float));
    const float* d = dy + plane * oh * ow;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const Tap ty = source_tap(oy, h, oh);
      float* r0 = g + ty.i0 * w;
      float* r1 = g + ty.i1 * w;
      for (int64_t ox = 0; ox < ow; ++ox) {
        const Tap tx = source_tap(ox, w, ow);
        const float v = d[oy * ow + ox];
        r0[tx.i0] += ty.l0 * tx.l0 * v;
        r0[tx.i1] += ty.l0 * tx.l1 * v;
        r1[tx.i0] += ty.l1 * tx.l0 * v;
        r1[tx.i1] += ty.l1 * tx.l1 * v;
      }
    }
  }
}

}  // namespace squall::cpu
