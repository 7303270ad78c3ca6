// Winograd F(2x2, 3x3) forward on AVX2 + FMA (cpu_winograd.hpp). With the matrices
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1],
// a 4x4 input block d of one channel becomes V = B^T d B, a filter g becomes U = G g G^T,
// and a 2x2 output block is A^T M A with M = sum over channels of U .* V.
//
// The work is a list of pieces of rows of 2x2 output tiles (a sample's tile row, or a run of
// it when rows are few), shared among the OpenMP threads. A piece goes 6 tiles at a time
// through the thread's scratch, small enough to stay in the L1 and L2 caches:
//   1. V[xi][t][c]: the input transform of the 6 tiles, 8 channels (one block) per vector;
//      positions outside the input read as zeros (the padding, and the edge tiles of an
//      odd-sized output).
//   2. M[xi][t][k] = sum_c V[xi][t][c] U[xi][c][k] for the 16 xi: a register-blocked product
//      of 6 tiles x 16 output channels (12 accumulators), fewer tiles or 8 channels at the
//      edges.
//   3. y: the output transform of M, plus the bias, then the ReLU; only the outputs inside y
//      are written.
#include "src/cpu/cpu_winograd.hpp"

#include <omp.h>

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SQUALL_WINO_X86 1
#define SQUALL_WINO_TARGET __attribute__((target("avx2,fma")))
#endif

#include "src/core/error.hpp"

