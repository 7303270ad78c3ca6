// NHWC and channel-blocked activations on the CPU backend (docs/design.md, "Layout"): the
// permutations between the memory orders (with a conversion of type in the same pass, for the batch that
// enters a reduced-precision NHWC model), and batch norm in NHWC. Convolution and pooling take NHWC directly
// (oneDNN's nhwc format, cpu_conv.cpp and cpu_pool.cpp); batch norm's loops are written for
// NCHW, so an NHWC plan permutes into NCHW copies, runs them and permutes back: the CPU is
// the reference for NHWC, not a fast path.
#include <algorithm>
#include <cstring>
#include <vector>

#include "src/core/error.hpp"
#include "src/core/transpose8x8.hpp"
#include "src/cpu/cpu_backend.hpp"

namespace squall::cpu {

namespace {

// dst[n, hw, c] = src[n, c, hw] (to_nhwc) or the reverse, for elements of `e` bytes.
template <class E>
void permute(const E* src, E* dst, int64_t n, int64_t c, int64_t hw, bool to_nhwc) {
#pragma omp parallel for collapse(2) schedule(static) if (n * c * hw >= 65536)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p) {
      const int64_t base = i * c * hw;
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t nchw = base + ch * hw + p, nhwc = base + p * c + ch;
        if (to_nhwc)
          dst[nhwc] = src[nchw];
        else
          dst[nchw] = src[nhwc];
      }
    }
}

// Elements gathered in the destination's order before they are converted: a block that stays
// in the L1 cache, so that the data is read and written once.
constexpr int64_t kGatherBlock = 1024;

// src [n, c, hw] of element bits E (NCHW) into dst [n, hw, c] of type `to` (to_nhwc), or the
// reverse, converting each element as convert does.
template <class E>
void permute_convert_blocks(const E* src, DType from, void* dst, DType to, int64_t n, int64_t c, int64_t hw,
                            bool to_nhwc) {
  const auto out_size = static_cast<int64_t>(dtype_size(to));
  auto* out = static_cast<char*>(dst);
  // NHWC out: blocks of whole pixels (every channel of each); NCHW out: runs of one channel's pixels.
  const int64_t run = to_nhwc ? std::max<int64_t>(1, kGatherBlock / c) : kGatherBlock;
  const int64_t runs = (hw + run - 1) / run, planes = to_nhwc ? 1 : c;
#pragma omp parallel if (n * c * hw >= 65536)
  {
    std::vector<E> tmp(static_cast<size_t>(to_nhwc ? run * c : run));
#pragma omp for collapse(3) schedule(static)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < planes; ++ch)
        for (int64_t b = 0; b < runs; ++b) {
          const int64_t p0 = b * run, p1 = std::min(hw, p0 + run);
          if (to_nhwc) {
            for (int64_t k = 0; k < c; ++k)
              for (int64_t p = p0; p < p1; ++p) tmp[static_cast<size_t>((p - p0) * c + k)] = src[(i * c + k) * hw + p];
            convert_elements(tmp.data(), from, out + (i * hw + p0) * c * out_size, to, (p1 - p0) * c);
          } else {
            for (int64_t p = p0; p < p1; ++p) tmp[static_cast<size_t>(p - p0)] = src[(i * hw + p) * c + ch];
            convert_elements(tmp.data(), from, out + ((i * c + ch) * hw + p0) * out_size, to, p1 - p0);
          }
        }
  }
}

