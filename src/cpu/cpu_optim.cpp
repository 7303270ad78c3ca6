// Optimizer arithmetic on flat parameter ranges, element for element as torch.optim does it
// (SGD with dampening 0, Adam/AdamW without amsgrad), so a run can be checked against PyTorch.
// The fused updates also write each tensor's weight mirror (docs/design.md, "Weight
// mirrors") from its new weights, converted and permuted as the plan would copy them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"

namespace squall::cpu {

namespace {
}

void CpuBackend::sgd_step(Stream& s, float* w, const float* g, float* velocity, size_t n, float lr,
                          float momentum, float weight_decay, bool nesterov) {
  run_on(s, [=, this, &s] {
    const int64_t m = static_cast<int64_t>(n);
    // PyTorch's first step sets buf = g'; with velocity starting at zero, momentum * 0 + g' is
    // the same, so one formula covers every step.
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      const float gd = g[i] + weight_decay * w[i];
      const float v = momentum * velocity[i] + gd;
      velocity[i] = v;
      const float step = nesterov ? gd + momentum * v : v;
      w[i] -= lr * step;
    }
  });
}

void CpuBackend::adam_step(Stream& s, float* w, const float* g, float* m, float* v, float* update, size_t n,
                           float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled,
                           int64_t step, bool apply) {
  run_on(s, [=, this, &s] {
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
#pragma omp parallel for simd if (count >= k_parallel_min) schedule(static)
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
  });
}

void CpuBackend::sum_squares(Stream& s, const float* x, size_t n, float* out) {
  run_on(s, [=, this, &s] {
    const int64_t m = static_cast<int64_t>(n);
    double sum = 0.0;
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static) reduction(+ : sum)
    for (int64_t i = 0; i < m; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    *out = static_cast<float>(sum);
  });
}

// ---- fused forms: the tensors one after the other, with the single-range arithmetic -------

namespace {

double squares(const float* x, size_t n) {
  const int64_t m = static_cast<int64_t>(n);
  double sum = 0.0;
#pragma omp parallel for simd if (m >= k_parallel_min) schedule(static) reduction(+ : sum)
  for (int64_t i = 0; i < m; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

// The mirror of t from its weights: the values rounded to the mirror's type, in its order,
// stored as that type or (widened) as f32. A pass after the tensor's update: the CPU is the
// reference, not the fast path.
void write_mirror(CpuBackend& b, Stream& s, const TensorRef& t) {
  const WeightMirror& m = t.mirror;
  if (m.data == nullptr || t.n == 0) return;
  const Layout order = m.nhwc ? Layout::nhwc : Layout::nchw;
  if (!m.widened || m.dtype == DType::f32) {
    permute_convert_now(t.w, DType::f32, Layout::nchw, m.data, m.widened ? DType::f32 : m.dtype, order, m.k, m.c,
                        m.rs, 1);
    return;
  }
  Buffer rounded = b.allocate(t.n, m.dtype);
  permute_convert_now(t.w, DType::f32, Layout::nchw, rounded.raw(), m.dtype, order, m.k, m.c, m.rs, 1);
  convert_now(rounded.raw(), m.dtype, m.data, DType::f32, t.n);
}

class CpuTensorSet final : public TensorSet {
 public:
  explicit CpuTensorSet(std::vector<TensorRef> t) : m_tensors(std::move(t)) {
    for (const auto& r : m_tensors) m_largest = std::max(m_largest, r.n);
  }
  const std::vector<TensorRef>& tensors() const override { return m_tensors; }
  float* scratch() {  // LAMB's update direction, one tensor at a time
    if (m_scratch.size() < m_largest) m_scratch.resize(m_largest);
    return m_scratch.data();
  }

 private:
  std::vector<TensorRef> m_tensors;
  size_t m_largest = 0;
  std::vector<float> m_scratch;
};

}  // namespace

std::unique_ptr<TensorSet> CpuBackend::make_tensor_set(std::vector<TensorRef> tensors) {
  for (const auto& t : tensors) {
    if (t.n > 0 && (!t.w || !t.g)) throw Error("tensor set: a tensor has no parameter or gradient memory");
    check_weight_mirror(t, "tensor set");
  }
  return std::make_unique<CpuTensorSet>(std::move(tensors));
}

void CpuBackend::sgd_update(Stream& s, TensorSet& set, float* velocity, const SgdArgs& a) {
  run_on(s, [=, this, &s, &set] {
    size_t off = 0;
    for (const auto& t : set.tensors()) {
      sgd_step(s, t.w, t.g, velocity + off, t.n, a.lr, a.momentum, t.decay ? a.weight_decay : 0.0f, a.nesterov);
      write_mirror(*this, s, t);
      off += t.n;
    }
  });
}

void CpuBackend::adam_update(Stream& s, TensorSet& set, float* m, float* v, const AdamArgs& a) {
  run_on(s, [=, this, &s, &set] {
    using Kind = AdamArgs::Kind;
    size_t off = 0;
    float* u = a.kind == Kind::lamb ? static_cast<CpuTensorSet&>(set).scratch() : nullptr;
    for (const auto& t : set.tensors()) {
      const float wd = t.decay ? a.weight_decay : 0.0f;
      if (a.kind != Kind::lamb) {
        adam_step(s, t.w, t.g, m + off, v + off, nullptr, t.n, a.lr, a.beta1, a.beta2, a.eps, wd,
                  a.kind == Kind::adamw, a.step, true);
      } else {
        adam_step(s, t.w, t.g, m + off, v + off, u, t.n, a.lr, a.beta1, a.beta2, a.eps, wd, true, a.step, false);
        const double w_norm = std::sqrt(squares(t.w, t.n)), u_norm = std::sqrt(squares(u, t.n));
        const double trust = (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
        CpuBackend::axpy(s, static_cast<float>(-static_cast<double>(a.lr) * trust), u, t.w, t.n);
      }
      write_mirror(*this, s, t);
      off += t.n;
    }
  });
}

void CpuBackend::larc_scale(Stream& s, TensorSet& set, const LarcArgs& a) {
  run_on(s, [=, this, &s, &set] {
    for (const auto& t : set.tensors()) {
      const double wd = t.decay ? a.weight_decay : 0.0;
      const double w_norm = std::sqrt(squares(t.w, t.n)), g_norm = std::sqrt(squares(t.g, t.n));
      double factor = 1.0;
      if (w_norm > 0 && g_norm > 0) {
        const double local = a.eta * w_norm / (g_norm + wd * w_norm);
        factor = a.clip ? std::min(local / a.lr, 1.0) : local;
      }
      // Not virtual: the update is one call, whatever a subclass counts.
      if (wd > 0) CpuBackend::axpy(s, static_cast<float>(wd), t.w, t.g, t.n);
      if (factor != 1.0) CpuBackend::scale(s, static_cast<float>(factor), t.g, t.n);
    }
  });
}

}  // namespace squall::cpu
