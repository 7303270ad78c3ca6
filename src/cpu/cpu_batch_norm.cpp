// Batch normalisation (spatial, per channel, with scale and shift) as direct OpenMP loops on
// NCHW. oneDNN's kernel for the plain layout ran at a fraction of memory bandwidth and made
// batch norm the largest cost of a ResNet step; these loops read the data twice forward
// and twice backward, accumulate in double, and parallelise over channels.
//
// Training normalises with the batch mean and biased variance, keeps mean and 1/std for
// backward, and updates the running statistics as PyTorch does, with the UNBIASED variance.
#include <cmath>
#include <vector>

#include <omp.h>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"

namespace squall::cpu {

namespace {

class CpuBatchNormPlan final : public BatchNormPlan {
 public:
  explicit CpuBatchNormPlan(const BatchNormDesc& d)
      : m_desc(d), m_mean(static_cast<size_t>(d.c)), m_inv_std(static_cast<size_t>(d.c)) {
    if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || !(d.eps > 0.0f))
      throw Error("batch norm: invalid description " + Shape(d.n, d.c, d.h, d.w).str() +
                  " eps=" + std::to_string(d.eps));
  }

  void forward(Stream&, const void* xv, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* yv, bool train) override {
    const auto* x = static_cast<const float*>(xv);
    auto* y = static_cast<float*>(yv);
    const int64_t n = m_desc.n, c = m_desc.c, hw = m_desc.h * m_desc.w;
    const int64_t count = n * hw;
    if (train && count < 2)
      throw Error("batch norm: training needs more than one value per channel, got input " +
                  Shape(n, c, m_desc.h, m_desc.w).str());
    const float momentum = m_desc.momentum;
#pragma omp parallel for schedule(static) if (n * c * hw > 16384)
    for (int64_t ch = 0; ch < c; ++ch) {
      float mean, inv_std;
      if (train) {
        double sum = 0, sumsq = 0;
        for (int64_t i = 0; i < n; ++i) {
          const float* p = x + (i * c + ch) * hw;
          float s = 0, q = 0;  // per row in float (vectorised), rows summed in double
#pragma omp simd reduction(+ : s, q)
          for (int64_t j = 0; j < hw; ++j) {
            s += p[j];
            q += p[j] * p[j];
          }
          sum += s;
          sumsq += q;
        }
        const double m = sum / static_cast<double>(count);
        const double var = std::max(sumsq / static_cast<double>(count) - m * m, 0.0);
        mean = static_cast<float>(m);
        inv_std = static_cast<float>(1.0 / std::sqrt(var + m_desc.eps));
        const double unbiased = var * static_cast<double>(count) / static_cast<double>(count - 1);
        running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] + momentum * m);
        running_var[ch] = static_cast<float>((1.0 - momentum) * running_var[ch] + momentum * unbiased);
        m_mean[static_cast<size_t>(ch)] = mean;
        m_inv_std[static_cast<size_t>(ch)] = inv_std;
      } else {
        mean = running_mean[ch];
        inv_std = 1.0f / std::sqrt(running_var[ch] + m_desc.eps);
      }
      const float scale = gamma[ch] * inv_std, shift = beta[ch] - mean * scale;
      for (int64_t i = 0; i < n; ++i) {
        const float* p = x + (i * c + ch) * hw;
        float* q = y + (i * c + ch) * hw;
#pragma omp simd
        for (int64_t j = 0; j < hw; ++j) q[j] = p[j] * scale + shift;
      }
    }
    m_have_batch_stats = train;
  }

  void backward(Stream&, const void* xv, const void* dyv, const float* gamma, void* dxv, float* dgamma,
                float* dbeta) override {
    const auto* x = static_cast<const float*>(xv);
    const auto* dy = static_cast<const float*>(dyv);
    auto* dx = static_cast<float*>(dxv);
    if (!m_have_batch_stats) throw Error("batch norm: backward needs a forward with train=true first");
    const int64_t n = m_desc.n, c = m_desc.c, hw = m_desc.h * m_desc.w;
    const double count = static_cast<double>(n * hw);
#pragma omp parallel for schedule(static) if (n * c * hw > 16384)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float mean = m_mean[static_cast<size_t>(ch)], inv_std = m_inv_std[static_cast<size_t>(ch)];
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float* p = x + (i * c + ch) * hw;
        const float* g = dy + (i * c + ch) * hw;
        float s = 0, t = 0;
#pragma omp simd reduction(+ : s, t)
        for (int64_t j = 0; j < hw; ++j) {
          s += g[j];
          t += g[j] * (p[j] - mean);
        }
        sum_dy += s;
        sum_dy_xhat += t;
      }
      sum_dy_xhat *= inv_std;
      dgamma[ch] = static_cast<float>(sum_dy_xhat);
      dbeta[ch] = static_cast<float>(sum_dy);
      // dx = gamma / std * (dy - mean(dy) - xhat * mean(dy * xhat))
      const float k = gamma[ch] * inv_std;
      const float mean_dy = static_cast<float>(sum_dy / count);
      const float mean_dy_xhat = static_cast<float>(sum_dy_xhat / count);
      for (int64_t i = 0; i < n; ++i) {
        const float* p = x + (i * c + ch) * hw;
        const float* g = dy + (i * c + ch) * hw;
        float* q = dx + (i * c + ch) * hw;
#pragma omp simd
        for (int64_t j = 0; j < hw; ++j) q[j] = k * (g[j] - mean_dy - (p[j] - mean) * inv_std * mean_dy_xhat);
      }
    }
  }

 private:
  BatchNormDesc m_desc;
  std::vector<float> m_mean, m_inv_std;  // batch statistics of the last training forward
  bool m_have_batch_stats = false;
};

}  // namespace

std::unique_ptr<BatchNormPlan> CpuBackend::make_batch_norm(const BatchNormDesc& d) {
  if (d.layout == Layout::nhwc) {
    BatchNormDesc nchw = d;
    nchw.layout = Layout::nchw;
    return make_nhwc_batch_norm(*this, d, make_batch_norm(nchw));
  }
  if (d.dtype != DType::f32) {
    BatchNormDesc f32 = d;
    f32.dtype = DType::f32;
    return make_reduced_batch_norm(*this, d, std::make_unique<CpuBatchNormPlan>(f32));
  }
  return std::make_unique<CpuBatchNormPlan>(d);
}

}  // namespace squall::cpu