namespace squall::cpu::winograd {

namespace {

constexpr int64_t kBlock = 8;       // channels per block of nChw8c, and floats per vector
constexpr int64_t kTileRows = 6;    // tiles per register block of the product
constexpr int64_t kPanel = 16;      // output channels per register block (8 at an odd end)

// The output channels [k0, k0 + width) of panel starting at k0: 16, or 8 for the last one
// when k is an odd number of blocks.
int64_t panel_width(int64_t k, int64_t k0) { return std::min(kPanel, k - k0); }

}  // namespace

bool eligible(const nn::ConvDesc& d) {
  const auto pad_ok = [](int64_t p) { return p == 0 || p == 1; };
  return d.dtype == nn::DType::f32 && !d.transposed && d.r == 3 && d.s == 3 && d.stride_h == 1 &&
         d.stride_w == 1 && d.dil_h == 1 && d.dil_w == 1 && pad_ok(d.pad_h) && pad_ok(d.pad_w) &&
         d.layout == nn::Layout::nchw8c && d.y_layout() == nn::Layout::nchw8c && d.c % kBlock == 0 &&
         d.k % kBlock == 0 && d.c > 0 && d.k > 0 && d.h + 2 * d.pad_h >= 3 && d.w + 2 * d.pad_w >= 3;
}

#ifdef SQUALL_WINO_X86

bool cpu_supported() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

namespace {

// B^T d B of one tile for one block of 8 channels, d's rows `stride` floats apart in `src`
// (8 floats per position), into v[xi * v_stride] at xi = 4 * row + column. Rows 1 and 2 of d
// stay in registers, rows 0 and 3 are read as needed: no spills to the stack.
SQUALL_WINO_TARGET __attribute__((always_inline)) inline void transform_tile(const float* src, int64_t stride, float* v,
                                                                             int64_t v_stride) {
  __m256 d1[4], d2[4];
  for (int j = 0; j < 4; ++j) {
    d1[j] = _mm256_loadu_ps(src + stride + j * kBlock);
    d2[j] = _mm256_loadu_ps(src + 2 * stride + j * kBlock);
  }
  for (int i = 0; i < 4; ++i) {
    __m256 t[4];  // row i of B^T d
    for (int j = 0; j < 4; ++j) {
      switch (i) {
        case 0: t[j] = _mm256_sub_ps(_mm256_loadu_ps(src + j * kBlock), d2[j]); break;
        case 1: t[j] = _mm256_add_ps(d1[j], d2[j]); break;
        case 2: t[j] = _mm256_sub_ps(d2[j], d1[j]); break;
        default: t[j] = _mm256_sub_ps(d1[j], _mm256_loadu_ps(src + 3 * stride + j * kBlock)); break;
      }
    }
    float* row = v + 4 * i * v_stride;  // (B^T d) B: the same combinations of columns
    _mm256_storeu_ps(row, _mm256_sub_ps(t[0], t[2]));
    _mm256_storeu_ps(row + v_stride, _mm256_add_ps(t[1], t[2]));
    _mm256_storeu_ps(row + 2 * v_stride, _mm256_sub_ps(t[2], t[1]));
    _mm256_storeu_ps(row + 3 * v_stride, _mm256_sub_ps(t[1], t[3]));
  }
}

// The input transform of the tile whose top-left input position is (y0, x0) (-1 with
// padding) in one block's plane `src` [h][w][8]. A tile reaching outside the input is first
// copied with zeros in place of what lies outside.
SQUALL_WINO_TARGET __attribute__((always_inline)) inline void input_tile(const float* src, int64_t h, int64_t w,
                                                                         int64_t y0, int64_t x0, float* v,
                                                                         int64_t v_stride) {
  if (y0 >= 0 && x0 >= 0 && y0 + 4 <= h && x0 + 4 <= w) {
    transform_tile(src + (y0 * w + x0) * kBlock, w * kBlock, v, v_stride);
    return;
  }
  alignas(32) float patch[4][4][kBlock];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int64_t yy = y0 + i, xx = x0 + j;
      const __m256 p = yy >= 0 && yy < h && xx >= 0 && xx < w ? _mm256_loadu_ps(src + (yy * w + xx) * kBlock)
                                                              : _mm256_setzero_ps();
      _mm256_store_ps(patch[i][j], p);
    }
  transform_tile(&patch[0][0][0], 4 * kBlock, v, v_stride);
}

// One tile's 2x2 outputs for one block of 8 output channels from m[xi * stride], plus the
// bias, then the ReLU, into the block's plane `dst` [p][q][8] at output (y0, x0); outputs
// outside p x q are not written.
SQUALL_WINO_TARGET __attribute__((always_inline)) inline void output_tile(const float* m, int64_t stride, __m256 bias, bool relu, float* dst, int64_t p,
                                    int64_t q, int64_t y0, int64_t x0) {
  __m256 s[2][4];  // A^T M
  for (int j = 0; j < 4; ++j) {
    const __m256 m0 = _mm256_loadu_ps(m + j * stride), m1 = _mm256_loadu_ps(m + (4 + j) * stride);
    const __m256 m2 = _mm256_loadu_ps(m + (8 + j) * stride), m3 = _mm256_loadu_ps(m + (12 + j) * stride);
    s[0][j] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
    s[1][j] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
  }
  const __m256 zero = _mm256_setzero_ps();
  for (int i = 0; i < 2; ++i) {
    if (y0 + i >= p) break;
    __m256 out[2] = {_mm256_add_ps(_mm256_add_ps(s[i][0], s[i][1]), s[i][2]),
                     _mm256_sub_ps(_mm256_sub_ps(s[i][1], s[i][2]), s[i][3])};
    for (int j = 0; j < 2; ++j) {
      if (x0 + j >= q) break;
      __m256 o = _mm256_add_ps(out[j], bias);
      if (relu) o = _mm256_max_ps(o, zero);
      _mm256_storeu_ps(dst + ((y0 + i) * q + x0 + j) * kBlock, o);
    }
  }
}

// m[i][0, 8 NV) = sum_c v[i][c] u[c][0, 8 NV) for i < MR: rows of v `ldv` apart, of m `ldm`
// apart; u is the panel [c][8 NV]. 2 NV loads and MR broadcasts feed MR x NV FMAs per channel.
template <int MR, int NV>
SQUALL_WINO_TARGET void product_block(const float* v, int64_t ldv, const float* u, float* m, int64_t ldm,
                                      int64_t channels) {
  __m256 acc[MR][NV];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t c = 0; c < channels; ++c) {
    __m256 b[NV];
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) b[j] = _mm256_loadu_ps(u + (c * NV + j) * kBlock);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_broadcast_ss(v + i * ldv + c);
#pragma GCC unroll 2
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_fmadd_ps(a, b[j], acc[i][j]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) _mm256_storeu_ps(m + i * ldm + j * kBlock, acc[i][j]);
}