#if defined(__x86_64__) || defined(__i386__)
// One block of 32-bit elements between [block][hw] (plain) and [hw][block] (blocked), block 8
// or 16, in 8 x 8 tiles transposed in registers; the pixels past the last whole 8 by the
// element loop. Moves bits only: the same result as the loop below on any CPU.
__attribute__((target("avx2"))) void permute_block_avx2(const uint32_t* src, uint32_t* dst, int64_t hw, int64_t block,
                                                        bool to_blocked) {
  const int64_t whole = hw - hw % 8;
  for (int64_t p0 = 0; p0 < whole; p0 += 8)
    for (int64_t l0 = 0; l0 < block; l0 += 8) {
      // Rows: 8 runs of 8 to read (a lane's pixels, or a pixel's lanes); they come out as the
      // other's runs.
      __m256 r[8];
      for (int i = 0; i < 8; ++i)
        r[i] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
            to_blocked ? src + (l0 + i) * hw + p0 : src + (p0 + i) * block + l0)));
      transpose8x8(r);  // r[j]: lane l0 + j of pixels p0 .. p0 + 7, or pixel p0 + j of lanes l0 .. l0 + 7
      for (int j = 0; j < 8; ++j)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to_blocked ? dst + (p0 + j) * block + l0
                                                                  : dst + (l0 + j) * hw + p0),
                            _mm256_castps_si256(r[j]));
    }
  for (int64_t p = whole; p < hw; ++p)
    for (int64_t l = 0; l < block; ++l) {
      if (to_blocked)
        dst[p * block + l] = src[l * hw + p];
      else
        dst[l * hw + p] = src[p * block + l];
    }
}

bool has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#endif

// dst[n][c / B][hw][c % B] = src[n][c][hw] (to_blocked) or the reverse; c a multiple of B.
template <class E>
void permute_blocked(const E* src, E* dst, int64_t n, int64_t c, int64_t hw, int64_t block, bool to_blocked) {
  const int64_t blocks = c / block;
#if defined(__x86_64__) || defined(__i386__)
  const bool tiles = sizeof(E) == 4 && block % 8 == 0 && has_avx2();
#endif
#pragma omp parallel for collapse(2) schedule(static) if (n * c * hw >= 65536)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t cb = 0; cb < blocks; ++cb) {
      const int64_t base = (i * blocks + cb) * hw * block;  // the same in both: block cb of sample i
#if defined(__x86_64__) || defined(__i386__)
      if constexpr (sizeof(E) == 4)
        if (tiles) {
          permute_block_avx2(reinterpret_cast<const uint32_t*>(src + base), reinterpret_cast<uint32_t*>(dst + base),
                             hw, block, to_blocked);
          continue;
        }
#endif
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t l = 0; l < block; ++l) {
          const int64_t plain = base + l * hw + p, blocked = base + p * block + l;
          if (to_blocked)
            dst[blocked] = src[plain];
          else
            dst[plain] = src[blocked];
        }
    }
}

class NhwcBatchNorm final : public BatchNormPlan {
 public:
  NhwcBatchNorm(CpuBackend& backend, const BatchNormDesc& d, std::unique_ptr<BatchNormPlan> nchw)
      : m_b(backend), m_d(d), m_inner(std::move(nchw)) {
    const auto count = static_cast<size_t>(d.n * d.c * d.h * d.w);
    m_x = backend.allocate(count, d.dtype);
    m_y = backend.allocate(count, d.dtype);
    m_dx = backend.allocate(count, d.dtype);
  }
  void forward(Stream& s, const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool train) override {
    m_queued.run(s, [=, this, &s] {
      to_nchw(s, x, m_x.raw());
      m_inner->forward(s, m_x.raw(), gamma, beta, running_mean, running_var, m_y.raw(), train);
      to_nhwc(s, m_y.raw(), y);
    });
  }
  void backward(Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                float* dbeta) override {
    m_queued.run(s, [=, this, &s] {
      to_nchw(s, x, m_x.raw());
      to_nchw(s, dy, m_y.raw());
      m_inner->backward(s, m_x.raw(), m_y.raw(), gamma, m_dx.raw(), dgamma, dbeta);
      to_nhwc(s, m_dx.raw(), dx);
    });
  }

 private:
  void to_nchw(Stream& s, const void* src, void* dst) {
    permute_layout_now(m_d.dtype, src, Layout::nhwc, dst, Layout::nchw, m_d.n, m_d.c, m_d.h, m_d.w);
  }
  void to_nhwc(Stream& s, const void* src, void* dst) {
    permute_layout_now(m_d.dtype, src, Layout::nchw, dst, Layout::nhwc, m_d.n, m_d.c, m_d.h, m_d.w);
  }

  CpuBackend& m_b;
  BatchNormDesc m_d;
  std::unique_ptr<BatchNormPlan> m_inner;
  Buffer m_x, m_y, m_dx;  // NCHW copies of x, y (then dy), dx
  QueuedWork m_queued;  // last: its destructor waits for the passes still queued
};

}  // namespace

