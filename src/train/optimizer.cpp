#include "src/train/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "src/core/error.hpp"

namespace squall::train {
namespace {

// Groups, their offsets into the flat state buffers, and the step count.
class OptimizerBase : public Optimizer {
 public:
  explicit OptimizerBase(std::vector<ParamGroup> groups) : m_groups(std::move(groups)) {
    for (const auto& g : m_groups) {
      if (g.n > 0 && (!g.w || !g.g))
        throw Error("optimizer: parameter group '" + g.name + "' has no parameter or gradient memory");
      m_offsets.push_back(m_total);
      m_total += g.n;
      m_largest = std::max(m_largest, g.n);
    }
  }
  int64_t steps() const override { return m_steps; }
  void set_steps(int64_t steps) override { m_steps = steps; }
  const std::vector<ParamGroup>& groups() const override { return m_groups; }

 protected:
  // A zeroed state buffer covering every group back to back (at least one float, so that
  // a model without parameters still gets a valid pointer).
  static nn::Buffer zeroed(nn::Backend& backend, size_t count) {
    nn::Buffer b = backend.allocate(std::max<size_t>(count, 1));
    auto stream = backend.create_stream();
    backend.fill(*stream, b.data(), b.count(), 0.0f);
    backend.synchronize(*stream);
    return b;
  }
  float decay_of(const ParamGroup& g, double weight_decay) const {
    return g.weight_decay ? static_cast<float>(weight_decay) : 0.0f;
  }

  std::vector<ParamGroup> m_groups;
  std::vector<size_t> m_offsets;
  size_t m_total = 0;
  size_t m_largest = 0;
  int64_t m_steps = 0;
};

class Sgd final : public OptimizerBase {
 public:
  Sgd(const OptimizerConfig& c, nn::Backend& backend, std::vector<ParamGroup> groups)
      : OptimizerBase(std::move(groups)), m_config(c), m_velocity(zeroed(backend, m_total)) {}

  void step(nn::Backend& backend, nn::Stream& stream, float lr) override {
    for (size_t i = 0; i < m_groups.size(); ++i) {
      const auto& g = m_groups[i];
      backend.sgd_step(stream, g.w, g.g, m_velocity.data() + m_offsets[i], g.n, lr,
                       static_cast<float>(m_config.momentum), decay_of(g, m_config.weight_decay),
                       m_config.nesterov);
    }
    ++m_steps;
  }
  std::string name() const override { return "sgd"; }
  std::vector<OptimizerState> state() override { return {{"momentum", m_velocity.data(), m_total}}; }

 private:
  OptimizerConfig m_config;
  nn::Buffer m_velocity;
};

// Adam (coupled L2 decay), AdamW (decoupled decay) and LAMB (AdamW's direction scaled per
// tensor by the trust ratio) share the moments.
class AdamFamily final : public OptimizerBase {
 public:
  enum class Kind { adam, adamw, lamb };

  AdamFamily(Kind kind, const OptimizerConfig& c, nn::Backend& backend, std::vector<ParamGroup> groups)
      : OptimizerBase(std::move(groups)), m_kind(kind), m_config(c),
        m_m(zeroed(backend, m_total)), m_v(zeroed(backend, m_total)) {
    if (kind == Kind::lamb) m_update = backend.allocate(std::max<size_t>(m_largest, 1));
  }

