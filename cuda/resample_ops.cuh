#pragma once
// Global average pooling and bilinear resizing (align_corners = false, PyTorch's), as
// src/cpu/cpu_elementwise.cpp computes them: the bodies and launch sequences, run on a
// stream by cuda/resample.cu and on the host by the cuda-host tests.
//
// The bilinear backward is a gather, no atomics, so it is deterministic. Where an input
// element is read by few outputs, one thread per input element sums them in the CPU's order
// (with --fmad=false, bit for bit the CPU's result). Where it is read by many (DeepLabv3+'s
// image pooling: a 1x1 input upsampled to the whole feature map), that would leave n * c
// threads each summing thousands of values, so a block per input element shares its
// candidates out, sums in double and rounds once: close to the exact sum, no longer the
// CPU's float sum bit for bit.
#include <cmath>
#include <cstdint>

#include "cuda/grid.cuh"

namespace squall::cuda::kernels::detail {

// ---- global average pooling ----

// One warp per (sample, channel) row: lane l sums the row's elements l, l + 32, ...
template <class T>
struct GapForwardOp {
  const T* x;
  T* y;
  int64_t hw;
  float inv;
  __host__ __device__ float lane(int64_t row, int l) const {
    const T* r = x + row * hw;
    float sum = 0.0f;
    for (int64_t j = l; j < hw; j += 32) sum += to_float(r[j]);
    return sum;
  }
  __host__ __device__ void finish(int64_t row, float sum) const { y[row] = from_float<T>(sum * inv); }
};

template <class T>
struct GapBackwardOp {
  const T* dy;
  T* dx;
  int64_t hw;
  float inv;
  __host__ __device__ void operator()(size_t k) const {
    dx[k] = from_float<T>(to_float(dy[k / static_cast<size_t>(hw)]) * inv);
  }
};

// ---- bilinear ----

// PyTorch's area_pixel_compute_source_index for align_corners = false, clamped at 0; the
// upper neighbour is clamped at the far edge. Rounded step by step (no fused multiply-add)
// so that the indices and weights are the CPU's exactly.
struct Tap {
  int64_t i0, i1;
  float l0, l1;
};

__host__ __device__ __forceinline__ Tap source_tap(int64_t d, int64_t in, float scale) {
  float src = fadd_rn(fmul_rn(scale, fadd_rn(static_cast<float>(d), 0.5f)), -0.5f);
  if (src < 0.0f) src = 0.0f;
  const int64_t t = static_cast<int64_t>(src);
  const int64_t i0 = t < in - 1 ? t : in - 1;
  const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
  const float l1 = fsub_rn(src, static_cast<float>(i0));
  return Tap{i0, i1, fsub_rn(1.0f, l1), l1};
}

template <class T>
struct BilinearForwardOp {
  const T* x;
  T* y;
  int64_t h, w, oh, ow;
  float scale_h, scale_w;
  __host__ __device__ void operator()(size_t k) const {
    const int64_t ox = static_cast<int64_t>(k % static_cast<size_t>(ow));
    const int64_t row = static_cast<int64_t>(k / static_cast<size_t>(ow));  // plane * oh + oy
    const int64_t oy = row % oh, plane = row / oh;
    const Tap ty = source_tap(oy, h, scale_h);
    const Tap tx = source_tap(ox, w, scale_w);
    const T* r0 = x + plane * h * w + ty.i0 * w;
    const T* r1 = x + plane * h * w + ty.i1 * w;
    y[k] = from_float<T>(ty.l0 * (tx.l0 * to_float(r0[tx.i0]) + tx.l1 * to_float(r0[tx.i1])) +
                         ty.l1 * (tx.l0 * to_float(r1[tx.i0]) + tx.l1 * to_float(r1[tx.i1])));
  }
};

// The output indices along one axis whose taps can touch input index i: the source
// coordinate of output d is about (d + 0.5) * in / out - 0.5 and touches i when its floor
// is i - 1 or i, so d lies in [(i - 0.5) out / in - 0.5, (i + 1.5) out / in - 0.5), widened
// by 2 for rounding and clamped. Outputs whose coordinate was clamped at 0 touch inputs 0
// and 1 (the latter with weight 0, which the CPU adds too): for those the range starts at 0.
// Every candidate is checked against its exact tap, so the range need only be wide enough.
__host__ __device__ __forceinline__ void candidates(int64_t i, int64_t in, int64_t out, int64_t& lo, int64_t& hi) {
  const double ratio = static_cast<double>(out) / static_cast<double>(in);
  lo = i <= 1 ? 0 : static_cast<int64_t>(floor((static_cast<double>(i) - 0.5) * ratio - 0.5)) - 2;
  hi = static_cast<int64_t>(ceil((static_cast<double>(i) + 1.5) * ratio - 0.5)) + 2;
  if (lo < 0) lo = 0;
  if (hi > out - 1) hi = out - 1;
}

// dx[plane, iy, ix] = sum over outputs (oy, ox), in row-major order, of the weight with
// which each read it: the four terms of one output added in the CPU scatter's order
// (r0[i0], r0[i1], r1[i0], r1[i1]), so the float sum is the CPU's.
template <class T>
struct BilinearGatherOp {
  const T* dy;
  T* dx;
  int64_t h, w, oh, ow;
  float scale_h, scale_w;
  __host__ __device__ void operator()(size_t k) const {
    const int64_t ix = static_cast<int64_t>(k % static_cast<size_t>(w));
    const int64_t row = static_cast<int64_t>(k / static_cast<size_t>(w));  // plane * h + iy
    const int64_t iy = row % h, plane = row / h;
    int64_t oy_lo, oy_hi, ox_lo, ox_hi;
    candidates(iy, h, oh, oy_lo, oy_hi);
    candidates(ix, w, ow, ox_lo, ox_hi);
    const T* d = dy + plane * oh * ow;
    float g = 0.0f;
    for (int64_t oy = oy_lo; oy <= oy_hi; ++oy) {
      const Tap ty = source_tap(oy, h, scale_h);
      const bool y0 = ty.i0 == iy, y1 = ty.i1 == iy;
      if (!y0 && !y1) continue;
      const T* drow = d + oy * ow;
      for (int64_t ox = ox_lo; ox <= ox_hi; ++ox) {
        const Tap tx = source_tap(ox, w, scale_w);
        const bool x0 = tx.i0 == ix, x1 = tx.i1 == ix;
        if (!x0 && !x1) continue;
        const float v = to_float(drow[ox]);
        if (y0 && x0) g = fadd_rn(g, fmul_rn(fmul_rn(ty.l0, tx.l0), v));
        if (y0 && x1) g = fadd_rn(g, fmul_rn(fmul_rn(ty.l0, tx.l1), v));
        if (y1 && x0) g = fadd_rn(g, fmul_rn(fmul_rn(ty.l1, tx.l0), v));
        if (y1 && x1) g = fadd_rn(g, fmul_rn(fmul_rn(ty.l1, tx.l1), v));
      }
    }
    dx[k] = from_float<T>(g);
  }
};

// The same sum for input element u (plane * h * w + iy * w + ix) by a whole block: thread t
// takes candidates t, t + blockDim, ... of the candidate rectangle (row-major), each term
// rounded in float as the CPU rounds it, added in double; block_sum adds the threads' sums
// and the total is rounded to float, then T, once.
template <class T>
struct BilinearBlockOp {
  static constexpr int kSums = 1;
  const T* dy;
  T* dx;
  int64_t h, w, oh, ow;
  float scale_h, scale_w;
  __host__ __device__ Partial<1> part(int64_t u, const Place& at) const {
    const int64_t ix = u % w, row = u / w;
    const int64_t iy = row % h, plane = row / h;
    int64_t oy_lo, oy_hi, ox_lo, ox_hi;
    candidates(iy, h, oh, oy_lo, oy_hi);
    candidates(ix, w, ow, ox_lo, ox_hi);
    const int64_t nx = ox_hi - ox_lo + 1, count = (oy_hi - oy_lo + 1) * nx;
    const T* d = dy + plane * oh * ow;
    double acc = 0.0;
    for (int64_t k = at.thread; k < count; k += at.threads) {
      const int64_t oy = oy_lo + k / nx, ox = ox_lo + k % nx;
      const Tap ty = source_tap(oy, h, scale_h);
      const Tap tx = source_tap(ox, w, scale_w);
      const bool y0 = ty.i0 == iy, y1 = ty.i1 == iy, x0 = tx.i0 == ix, x1 = tx.i1 == ix;
      if ((!y0 && !y1) || (!x0 && !x1)) continue;
      const float v = to_float(d[oy * ow + ox]);
      if (y0 && x0) acc += static_cast<double>(fmul_rn(fmul_rn(ty.l0, tx.l0), v));
      if (y0 && x1) acc += static_cast<double>(fmul_rn(fmul_rn(ty.l0, tx.l1), v));
      if (y1 && x0) acc += static_cast<double>(fmul_rn(fmul_rn(ty.l1, tx.l0), v));
      if (y1 && x1) acc += static_cast<double>(fmul_rn(fmul_rn(ty.l1, tx.l1), v));
    }
    return Partial<1>{{acc}, 0};
  }
  __host__ __device__ void finish(int64_t u, const Partial<1>& total) const {
    dx[u] = from_float<T>(static_cast<float>(total.sum[0]));
  }
};

// Most candidate outputs one thread of the gather sums; past it the block form runs. Plain
// upsampling by 2, 4 or 8 stays under it (about (2 out / in + 5)^2 candidates: 81, 169,
// 441); a 1x1 input has oh * ow.
constexpr int64_t kBilinearGatherMaxFanIn = 1024;

// About the most candidates along one axis that candidates() gives an input element (an
// estimate: it only picks the form, every candidate is still checked against its tap).
inline int64_t bilinear_axis_fan_in(int64_t in, int64_t out) {
  const int64_t widest = static_cast<int64_t>(std::ceil(2.0 * static_cast<double>(out) / static_cast<double>(in))) + 6;
  return widest < out ? widest : out;
}

inline bool bilinear_block_path(int64_t h, int64_t w, int64_t oh, int64_t ow) {
  return bilinear_axis_fan_in(h, oh) * bilinear_axis_fan_in(w, ow) > kBilinearGatherMaxFanIn;
}

// Largest grid of the block form; past it blocks loop over the input elements.
constexpr int64_t kMaxBilinearGrid = 65535;

// ---- launch sequences ----

template <class L>
void gap_forward_on(const L& l, int t, const void* x, void* y, int64_t nc, int64_t hw) {
  if (nc <= 0) return;
  const float inv = 1.0f / static_cast<float>(hw);
  const size_t warps_per_block = kThreads / 32;
  const size_t blocks = (static_cast<size_t>(nc) + warps_per_block - 1) / warps_per_block;
  dispatch_float(t, "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    const GapForwardOp<T> op{static_cast<const T*>(x), static_cast<T*>(y), hw, inv};
    l.warp_rows(grid_for(blocks * kThreads), kThreads, op, nc);
  });
}

