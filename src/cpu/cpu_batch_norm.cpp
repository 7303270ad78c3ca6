// Batch normalisation (spatial, per channel, with scale and shift) as direct OpenMP loops on
// NCHW and the channel-blocked layouts (NHWC runs on NCHW copies, cpu_layout.cpp). oneDNN's kernel for the plain layout ran at a fraction of memory bandwidth and made
// batch norm the largest cost of a ResNet step; these loops read the data twice forward
// and twice backward, accumulate in double, and parallelise over channels.
//
// Training normalises with the batch mean and biased variance, keeps mean and 1/std for
// backward, and updates the running statistics as PyTorch does, with the UNBIASED variance.
#include <cmath>
#include <algorithm>
#include <limits>
#include <vector>

#include <omp.h>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"
#include "src/nn/spatial.hpp"

namespace squall::cpu {

namespace {

// The gradient that reaches the norm: the ReLU's output gradient g where the forward's output
// x * scale + shift (recomputed in the forward's arithmetic) was positive, when it is fused.
template <bool Relu>
inline float bn_dy(float x, float scale, float shift, float g) {
  if constexpr (Relu) return x * scale + shift > 0.0f ? g : 0.0f;
  return g;
}

// The loops see a tensor as [n][c / B][hw][B]: B = 1 is NCHW, B = 8 or 16 the channel-blocked
// layouts, in which the B channels of a block are the lanes of one vector. A thread takes
// whole blocks, so that every channel's sums are one thread's.
template <int B>
class CpuBatchNormPlan final : public BatchNormPlan {
 public:
  explicit CpuBatchNormPlan(const BatchNormDesc& d)
      : m_desc(d),
        m_mean(static_cast<size_t>(d.c)),
        m_inv_std(static_cast<size_t>(d.c)),
        m_scale(static_cast<size_t>(d.c)),
        m_shift(static_cast<size_t>(d.c)) {
    if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || !(d.eps > 0.0f) || d.c % B != 0)
      throw Error("batch norm: invalid description " + Shape(d.n, d.c, d.h, d.w).str() +
                  " eps=" + std::to_string(d.eps) + " layout " + layout_name(d.layout));
  }