template <int NV>
SQUALL_WINO_TARGET void product_rows(int64_t rows, const float* v, int64_t ldv, const float* u, float* m,
                                     int64_t ldm, int64_t channels) {
  switch (rows) {
    case 1: product_block<1, NV>(v, ldv, u, m, ldm, channels); break;
    case 2: product_block<2, NV>(v, ldv, u, m, ldm, channels); break;
    case 3: product_block<3, NV>(v, ldv, u, m, ldm, channels); break;
    case 4: product_block<4, NV>(v, ldv, u, m, ldm, channels); break;
    case 5: product_block<5, NV>(v, ldv, u, m, ldm, channels); break;
    default: product_block<6, NV>(v, ldv, u, m, ldm, channels); break;
  }
}

struct Piece {
  const float* x;  // the sample's input, nChw8c
  float* y;        // the sample's output, nChw8c
  int64_t tile_row, tile0, tiles;
};

struct Dims {
  int64_t c, h, w, k, pad_h, pad_w, p, q;
};

// One piece of a row of tiles, 6 tiles at a time: their V [xi][6][c] in the thread's
// scratch, then M [xi][6][k] after it, then y. The three steps pass through the L1 cache
// (runs of a whole row through the L2 cost a fifth more at 16 channels).
SQUALL_WINO_TARGET void run_piece(const Dims& d, const Piece& pc, const float* u, const float* bias, bool relu,
                                  float* vbuf) {
  const int64_t v_xi = kTileRows * d.c, m_xi = kTileRows * d.k;  // floats per xi
  float* mbuf = vbuf + 16 * v_xi;
  const int64_t y_top = 2 * pc.tile_row;
  for (int64_t t0 = pc.tile0; t0 < pc.tile0 + pc.tiles; t0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, pc.tile0 + pc.tiles - t0);
    for (int64_t cb = 0; cb < d.c / kBlock; ++cb) {
      const float* plane = pc.x + cb * d.h * d.w * kBlock;
      for (int64_t t = 0; t < rows; ++t)
        input_tile(plane, d.h, d.w, y_top - d.pad_h, 2 * (t0 + t) - d.pad_w, vbuf + t * d.c + cb * kBlock, v_xi);
    }
    for (int64_t xi = 0; xi < 16; ++xi) {
      const float* uxi = u + xi * d.c * d.k;
      for (int64_t k0 = 0; k0 < d.k; k0 += kPanel) {
        if (panel_width(d.k, k0) == kPanel)
          product_rows<2>(rows, vbuf + xi * v_xi, d.c, uxi + k0 * d.c, mbuf + xi * m_xi + k0, d.k, d.c);
        else
          product_rows<1>(rows, vbuf + xi * v_xi, d.c, uxi + k0 * d.c, mbuf + xi * m_xi + k0, d.k, d.c);
      }
    }
    for (int64_t kb = 0; kb < d.k / kBlock; ++kb) {
      const __m256 b = bias != nullptr ? _mm256_loadu_ps(bias + kb * kBlock) : _mm256_setzero_ps();
      float* plane = pc.y + kb * d.p * d.q * kBlock;
      for (int64_t t = 0; t < rows; ++t)
        output_tile(mbuf + t * d.k + kb * kBlock, m_xi, b, relu, plane, d.p, d.q, y_top, 2 * (t0 + t));
    }
  }
}

}  // namespace