template <class L>
void gap_backward_on(const L& l, int t, const void* dy, void* dx, int64_t nc, int64_t hw) {
  if (nc <= 0 || hw <= 0) return;
  const float inv = 1.0f / static_cast<float>(hw);
  const size_t total = static_cast<size_t>(nc) * static_cast<size_t>(hw);
  dispatch_float(t, "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    l.for_each(grid_for(total), kThreads, GapBackwardOp<T>{static_cast<const T*>(dy), static_cast<T*>(dx), hw, inv},
               total);
  });
}

template <class L>
void bilinear_forward_on(const L& l, int t, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                         int64_t ow) {
  if (nc <= 0 || h <= 0 || w <= 0 || oh <= 0 || ow <= 0) return;
  const float scale_h = static_cast<float>(h) / static_cast<float>(oh);
  const float scale_w = static_cast<float>(w) / static_cast<float>(ow);
  const size_t total = static_cast<size_t>(nc) * static_cast<size_t>(oh) * static_cast<size_t>(ow);
  dispatch_float(t, "bilinear", [&](auto tag) {
    using T = decltype(tag);
    l.for_each(grid_for(total), kThreads,
               BilinearForwardOp<T>{static_cast<const T*>(x), static_cast<T*>(y), h, w, oh, ow, scale_h, scale_w},
               total);
  });
}