  void forward(Stream& s, const void* xv, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* yv, bool train) override {
    m_queued.run(s, [=, this, &s] {
      const auto* x = static_cast<const float*>(xv);
      auto* y = static_cast<float*>(yv);
      const int64_t n = m_desc.n, c = m_desc.c, hw = m_desc.h * m_desc.w, blocks = c / B;
      const int64_t count = n * hw;
      if (train && m_desc.group != nullptr) return forward_split(x, gamma, beta, running_mean, running_var, y);
      if (train && count < 2)
        throw Error("batch norm: training needs more than one value per channel, got input " +
                    Shape(n, c, m_desc.h, m_desc.w).str());
      const float momentum = m_desc.momentum;
#pragma omp parallel for schedule(static) if (n * c * hw > 16384)
      for (int64_t cb = 0; cb < blocks; ++cb) {
        float scale[B], shift[B];
        if (train) {
          double sum[B] = {}, sumsq[B] = {};
          for (int64_t i = 0; i < n; ++i) {
            const float* p = x + (i * blocks + cb) * hw * B;
            float s[B] = {}, q[B] = {};  // per row in float (vectorised), rows summed in double
            if constexpr (B == 1) {
#pragma omp simd reduction(+ : s[0], q[0])
              for (int64_t j = 0; j < hw; ++j) {
                s[0] += p[j];
                q[0] += p[j] * p[j];
              }
            } else {
              for (int64_t j = 0; j < hw; ++j)
#pragma omp simd
                for (int l = 0; l < B; ++l) {
                  s[l] += p[j * B + l];
                  q[l] += p[j * B + l] * p[j * B + l];
                }
            }
            for (int l = 0; l < B; ++l) {
              sum[l] += s[l];
              sumsq[l] += q[l];
            }
          }
          for (int l = 0; l < B; ++l) {
            const int64_t ch = cb * B + l;
            const double m = sum[l] / static_cast<double>(count);
            const double var = std::max(sumsq[l] / static_cast<double>(count) - m * m, 0.0);
            const auto mean = static_cast<float>(m);
            const auto inv_std = static_cast<float>(1.0 / std::sqrt(var + m_desc.eps));
            const double unbiased = var * static_cast<double>(count) / static_cast<double>(count - 1);
            running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] + momentum * m);
            running_var[ch] = static_cast<float>((1.0 - momentum) * running_var[ch] + momentum * unbiased);
            m_mean[static_cast<size_t>(ch)] = mean;
            m_inv_std[static_cast<size_t>(ch)] = inv_std;
            scale[l] = gamma[ch] * inv_std;
            shift[l] = beta[ch] - mean * scale[l];
          }
        } else {
          for (int l = 0; l < B; ++l) {
            const int64_t ch = cb * B + l;
            const float inv_std = 1.0f / std::sqrt(running_var[ch] + m_desc.eps);
            scale[l] = gamma[ch] * inv_std;
            shift[l] = beta[ch] - running_mean[ch] * scale[l];
          }
        }
        for (int l = 0; l < B; ++l) {
          m_scale[static_cast<size_t>(cb * B + l)] = scale[l];
          m_shift[static_cast<size_t>(cb * B + l)] = shift[l];
        }
        apply(x, y, cb);
      }
      m_have_batch_stats = train;
    });
  }

  void backward(Stream& s, const void* xv, const void* dyv, const float* gamma, void* dxv, float* dgamma,
                float* dbeta) override {
    m_queued.run(s, [=, this, &s] {
      if (m_desc.group != nullptr) {
        if (m_desc.relu)
          backward_split<true>(xv, dyv, gamma, dxv, dgamma, dbeta);
        else
          backward_split<false>(xv, dyv, gamma, dxv, dgamma, dbeta);
        return;
      }
      if (m_desc.relu)
        backward_impl<true>(xv, dyv, gamma, dxv, dgamma, dbeta);
      else
        backward_impl<false>(xv, dyv, gamma, dxv, dgamma, dbeta);
    });
  }

 private:
  // Relu: dy is the fused ReLU's output gradient (BatchNormDesc::relu).
  template <bool Relu>
  void backward_impl(const void* xv, const void* dyv, const float* gamma, void* dxv, float* dgamma, float* dbeta) {
    const auto* x = static_cast<const float*>(xv);
    const auto* dy = static_cast<const float*>(dyv);
    auto* dx = static_cast<float*>(dxv);
    if (!m_have_batch_stats) throw Error("batch norm: backward needs a forward with train=true first");
    const int64_t n = m_desc.n, c = m_desc.c, hw = m_desc.h * m_desc.w, blocks = c / B;
    const double count = static_cast<double>(n * hw);
#pragma omp parallel for schedule(static) if (n * c * hw > 16384)
    for (int64_t cb = 0; cb < blocks; ++cb) {
      float mean[B], inv_std[B], scale[B], shift[B];
      for (int l = 0; l < B; ++l) {
        mean[l] = m_mean[static_cast<size_t>(cb * B + l)];
        inv_std[l] = m_inv_std[static_cast<size_t>(cb * B + l)];
        scale[l] = m_scale[static_cast<size_t>(cb * B + l)];
        shift[l] = m_shift[static_cast<size_t>(cb * B + l)];
      }
      // With the ReLU fused, dy is the ReLU's output gradient: it reaches the norm where the
      // forward's output was positive, recomputed from x in the forward's arithmetic.
      double sum_dy[B] = {}, sum_dy_xhat[B] = {};
      for (int64_t i = 0; i < n; ++i) {
        const float* p = x + (i * blocks + cb) * hw * B;
        const float* g = dy + (i * blocks + cb) * hw * B;
        float s[B] = {}, t[B] = {};
        if constexpr (B == 1) {
#pragma omp simd reduction(+ : s[0], t[0])
          for (int64_t j = 0; j < hw; ++j) {
            const float gj = bn_dy<Relu>(p[j], scale[0], shift[0], g[j]);
            s[0] += gj;
            t[0] += gj * (p[j] - mean[0]);
          }
        } else {
          for (int64_t j = 0; j < hw; ++j)
#pragma omp simd
            for (int l = 0; l < B; ++l) {
              const float gj = bn_dy<Relu>(p[j * B + l], scale[l], shift[l], g[j * B + l]);
              s[l] += gj;
              t[l] += gj * (p[j * B + l] - mean[l]);
            }
        }
        for (int l = 0; l < B; ++l) {
          sum_dy[l] += s[l];
          sum_dy_xhat[l] += t[l];
        }
      }
      // dx = gamma / std * (dy - mean(dy) - xhat * mean(dy * xhat))
      float k[B], mean_dy[B], mean_dy_xhat[B];
      for (int l = 0; l < B; ++l) {
        const int64_t ch = cb * B + l;
        sum_dy_xhat[l] *= inv_std[l];
        dgamma[ch] = static_cast<float>(sum_dy_xhat[l]);
        dbeta[ch] = static_cast<float>(sum_dy[l]);
        k[l] = gamma[ch] * inv_std[l];
        mean_dy[l] = static_cast<float>(sum_dy[l] / count);
        mean_dy_xhat[l] = static_cast<float>(sum_dy_xhat[l] / count);
      }
      write_dx<Relu>(x, dy, dx, cb, k, mean_dy, mean_dy_xhat, mean, inv_std, scale, shift);
    }
  }

  // On a tile of a split sample (BatchNormDesc::group; a group of one included, which is
  // what a split run is compared with) the per-channel sums are accumulated in double from
  // values formed in double (a difference of two floats and the product of two such is exact
  // there), so that they hardly depend on the order of the additions: every split of a sample
  // gets the very float statistics, and with them the same normalised values, ReLU masks and
  // max-pool choices. The unsplit plan above sums in float rows, a third faster on ResNet-20
  // (bench/RESULTS.md, "One sample across ranks").
  //
  // Per channel of block cb: the sums of the gradient reaching the norm and of it times
  // x - mean.
  template <bool Relu>
  void grad_sums(const float* x, const float* dy, int64_t cb, const float* mean, const float* scale,
                 const float* shift, double* sum_dy, double* sum_dy_xc) const {
    const int64_t n = m_desc.n, hw = m_desc.h * m_desc.w, blocks = m_desc.c / B;
    double s[B] = {}, t[B] = {};
    for (int64_t i = 0; i < n; ++i) {
      const float* p = x + (i * blocks + cb) * hw * B;
      const float* g = dy + (i * blocks + cb) * hw * B;
      if constexpr (B == 1) {
        const double m0 = mean[0];
        double s0 = 0, t0 = 0;
#pragma omp simd reduction(+ : s0, t0)
        for (int64_t j = 0; j < hw; ++j) {
          const double gj = bn_dy<Relu>(p[j], scale[0], shift[0], g[j]);
          s0 += gj;
          t0 += gj * (static_cast<double>(p[j]) - m0);
        }
        s[0] += s0;
        t[0] += t0;
      } else {
        for (int64_t j = 0; j < hw; ++j)
#pragma omp simd
          for (int l = 0; l < B; ++l) {
            const double gj = bn_dy<Relu>(p[j * B + l], scale[l], shift[l], g[j * B + l]);
            s[l] += gj;
            t[l] += gj * (static_cast<double>(p[j * B + l]) - static_cast<double>(mean[l]));
          }
      }
    }
    for (int l = 0; l < B; ++l) {
      sum_dy[l] = s[l];
      sum_dy_xc[l] = t[l];
    }
  }

  // Per channel of block cb, about a shift K (the channel's first value, near its mean, so
  // that the sums do not cancel where the mean is large next to the spread): K, the sum of
  // x - K and the sum of (x - K)^2.
  void tile_sums(const float* x, int64_t cb, double* shift, double* sum, double* sumsq) const {
    const int64_t n = m_desc.n, hw = m_desc.h * m_desc.w, blocks = m_desc.c / B;
    double k[B], s[B] = {}, q[B] = {};
    for (int l = 0; l < B; ++l) k[l] = shift[l] = x[cb * hw * B + l];
    for (int64_t i = 0; i < n; ++i) {
      const float* p = x + (i * blocks + cb) * hw * B;
      if constexpr (B == 1) {
        const double k0 = k[0];
        double s0 = 0, q0 = 0;
#pragma omp simd reduction(+ : s0, q0)
        for (int64_t j = 0; j < hw; ++j) {
          const double v = static_cast<double>(p[j]) - k0;
          s0 += v;
          q0 += v * v;
        }
        s[0] += s0;
        q[0] += q0;
      } else {
        for (int64_t j = 0; j < hw; ++j)
#pragma omp simd
          for (int l = 0; l < B; ++l) {
            const double v = static_cast<double>(p[j * B + l]) - k[l];
            s[l] += v;
            q[l] += v * v;
          }
      }
    }
    for (int l = 0; l < B; ++l) {
      sum[l] = s[l];
      sumsq[l] = q[l];
    }
  }

  // dx = gamma / std * (dy - mean(dy) - xhat * mean(dy * xhat)) over one block of channels,
  // k = gamma / std.
  template <bool Relu>
  void write_dx(const float* x, const float* dy, float* dx, int64_t cb, const float* k, const float* mean_dy,
                const float* mean_dy_xhat, const float* mean, const float* inv_std, const float* scale,
                const float* shift) const {
    const int64_t n = m_desc.n, hw = m_desc.h * m_desc.w, blocks = m_desc.c / B;
    for (int64_t i = 0; i < n; ++i) {
      const float* p = x + (i * blocks + cb) * hw * B;
      const float* g = dy + (i * blocks + cb) * hw * B;
      float* q = dx + (i * blocks + cb) * hw * B;
      for (int64_t j = 0; j < hw; ++j)
#pragma omp simd
        for (int l = 0; l < B; ++l)
          q[j * B + l] = k[l] * (bn_dy<Relu>(p[j * B + l], scale[l], shift[l], g[j * B + l]) - mean_dy[l] -
                                 (p[j * B + l] - mean[l]) * inv_std[l] * mean_dy_xhat[l]);
    }
  }

  // y = x * scale + shift (and the ReLU) over one block of channels.
  void apply(const float* x, float* y, int64_t cb) const {
    const int64_t n = m_desc.n, hw = m_desc.h * m_desc.w, blocks = m_desc.c / B;
    float scale[B], shift[B];
    for (int l = 0; l < B; ++l) {
      scale[l] = m_scale[static_cast<size_t>(cb * B + l)];
      shift[l] = m_shift[static_cast<size_t>(cb * B + l)];
    }
    const bool relu = m_desc.relu;
    for (int64_t i = 0; i < n; ++i) {
      const float* p = x + (i * blocks + cb) * hw * B;
      float* q = y + (i * blocks + cb) * hw * B;
      for (int64_t j = 0; j < hw; ++j)
#pragma omp simd
        for (int l = 0; l < B; ++l) {
          const float v = p[j * B + l] * scale[l] + shift[l];
          q[j * B + l] = !relu || v > 0.0f ? v : 0.0f;  // the ReLU layer's expression
        }
    }
  }

  // Training forward on a tile of a split sample (BatchNormDesc::group): each rank's count,
  // mean and squared deviations per channel, merged over the group (Chan's update, in
  // group-rank order: every rank gets the same statistics), then normalised as unsplit.
  void forward_split(const float* x, const float* gamma, const float* beta, float* running_mean, float* running_var,
                     float* y) {
    const int64_t c = m_desc.c, hw = m_desc.h * m_desc.w, blocks = c / B;
    const auto count = static_cast<double>(m_desc.n * hw);
    std::vector<double>& moments = m_moments;  // kept: no allocation per step
    moments.assign(static_cast<size_t>(3 * c), 0.0);
#pragma omp parallel for schedule(static) if (m_desc.n * c * hw > 16384)
    for (int64_t cb = 0; cb < blocks; ++cb) {
      double shift[B], sum[B], sumsq[B];
      tile_sums(x, cb, shift, sum, sumsq);
      for (int l = 0; l < B; ++l) {
        const auto ch = static_cast<size_t>(cb * B + l);
        const double d = sum[l] / count;
        moments[3 * ch] = count;
        moments[3 * ch + 1] = shift[l] + d;
        moments[3 * ch + 2] = std::max(sumsq[l] - sum[l] * d, 0.0);
      }
    }
    m_desc.group->merge_moments(moments.data(), static_cast<size_t>(c));
    const float momentum = m_desc.momentum;
    for (int64_t ch = 0; ch < c; ++ch) {
      const auto k = static_cast<size_t>(ch);
      const double total = moments[3 * k], m = moments[3 * k + 1];
      if (total < 2)
        throw Error("batch norm: training needs more than one value per channel over the split sample, got " +
                    std::to_string(static_cast<int64_t>(total)));
      const double var = moments[3 * k + 2] / total;
      const auto inv_std = static_cast<float>(1.0 / std::sqrt(var + m_desc.eps));
      const double unbiased = moments[3 * k + 2] / (total - 1.0);
      running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] + momentum * m);
      running_var[ch] = static_cast<float>((1.0 - momentum) * running_var[ch] + momentum * unbiased);
      m_mean[k] = static_cast<float>(m);
      m_inv_std[k] = inv_std;
      m_scale[k] = gamma[ch] * inv_std;
      m_shift[k] = beta[ch] - m_mean[k] * m_scale[k];
    }
    m_group_count = moments.empty() ? 0.0 : moments[0];