#else

bool cpu_supported() { return false; }

#endif

Forward::Forward(const nn::ConvDesc& d)
    : m_n(d.n), m_c(d.c), m_h(d.h), m_w(d.w), m_k(d.k), m_pad_h(d.pad_h), m_pad_w(d.pad_w) {
  if (!eligible(d)) throw Error("winograd: not a convolution this forward computes (winograd::eligible)");
  if (!cpu_supported()) throw Error("winograd: this CPU lacks AVX2 or FMA");
  m_p = d.h + 2 * d.pad_h - 2;
  m_q = d.w + 2 * d.pad_w - 2;
  m_tiles_h = (m_p + 1) / 2;
  m_tiles_w = (m_q + 1) / 2;
  m_u.resize(static_cast<size_t>(16 * m_c * m_k));
  m_scratch_per_thread = 16 * kTileRows * (m_c + m_k);  // V, then M
}

void Forward::set_weights(const float* w) {
  const int64_t c = m_c, k = m_k;
  float* u = m_u.data();
#pragma omp parallel for schedule(static) if (c * k >= 4096)
  for (int64_t o = 0; o < k; ++o) {
    const int64_t k0 = o / kPanel * kPanel, width = panel_width(k, k0), lane = o - k0;
    for (int64_t i = 0; i < c; ++i) {
      const float* g = w + (o * c + i) * 9;
      float gg[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        gg[0][j] = g[j];
        gg[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
        gg[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
        gg[3][j] = g[6 + j];
      }
      for (int r = 0; r < 4; ++r) {  // (G g) G^T
        const float row[4] = {gg[r][0], 0.5f * (gg[r][0] + gg[r][1] + gg[r][2]),
                              0.5f * (gg[r][0] - gg[r][1] + gg[r][2]), gg[r][2]};
        for (int s = 0; s < 4; ++s) u[(4 * r + s) * c * k + k0 * c + i * width + lane] = row[s];
      }
    }
  }
}

void Forward::run(const float* x, const float* bias, bool relu, float* y) {
#ifdef SQUALL_WINO_X86
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const auto need = static_cast<size_t>(threads * m_scratch_per_thread);
  if (m_scratch.size() < need) m_scratch.resize(need);  // once per plan and thread count
  const Dims d{m_c, m_h, m_w, m_k, m_pad_h, m_pad_w, m_p, m_q};
  // Pieces of whole rows of tiles, or of parts of rows where there are fewer than 4 rows per
  // thread (a small image of a small batch), in whole register blocks.
  const int64_t rows = m_n * m_tiles_h, blocks = (m_tiles_w + kTileRows - 1) / kTileRows;
  const int64_t parts = std::clamp<int64_t>((4 * threads + rows - 1) / rows, 1, blocks);
  const int64_t piece = (blocks + parts - 1) / parts * kTileRows, per_row = (m_tiles_w + piece - 1) / piece;
  const float* u = m_u.data();
  float* scratch = m_scratch.data();
  const int64_t per_thread = m_scratch_per_thread, x_sample = m_c * m_h * m_w, y_sample = m_k * m_p * m_q;
  const int64_t tiles_w = m_tiles_w, tiles_h = m_tiles_h;
#pragma omp parallel num_threads(threads)
  {
    float* own = scratch + omp_get_thread_num() * per_thread;
#pragma omp for schedule(dynamic)
    for (int64_t i = 0; i < rows * per_row; ++i) {
      const int64_t row = i / per_row, n = row / tiles_h, tile0 = i % per_row * piece;
      const Piece pc{x + n * x_sample, y + n * y_sample, row % tiles_h, tile0, std::min(piece, tiles_w - tile0)};
      run_piece(d, pc, u, bias, relu, own);
    }
  }
#else
  (void)x, (void)bias, (void)relu, (void)y;
  throw Error("winograd: not built for this CPU");
#endif
}

}  // namespace squall::cpu::winograd
