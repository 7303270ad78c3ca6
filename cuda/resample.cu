// Global average pooling and bilinear resizing (align_corners = false, PyTorch's), as
// src/cpu/cpu_elementwise.cpp computes them. The bilinear backward is a gather: one thread
// per input element sums, in the CPU's order, the output elements that read it. No atomics,
// so it is deterministic and (with this target's --fmad=false) bit for bit the CPU's result.
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/kernel_util.cuh"
#include "cuda/kernels.cuh"

namespace squall::cuda::kernels {

using detail::global_index;
using detail::global_stride;
using detail::grid_for;
using detail::from_float;
using detail::kThreads;
using detail::to_float;

namespace {

// ---- global average pooling ----

// One warp per (sample, channel) row.
template <class T>
__global__ void gap_forward_kernel(const T* x, T* y, int64_t nc, int64_t hw, float inv) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(global_index() >> 5);
  const int64_t warps = static_cast<int64_t>(global_stride() >> 5);
  for (int64_t row = warp; row < nc; row += warps) {
    const T* r = x + row * hw;
    float sum = 0.0f;
    for (int64_t j = lane; j < hw; j += 32) sum += to_float(r[j]);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) y[row] = from_float<T>(sum * inv);
  }
}

template <class T>
__global__ void gap_backward_kernel(const T* dy, T* dx, size_t total, int64_t hw, float inv) {
  for (size_t k = global_index(); k < total; k += global_stride())
    dx[k] = from_float<T>(to_float(dy[k / static_cast<size_t>(hw)]) * inv);
}

// ---- bilinear ----

// PyTorch's area_pixel_compute_source_index for align_corners = false, clamped at 0; the
// upper neighbour is clamped at the far edge. Rounded step by step (no fused multiply-add)
// so that the indices and weights are the CPU's exactly.
struct Tap {
  int64_t i0, i1;
  float l0, l1;
};

__device__ __forceinline__ Tap source_tap(int64_t d, int64_t in, float scale) {
  float src = __fadd_rn(__fmul_rn(scale, __fadd_rn(static_cast<float>(d), 0.5f)), -0.5f);
  if (src < 0.0f) src = 0.0f;
  const int64_t t = static_cast<int64_t>(src);
  const int64_t i0 = t < in - 1 ? t : in - 1;
  const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
  const float l1 = __fsub_rn(src, static_cast<float>(i0));
  return Tap{i0, i1, __fsub_rn(1.0f, l1), l1};
}

template <class T>
__global__ void bilinear_forward_kernel(const T* x, T* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                                        int64_t ow, float scale_h, float scale_w) {
  const size_t total = static_cast<size_t>(nc) * static_cast<size_t>(oh) * static_cast<size_t>(ow);
  for (size_t k = global_index(); k < total; k += global_stride()) {
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
}

// The output indices along one axis whose taps can touch input index i: the source
// coordinate of output d is about (d + 0.5) * in / out - 0.5 and touches i when its floor
// is i - 1 or i, so d lies in [(i - 0.5) out / in - 0.5, (i + 1.5) out / in - 0.5), widened
// by 2 for rounding and clamped. Outputs whose coordinate was clamped at 0 touch inputs 0
// and 1 (the latter with weight 0, which the CPU adds too): for those the range starts at 0.
// Every candidate is checked against its exact tap, so the range need only be wide enough.
__device__ __forceinline__ void candidates(int64_t i, int64_t in, int64_t out, int64_t& lo, int64_t& hi) {
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
__global__ void bilinear_backward_kernel(const T* dy, T* dx, int64_t nc, int64_t h, int64_t w,
                                         int64_t oh, int64_t ow, float scale_h, float scale_w) {
  const size_t total = static_cast<size_t>(nc) * static_cast<size_t>(h) * static_cast<size_t>(w);
  for (size_t k = global_index(); k < total; k += global_stride()) {
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
        if (y0 && x0) g = __fadd_rn(g, __fmul_rn(__fmul_rn(ty.l0, tx.l0), v));
        if (y0 && x1) g = __fadd_rn(g, __fmul_rn(__fmul_rn(ty.l0, tx.l1), v));
        if (y1 && x0) g = __fadd_rn(g, __fmul_rn(__fmul_rn(ty.l1, tx.l0), v));
        if (y1 && x1) g = __fadd_rn(g, __fmul_rn(__fmul_rn(ty.l1, tx.l1), v));
      }
    }
    dx[k] = from_float<T>(g);
  }
}

}  // namespace

void global_avg_pool_forward(cudaStream_t s, int t, const void* x, void* y, int64_t nc, int64_t hw) {
  if (nc <= 0) return;
  const float inv = 1.0f / static_cast<float>(hw);
  const size_t warps_per_block = kThreads / 32;
  const size_t blocks = (static_cast<size_t>(nc) + warps_per_block - 1) / warps_per_block;
  detail::dispatch_float(t, "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    gap_forward_kernel<T><<<grid_for(blocks * kThreads), kThreads, 0, s>>>(static_cast<const T*>(x),
                                                                          static_cast<T*>(y), nc, hw, inv);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void global_avg_pool_backward(cudaStream_t s, int t, const void* dy, void* dx, int64_t nc, int64_t hw) {
  if (nc <= 0 || hw <= 0) return;
  const float inv = 1.0f / static_cast<float>(hw);
  const size_t total = static_cast<size_t>(nc) * static_cast<size_t>(hw);
  detail::dispatch_float(t, "global_avg_pool", [&](auto tag) {
    using T = decltype(tag);
    gap_backward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(static_cast<const T*>(dy), static_cast<T*>(dx),
                                                               total, hw, inv);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void bilinear_forward(cudaStream_t s, int t, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                      int64_t ow) {
  if (nc <= 0 || h <= 0 || w <= 0 || oh <= 0 || ow <= 0) return;
  const float scale_h = static_cast<float>(h) / static_cast<float>(oh);
  const float scale_w = static_cast<float>(w) / static_cast<float>(ow);
  const size_t total = static_cast<size_t>(nc) * static_cast<size_t>(oh) * static_cast<size_t>(ow);
  detail::dispatch_float(t, "bilinear", [&](auto tag) {
    using T = decltype(tag);
    bilinear_forward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                    nc, h, w, oh, ow, scale_h, scale_w);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

void bilinear_backward(cudaStream_t s, int t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w,
                       int64_t oh, int64_t ow) {
  if (nc <= 0 || h <= 0 || w <= 0) return;
  const size_t total = static_cast<size_t>(nc) * static_cast<size_t>(h) * static_cast<size_t>(w);
  detail::dispatch_float(t, "bilinear", [&](auto tag) {
    using T = decltype(tag);
    if (oh <= 0 || ow <= 0) {  // no output reads anything: the gradient is zero
      SQUALL_CUDA_CHECK(cudaMemsetAsync(dx, 0, total * sizeof(T), s));
      return;
    }
    const float scale_h = static_cast<float>(h) / static_cast<float>(oh);
    const float scale_w = static_cast<float>(w) / static_cast<float>(ow);
    bilinear_backward_kernel<T><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), nc, h, w, oh, ow, scale_h, scale_w);
  });
  SQUALL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace squall::cuda::kernels