#pragma omp parallel for schedule(static) if (m_desc.n * c * hw > 16384)
    for (int64_t cb = 0; cb < blocks; ++cb) apply(x, y, cb);
    m_have_batch_stats = true;
  }

  // Backward on a tile: the per-channel sums of dy and dy * (x - mean) over the group, then
  // dx as unsplit with the whole sample's count.
  template <bool Relu>
  void backward_split(const void* xv, const void* dyv, const float* gamma, void* dxv, float* dgamma, float* dbeta) {
    const auto* x = static_cast<const float*>(xv);
    const auto* dy = static_cast<const float*>(dyv);
    auto* dx = static_cast<float*>(dxv);
    if (!m_have_batch_stats) throw Error("batch norm: backward needs a forward with train=true first");
    const int64_t c = m_desc.c, blocks = c / B;
    std::vector<double>& sums = m_sums;  // [sum dy..., sum dy * (x - mean)...], kept: no allocation per step
    sums.assign(static_cast<size_t>(2 * c), 0.0);
#pragma omp parallel for schedule(static) if (m_desc.n * m_desc.c * m_desc.h * m_desc.w > 16384)
    for (int64_t cb = 0; cb < blocks; ++cb) {
      float mean[B], scale[B], shift[B];
      for (int l = 0; l < B; ++l) {
        const auto ch = static_cast<size_t>(cb * B + l);
        mean[l] = m_mean[ch];
        scale[l] = m_scale[ch];
        shift[l] = m_shift[ch];
      }
      double sum_dy[B], sum_dy_xc[B];
      grad_sums<Relu>(x, dy, cb, mean, scale, shift, sum_dy, sum_dy_xc);
      for (int l = 0; l < B; ++l) {
        sums[static_cast<size_t>(cb * B + l)] = sum_dy[l];
        sums[static_cast<size_t>(c + cb * B + l)] = sum_dy_xc[l];
      }
    }
    // dgamma and dbeta are this rank's share (the gradients' sum over the group adds the
    // shares, as it adds the convolutions'); dx needs the whole sample's sums.
    std::vector<double>& local = m_local_sums;
    local = sums;
    m_desc.group->sum(sums.data(), sums.size());
    const double count = m_group_count;
#pragma omp parallel for schedule(static) if (m_desc.n * m_desc.c * m_desc.h * m_desc.w > 16384)
    for (int64_t cb = 0; cb < blocks; ++cb) {
      float k[B], mean_dy[B], mean_dy_xhat[B], mean[B], inv_std[B], scale[B], shift[B];
      for (int l = 0; l < B; ++l) {
        const int64_t ch = cb * B + l;
        const auto u = static_cast<size_t>(ch);
        mean[l] = m_mean[u];
        inv_std[l] = m_inv_std[u];
        scale[l] = m_scale[u];
        shift[l] = m_shift[u];
        const double sum_dy_xhat = sums[static_cast<size_t>(c + ch)] * inv_std[l];
        dgamma[ch] = static_cast<float>(local[static_cast<size_t>(c + ch)] * inv_std[l]);
        dbeta[ch] = static_cast<float>(local[u]);
        k[l] = gamma[ch] * inv_std[l];
        mean_dy[l] = static_cast<float>(sums[u] / count);
        mean_dy_xhat[l] = static_cast<float>(sum_dy_xhat / count);
      }
      write_dx<Relu>(x, dy, dx, cb, k, mean_dy, mean_dy_xhat, mean, inv_std, scale, shift);
    }
  }

  BatchNormDesc m_desc;
  double m_group_count = 0;  // values per channel over the whole split sample (forward_split)
  std::vector<double> m_moments, m_sums, m_local_sums;  // forward_split's and backward_split's, reused
  std::vector<float> m_mean, m_inv_std;  // batch statistics of the last training forward
  std::vector<float> m_scale, m_shift;   // y = x * scale + shift per channel, as the last forward computed it
  bool m_have_batch_stats = false;
  QueuedWork m_queued;  // last: its destructor waits for the passes still queued
};

}  // namespace

std::unique_ptr<BatchNormPlan> CpuBackend::make_batch_norm(const BatchNormDesc& d) {
  if (d.layout == Layout::nhwc) {
    BatchNormDesc nchw = d;
    nchw.layout = Layout::nchw;
    // Not virtual: a subclass (a test's recording backend) sees the one plan it was asked for.
    return make_nhwc_batch_norm(*this, d, CpuBackend::make_batch_norm(nchw));
  }
  if (d.dtype != DType::f32) {
    return make_reduced_batch_norm(*this, d, std::make_unique<CpuBatchNormPlan<1>>(as_f32(d)));
  }
  switch (d.layout) {
    case Layout::nchw8c: return std::make_unique<CpuBatchNormPlan<8>>(d);
    case Layout::nchw16c: return std::make_unique<CpuBatchNormPlan<16>>(d);
    case Layout::nchw: return std::make_unique<CpuBatchNormPlan<1>>(d);
    default: throw Error(std::string("batch norm: no CPU plan for layout ") + layout_name(d.layout));
  }
}

}  // namespace squall::cpu
