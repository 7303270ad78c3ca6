// Optimizer arithmetic on flat parameter ranges, element for element as torch.optim does it
// (SGD with dampening 0, Adam/AdamW without amsgrad), so a run can be checked against PyTorch.
#include <cmath>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"

namespace squall::cpu {

namespace {
constexpr int64_t kParallelMin = 16384;
}

void CpuBackend::sgd_step(Stream&, float* w, const float* g, float* velocity, size_t n, float lr,
                          float momentum, float weight_decay, bool nesterov) {
  const int64_t m = static_cast<int64_t>(n);
  // PyTorch's first step sets buf = g'; with velocity starting at zero, momentum * 0 + g' is
  // the same, so one formula covers every step.
#pragma omp parallel for simd if (m >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    const float gd = g[i] + weight_decay * w[i];
    const float v = momentum * velocity[i] + gd;
    velocity[i] = v;
    const float step = nesterov ? gd + momentum * v : v;
    w[i] -= lr * step;
  }
}

void CpuBackend::adam_step(Stream&, float* w, const float* g, float* m, float* v, float* update, size_t n,
                           float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled,
                           int64_t step, bool apply) {
  if (step < 1) throw Error("adam_step: step must be >= 1 (bias correction), got " + std::to_string(step));
  if (!apply && !update) throw Error("adam_step: apply=false needs an update buffer");
  const int64_t count = static_cast<int64_t>(n);
  // As torch.optim.Adam: denom = sqrt(v) / sqrt(bc2) + eps, step = lr / bc1 * m / denom.
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step)));
  const float sqrt_bc2 =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step))));
  const float inv_bc1 = 1.0f / bc1;
  const float coupled_wd = decoupled ? 0.0f : weight_decay;
  const float decoupled_wd = decoupled ? weight_decay : 0.0f;
#pragma omp parallel for simd if (count >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float gi = g[i] + coupled_wd * w[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float u = (mi * inv_bc1) / (std::sqrt(vi) / sqrt_bc2 + eps);
    if (apply) {
      // AdamW decays with the weight from before this step, then takes the Adam step.
      w[i] = w[i] - lr * decoupled_wd * w[i] - lr * u;
    } else {
      update[i] = u + decoupled_wd * w[i];
    }
  }
}

double CpuBackend::sum_squares(Stream&, const float* x, size_t n) {
  const int64_t m = static_cast<int64_t>(n);
  double sum = 0.0;
#pragma omp parallel for simd if (m >= kParallelMin) schedule(static) reduction(+ : sum)
  for (int64_t i = 0; i < m; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

}  // namespace squall::cpu
