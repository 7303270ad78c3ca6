// Batch normalisation (spatial, per channel, with scale and shift) as direct OpenMP loops on
// NCHW and the channel-blocked layouts (NHWC runs on NCHW copies, cpu_layout.cpp). oneDNN's kernel for the plain layout ran at a fraction of memory bandwidth and made
// batch norm the largest cost of a ResNet step; these loops read the data twice forward
// and twice backward, accumulate in double, and parallelise over channels.
//
// Training normalises with the batch mean and biased variance, keeps mean and 1/std for
// backward, and updates the running statistics as PyTorch does, with the UNBIASED variance.
#include <cmath>
#include <limits>
#include <vector>

#include <omp.h>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"

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
      m_have_batch_stats = train;
    });
  }

  void backward(Stream& s, const void* xv, const void* dyv, const float* gamma, void* dxv, float* dgamma,
                float* dbeta) override {
    m_queued.run(s, [=, this, &s] {
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
      for (int64_t i = 0; i < n; ++i) {
        const float* p = x + (i * blocks + cb) * hw * B;
        const float* g = dy + (i * blocks + cb) * hw * B;
        float* q = dx + (i * blocks + cb) * hw * B;
        for (int64_t j = 0; j < hw; ++j)
#pragma omp simd
          for (int l = 0; l < B; ++l)
            q[j * B + l] =
                k[l] * (bn_dy<Relu>(p[j * B + l], scale[l], shift[l], g[j * B + l]) - mean_dy[l] - (p[j * B + l] - mean[l]) * inv_std[l] * mean_dy_xhat[l]);
      }
    }
  }

  BatchNormDesc m_desc;
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