std::unique_ptr<BatchNormPlan> make_nhwc_batch_norm(CpuBackend& b, const BatchNormDesc& d,
                                                   std::unique_ptr<BatchNormPlan> nchw) {
  return std::make_unique<NhwcBatchNorm>(b, d, std::move(nchw));
}

void permute_layout_now(DType t, const void* src, Layout from, void* dst, Layout to, int64_t n, int64_t c,
                        int64_t h, int64_t w) {
  if (n < 0 || c < 0 || h < 0 || w < 0)
    throw Error("permute_layout: bad shape " + Shape(n, c, h, w).str());
  const size_t bytes = static_cast<size_t>(n * c * h * w) * dtype_size(t);
  if (bytes == 0) return;
  if (from == to) {
    if (src != dst) std::memcpy(dst, src, bytes);
    return;
  }
  if (channel_block(from) != 0 || channel_block(to) != 0) {
    // Between NCHW and one blocked layout: the graph's two ends and the layers that compute
    // on NCHW copies (flatten, global pooling, bilinear resizing).
    const bool to_blocked = channel_block(to) != 0;
    const int64_t block = channel_block(to_blocked ? to : from);
    if ((to_blocked ? from : to) != Layout::nchw || c % block != 0)
      throw Error(std::string("permute_layout: ") + layout_name(from) + " -> " + layout_name(to) + " of " +
                  Shape(n, c, h, w).str() + " (blocked layouts convert to and from nchw, whole blocks of channels)");
    if (dtype_size(t) == 4)
      permute_blocked(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), n, c, h * w, block, to_blocked);
    else
      permute_blocked(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), n, c, h * w, block,
                      to_blocked);
    return;
  }
  if (from == Layout::blocked || to == Layout::blocked)
    throw Error("permute_layout: 'blocked' is a request to a graph, not a memory order");
  const bool to_nhwc = to == Layout::nhwc;
  if (dtype_size(t) == 4)
    permute(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), n, c, h * w, to_nhwc);
  else
    permute(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), n, c, h * w, to_nhwc);
}

void CpuBackend::permute_layout(Stream& s, DType t, const void* src, Layout from, void* dst, Layout to, int64_t n,
                                int64_t c, int64_t h, int64_t w) {
  run_on(s, [=] { permute_layout_now(t, src, from, dst, to, n, c, h, w); });
}

void permute_convert_now(const void* src, DType from, Layout from_layout, void* dst, DType to, Layout to_layout,
                         int64_t n, int64_t c, int64_t h, int64_t w) {
  for (const DType t : {from, to})
    if (t != DType::f32 && t != DType::bf16 && t != DType::f16)
      throw Error(std::string("permute_convert: ") + dtype_name(t) + " is not a float type");
  if (n < 0 || c < 0 || h < 0 || w < 0) throw Error("permute_convert: bad shape " + Shape(n, c, h, w).str());
  const int64_t count = n * c * h * w;
  if (count == 0) return;
  // One channel or one pixel: both orders are the same.
  if (from_layout == to_layout || c == 1 || h * w == 1)
    return convert_now(src, from, dst, to, static_cast<size_t>(count));
  if (from == to) return permute_layout_now(from, src, from_layout, dst, to_layout, n, c, h, w);
  if (channel_block(from_layout) != 0 || channel_block(to_layout) != 0)
    throw Error(std::string("permute_convert: ") + layout_name(from_layout) + " -> " + layout_name(to_layout) +
                " with a change of type (blocked layouts hold f32 activations only)");
  const bool to_nhwc = to_layout == Layout::nhwc;
  if (dtype_size(from) == 4)
    permute_convert_blocks(static_cast<const uint32_t*>(src), from, dst, to, n, c, h * w, to_nhwc);
  else
    permute_convert_blocks(static_cast<const uint16_t*>(src), from, dst, to, n, c, h * w, to_nhwc);
}

void CpuBackend::permute_convert(Stream& s, const void* src, DType from, Layout from_layout, void* dst, DType to,
                                 Layout to_layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  run_on(s, [=] { permute_convert_now(src, from, from_layout, dst, to, to_layout, n, c, h, w); });
}

}  // namespace squall::cpu