  void step(nn::Backend& backend, nn::Stream& stream, float lr) override {
    ++m_steps;  // bias correction counts from 1
    const auto b1 = static_cast<float>(m_config.beta1), b2 = static_cast<float>(m_config.beta2);
    const auto eps = static_cast<float>(m_config.eps);
    const bool decoupled = m_kind != Kind::adam;
    for (size_t i = 0; i < m_groups.size(); ++i) {
      const auto& g = m_groups[i];
      float* m = m_m.data() + m_offsets[i];
      float* v = m_v.data() + m_offsets[i];
      const float wd = decay_of(g, m_config.weight_decay);
      if (m_kind != Kind::lamb) {
        backend.adam_step(stream, g.w, g.g, m, v, nullptr, g.n, lr, b1, b2, eps, wd, decoupled, m_steps, true);
        continue;
      }
      // LAMB: u = m_hat / (sqrt(v_hat) + eps) + wd w; w -= lr * trust * u. The norms come
      // back to the host (a sync per tensor on a device; fine at LAMB's large batches).
      float* u = m_update.data();
      backend.adam_step(stream, g.w, g.g, m, v, u, g.n, lr, b1, b2, eps, wd, true, m_steps, false);
      const double w_norm = std::sqrt(backend.sum_squares(stream, g.w, g.n));
      const double u_norm = std::sqrt(backend.sum_squares(stream, u, g.n));
      const double trust = lamb_trust_ratio(w_norm, u_norm);
      backend.axpy(stream, static_cast<float>(-static_cast<double>(lr) * trust), u, g.w, g.n);
    }
  }
  std::string name() const override {
    return m_kind == Kind::adam ? "adam" : m_kind == Kind::adamw ? "adamw" : "lamb";
  }
  std::vector<OptimizerState> state() override {
    return {{"exp_avg", m_m.data(), m_total}, {"exp_avg_sq", m_v.data(), m_total}};
  }

 private:
  Kind m_kind;
  OptimizerConfig m_config;
  nn::Buffer m_m, m_v;
  nn::Buffer m_update;  // LAMB scratch: one tensor's update direction
};

// LARC (apex semantics): the weight decay is folded into the gradient here, the gradient is
// scaled by the per-tensor factor, and the inner optimizer runs without weight decay.
class Larc final : public Optimizer {
 public:
  Larc(const OptimizerConfig& c, std::unique_ptr<Optimizer> inner) : m_config(c), m_inner(std::move(inner)) {}

  void step(nn::Backend& backend, nn::Stream& stream, float lr) override {
    for (const auto& g : m_inner->groups()) {
      const double wd = g.weight_decay ? m_config.weight_decay : 0.0;
      const double w_norm = std::sqrt(backend.sum_squares(stream, g.w, g.n));
      const double g_norm = std::sqrt(backend.sum_squares(stream, g.g, g.n));
      const double factor = larc_factor(w_norm, g_norm, wd, m_config.larc_eta, m_config.larc_clip, lr);
      if (wd > 0) backend.axpy(stream, static_cast<float>(wd), g.w, g.g, g.n);
      if (factor != 1.0) backend.scale(stream, static_cast<float>(factor), g.g, g.n);
    }
    m_inner->step(backend, stream, lr);
  }
  std::string name() const override { return "larc(" + m_inner->name() + ")"; }
  std::vector<OptimizerState> state() override { return m_inner->state(); }
  int64_t steps() const override { return m_inner->steps(); }
  void set_steps(int64_t steps) override { m_inner->set_steps(steps); }
  const std::vector<ParamGroup>& groups() const override { return m_inner->groups(); }

 private:
  OptimizerConfig m_config;
  std::unique_ptr<Optimizer> m_inner;
};

}  // namespace

double lamb_trust_ratio(double w_norm, double u_norm) {
  return (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
}

double larc_factor(double w_norm, double g_norm, double weight_decay, double eta, bool clip, double lr) {
  if (!(w_norm > 0 && g_norm > 0)) return 1.0;
  const double local = eta * w_norm / (g_norm + weight_decay * w_norm);
  return clip ? std::min(local / lr, 1.0) : local;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, nn::Backend& backend,
                                          std::vector<ParamGroup> groups) {
  OptimizerConfig inner = config;
  if (config.larc) inner.weight_decay = 0.0;  // LARC applies it before scaling the gradient
  std::unique_ptr<Optimizer> opt;
  using Kind = AdamFamily::Kind;
  if (config.name == "sgd") opt = std::make_unique<Sgd>(inner, backend, std::move(groups));
  else if (config.name == "adam") opt = std::make_unique<AdamFamily>(Kind::adam, inner, backend, std::move(groups));
  else if (config.name == "adamw") opt = std::make_unique<AdamFamily>(Kind::adamw, inner, backend, std::move(groups));
  else if (config.name == "lamb") opt = std::make_unique<AdamFamily>(Kind::lamb, inner, backend, std::move(groups));
  else throw Error("optimizer.name must be one of sgd | adam | adamw | lamb (got \"" + config.name + "\")");
  if (config.larc) opt = std::make_unique<Larc>(config, std::move(opt));
  return opt;
}

}  // namespace squall::train