template <class L>
void bilinear_backward_on(const L& l, int t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w, int64_t oh,
                          int64_t ow) {
  if (nc <= 0 || h <= 0 || w <= 0) return;
  const size_t total = static_cast<size_t>(nc) * static_cast<size_t>(h) * static_cast<size_t>(w);
  dispatch_float(t, "bilinear", [&](auto tag) {
    using T = decltype(tag);
    if (oh <= 0 || ow <= 0) return l.zero(dx, total * sizeof(T));  // no output reads anything
    const float scale_h = static_cast<float>(h) / static_cast<float>(oh);
    const float scale_w = static_cast<float>(w) / static_cast<float>(ow);
    const T* d = static_cast<const T*>(dy);
    T* g = static_cast<T*>(dx);
    if (bilinear_block_path(h, w, oh, ow)) {
      const auto units = static_cast<int64_t>(total);
      l.reduce(static_cast<unsigned>(units < kMaxBilinearGrid ? units : kMaxBilinearGrid), kThreads,
               BilinearBlockOp<T>{d, g, h, w, oh, ow, scale_h, scale_w}, units);
    } else {
      l.for_each(grid_for(total), kThreads, BilinearGatherOp<T>{d, g, h, w, oh, ow, scale_h, scale_w}, total);
    }
  });
}

}  // namespace squall::cuda::kernels::detail
