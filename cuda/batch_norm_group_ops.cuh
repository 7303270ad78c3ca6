#pragma once
// Batch normalisation over a sample split across a group of ranks (parallel.spatial; the plan
// is cuda/batch_norm_group.cpp): the per-channel sums each rank adds to its group's, and the
// element-wise passes that use the group's. The arithmetic is the CPU's split batch norm's
// (src/cpu/cpu_batch_norm.cpp): moments in double about a shift (the channel's first value
// on this tile), y = x * scale + shift in float, the fused ReLU's mask recomputed from x, and
// dx = k (dy - mean(dy) - xhat mean(dy xhat)). Shared with the host grid emulator; the host's
// half of each pass is cuda/batch_norm_group_host.hpp.
#include <cstdint>

#include "cuda/grid.cuh"
#include "cuda/kernel_util.cuh"
#include "cuda/vectorised.cuh"

namespace squall::cuda::kernels::detail {

// Element j (of n * hw, sample-major) of channel ch.
template <class I>
__host__ __device__ __forceinline__ I bn_element(I j, I ch, I c, I hw, bool nhwc) {
  if (nhwc) return j * c + ch;
  const I i = j / hw;
  return (i * c + ch) * hw + (j - i * hw);
}

template <class I>
__host__ __device__ __forceinline__ I bn_channel(I k, I c, I hw, bool nhwc) {
  return nhwc ? k % c : (k / hw) % c;
}

// Unit ch: its count, mean and sum of squared deviations over this tile, as 3 doubles
// (6 floats) per channel.
template <class T, class I>
struct BnGroupMomentsOp {
  static constexpr int kSums = 2;
  const T* x;
  float* moments;
  I c, hw, count;
  bool nhwc;
  __host__ __device__ Partial<2> part(int64_t u, const Place& at) const {
    const I ch = static_cast<I>(u);
    const double shift = static_cast<double>(to_float(x[bn_element<I>(0, ch, c, hw, nhwc)]));
    double s = 0.0, q = 0.0;
    for (I j = static_cast<I>(at.thread); j < count; j += static_cast<I>(at.threads)) {
      const double v = static_cast<double>(to_float(x[bn_element(j, ch, c, hw, nhwc)])) - shift;
      s += v;
      q += v * v;
    }
    return Partial<2>{{s, q}, 0};
  }
  __host__ __device__ void finish(int64_t u, const Partial<2>& total) const {
    const I ch = static_cast<I>(u);
    const double n = static_cast<double>(count);
    const double shift = static_cast<double>(to_float(x[bn_element<I>(0, ch, c, hw, nhwc)]));
    const double d = total.sum[0] / n;
    const double m2 = total.sum[1] - total.sum[0] * d;
    store_double(moments + 6 * u, n);
    store_double(moments + 6 * u + 2, shift + d);
    store_double(moments + 6 * u + 4, m2 > 0.0 ? m2 : 0.0);
  }
};

// y = x * scale + shift per channel (and the ReLU). p: scale[c], then shift[c].
template <class T, class I>
struct BnGroupApplyOp {
  const T* x;
  T* y;
  const float* p;
  I c, hw;
  bool nhwc, relu;
  template <int N, class J>
  __host__ __device__ void apply(J i) const {
    for (int e = 0; e < N; ++e) {
      const I k = static_cast<I>(i) + static_cast<I>(e);
      const I ch = bn_channel(k, c, hw, nhwc);
      float v = to_float(x[k]) * p[ch] + p[c + ch];
      if (relu && !(v > 0.0f)) v = 0.0f;
      y[k] = from_float<T>(v);
    }
  }
};

// The fused ReLU's gradient: dy where x * scale + shift (the forward's arithmetic) was positive.
__host__ __device__ __forceinline__ float bn_masked_dy(bool relu, float x, float scale, float shift, float g) {
  return !relu || x * scale + shift > 0.0f ? g : 0.0f;
}

// Unit ch: the sums of dy and dy (x - mean) over this tile (2 doubles, 4 floats, per channel).
// p: mean[c], inv_std[c], scale[c], shift[c].
template <class T, class I>
struct BnGroupGradSumsOp {
  static constexpr int kSums = 2;
  const T* x;
  const T* dy;
  const float* p;
  float* sums;
  I c, hw, count;
  bool nhwc, relu;
  __host__ __device__ Partial<2> part(int64_t u, const Place& at) const {
    const I ch = static_cast<I>(u);
    const float mean = p[ch], scale = p[2 * c + ch], shift = p[3 * c + ch];
    double s = 0.0, t = 0.0;
    for (I j = static_cast<I>(at.thread); j < count; j += static_cast<I>(at.threads)) {
      const I k = bn_element(j, ch, c, hw, nhwc);
      const float xv = to_float(x[k]);
      const float g = bn_masked_dy(relu, xv, scale, shift, to_float(dy[k]));
      s += static_cast<double>(g);
      t += static_cast<double>(g) * static_cast<double>(xv - mean);
    }
    return Partial<2>{{s, t}, 0};
  }
  __host__ __device__ void finish(int64_t u, const Partial<2>& total) const {
    store_double(sums + 4 * u, total.sum[0]);
    store_double(sums + 4 * u + 2, total.sum[1]);
  }
};

// dx = k (dy - mean_dy - xhat mean_dy_xhat). p: mean, inv_std, scale, shift, k, mean_dy,
// mean_dy_xhat, c each.
template <class T, class I>
struct BnGroupDxOp {
  const T* x;
  const T* dy;
  T* dx;
  const float* p;
  I c, hw;
  bool nhwc, relu;
  template <int N, class J>
  __host__ __device__ void apply(J i) const {
    for (int e = 0; e < N; ++e) {
      const I k = static_cast<I>(i) + static_cast<I>(e);
      const I ch = bn_channel(k, c, hw, nhwc);
      const float xv = to_float(x[k]);
      const float mean = p[ch], inv_std = p[c + ch], scale = p[2 * c + ch], shift = p[3 * c + ch];
      const float g = bn_masked_dy(relu, xv, scale, shift, to_float(dy[k]));
      dx[k] = from_float<T>(p[4 * c + ch] * (g - p[5 * c + ch] - (xv - mean) * inv_std * p[6 * c + ch]));
    }
  }
};

inline unsigned bn_group_grid(int64_t c) { return static_cast<unsigned>(c < 65535 ? c : 65535); }

// moments: 6 floats per channel (count, mean, m2 as doubles).
template <class L>
void bn_group_moments_on(const L& l, int t, bool nhwc, const void* x, float* moments, int64_t n, int64_t c,
                         int64_t hw) {
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(c) * static_cast<size_t>(hw);
  dispatch_float(t, "batch norm", [&](auto tag) {
    using T = decltype(tag);
    with_index(total, [&](auto index) {
      using I = decltype(index);
      l.reduce(bn_group_grid(c), kThreads,
               BnGroupMomentsOp<T, I>{static_cast<const T*>(x), moments, static_cast<I>(c), static_cast<I>(hw),
                                      static_cast<I>(n * hw), nhwc},
               c);
    });
  });
}

// p: scale[c], shift[c].
template <class L>
void bn_group_apply_on(const L& l, int t, bool nhwc, bool relu, const void* x, void* y, const float* p, int64_t n,
                       int64_t c, int64_t hw) {
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(c) * static_cast<size_t>(hw);
  dispatch_float(t, "batch norm", [&](auto tag) {
    using T = decltype(tag);
    with_index(total, [&](auto index) {
      using I = decltype(index);
      map_on<1>(l,
                BnGroupApplyOp<T, I>{static_cast<const T*>(x), static_cast<T*>(y), p, static_cast<I>(c),
                                     static_cast<I>(hw), nhwc, relu},
                total, false);
    });
  });
}

// p: mean, inv_std, scale, shift (c each); sums: 4 floats per channel (sum dy, sum dy (x - mean)).
template <class L>
void bn_group_grad_sums_on(const L& l, int t, bool nhwc, bool relu, const void* x, const void* dy, const float* p,
                           float* sums, int64_t n, int64_t c, int64_t hw) {
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(c) * static_cast<size_t>(hw);
  dispatch_float(t, "batch norm", [&](auto tag) {
    using T = decltype(tag);
    with_index(total, [&](auto index) {
      using I = decltype(index);
      l.reduce(bn_group_grid(c), kThreads,
               BnGroupGradSumsOp<T, I>{static_cast<const T*>(x), static_cast<const T*>(dy), p, sums,
                                       static_cast<I>(c), static_cast<I>(hw), static_cast<I>(n * hw), nhwc, relu},
               c);
    });
  });
}

// p: mean, inv_std, scale, shift, k, mean_dy, mean_dy_xhat (c each).
template <class L>
void bn_group_dx_on(const L& l, int t, bool nhwc, bool relu, const void* x, const void* dy, void* dx, const float* p,
                    int64_t n, int64_t c, int64_t hw) {
  const size_t total = static_cast<size_t>(n) * static_cast<size_t>(c) * static_cast<size_t>(hw);
  dispatch_float(t, "batch norm", [&](auto tag) {
    using T = decltype(tag);
    with_index(total, [&](auto index) {
      using I = decltype(index);
      map_on<1>(l,
                BnGroupDxOp<T, I>{static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), p,
                                  static_cast<I>(c), static_cast<I>(hw), nhwc, relu},
                total, false);
    });
  });
}

}  // namespace squall::cuda::kernels::detail
