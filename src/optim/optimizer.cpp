#include "src/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "src/core/error.hpp"

namespace squall::optim {
namespace {

// The groups as the backend's fused updates take them (with the mirrors the update writes).
std::vector<nn::TensorRef> tensor_refs(const std::vector<ParamGroup>& groups) {
  std::vector<nn::TensorRef> refs;
  for (const auto& g : groups) refs.push_back({g.w, g.g, g.n, g.weight_decay, g.mirror});
  return refs;
}

// Groups, their offsets into the flat state buffers, and the step count.
class OptimizerBase : public Optimizer {
 public:
  explicit OptimizerBase(std::vector<ParamGroup> groups) : m_groups(std::move(groups)) {
    for (const auto& g : m_groups) {
      if (g.n > 0 && (!g.w || !g.g))
        throw Error("optimizer: parameter group '" + g.name + "' has no parameter or gradient memory");
      m_offsets.push_back(m_total);
      m_total += g.n;
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
    auto stream = backend.create_stream();  // before training: a one-off stream is fine
    backend.fill(*stream, b.data(), b.count(), 0.0f);
    backend.synchronize(*stream);
    return b;
  }

  std::vector<ParamGroup> m_groups;
  std::vector<size_t> m_offsets;
  size_t m_total = 0;
  int64_t m_steps = 0;
};

class Sgd final : public OptimizerBase {
 public:
  Sgd(const OptimizerOptions& c, nn::Backend& backend, std::vector<ParamGroup> groups)
      : OptimizerBase(std::move(groups)), m_config(c), m_velocity(zeroed(backend, m_total)),
        m_set(backend.make_tensor_set(tensor_refs(m_groups))) {}

  void step(nn::Backend& backend, nn::Stream& stream, float lr) override {
    nn::SgdArgs a;
    a.lr = lr;
    a.momentum = static_cast<float>(m_config.momentum);
    a.weight_decay = static_cast<float>(m_config.weight_decay);
    a.nesterov = m_config.nesterov;
    backend.sgd_update(stream, *m_set, m_velocity.data(), a);
    ++m_steps;
  }
  std::string name() const override { return k_optimizer_kinds.name(OptimizerKind::sgd); }
  std::vector<OptimizerState> state() override { return {{"momentum", m_velocity.data(), m_total}}; }

 private:
  OptimizerOptions m_config;
  nn::Buffer m_velocity;
  std::unique_ptr<nn::TensorSet> m_set;
};

// Adam (coupled L2 decay), AdamW (decoupled decay) and LAMB (AdamW's direction scaled per
// tensor by the trust ratio, computed on the device) share the moments.
class AdamFamily final : public OptimizerBase {
 public:
  AdamFamily(OptimizerKind kind, const OptimizerOptions& c, nn::Backend& backend, std::vector<ParamGroup> groups)
      : OptimizerBase(std::move(groups)), m_kind(kind), m_config(c),
        m_m(zeroed(backend, m_total)), m_v(zeroed(backend, m_total)),
        m_set(backend.make_tensor_set(tensor_refs(m_groups))) {}

  void step(nn::Backend& backend, nn::Stream& stream, float lr) override {
    ++m_steps;  // bias correction counts from 1
    nn::AdamArgs a;
    a.kind = m_kind == OptimizerKind::adam    ? nn::AdamArgs::Kind::adam
             : m_kind == OptimizerKind::adamw ? nn::AdamArgs::Kind::adamw
                                              : nn::AdamArgs::Kind::lamb;
    a.lr = lr;
    a.beta1 = static_cast<float>(m_config.beta1);
    a.beta2 = static_cast<float>(m_config.beta2);
    a.eps = static_cast<float>(m_config.eps);
    a.weight_decay = static_cast<float>(m_config.weight_decay);
    a.step = m_steps;
    backend.adam_update(stream, *m_set, m_m.data(), m_v.data(), a);
  }
  std::string name() const override { return k_optimizer_kinds.name(m_kind); }
  std::vector<OptimizerState> state() override {
    return {{"exp_avg", m_m.data(), m_total}, {"exp_avg_sq", m_v.data(), m_total}};
  }

 private:
  OptimizerKind m_kind;  // adam, adamw or lamb
  OptimizerOptions m_config;
  nn::Buffer m_m, m_v;
  std::unique_ptr<nn::TensorSet> m_set;
};

// LARC (apex semantics): the weight decay is folded into the gradient here, the gradient is
// scaled by the per-tensor factor (norms on the device), and the inner optimizer runs
// without weight decay.
class Larc final : public Optimizer {
 public:
  Larc(const OptimizerOptions& c, nn::Backend& backend, std::unique_ptr<Optimizer> inner)
      : m_config(c), m_inner(std::move(inner)), m_set(backend.make_tensor_set(tensor_refs(m_inner->groups()))) {}

  void step(nn::Backend& backend, nn::Stream& stream, float lr) override {
    nn::LarcArgs a;
    a.lr = lr;
    a.eta = static_cast<float>(m_config.larc_eta);
    a.weight_decay = static_cast<float>(m_config.weight_decay);
    a.clip = m_config.larc_clip;
    backend.larc_scale(stream, *m_set, a);
    m_inner->step(backend, stream, lr);
  }
  std::string name() const override { return "larc(" + m_inner->name() + ")"; }
  std::vector<OptimizerState> state() override { return m_inner->state(); }
  int64_t steps() const override { return m_inner->steps(); }
  void set_steps(int64_t steps) override { m_inner->set_steps(steps); }
  const std::vector<ParamGroup>& groups() const override { return m_inner->groups(); }

 private:
  OptimizerOptions m_config;
  std::unique_ptr<Optimizer> m_inner;
  std::unique_ptr<nn::TensorSet> m_set;
};

// Tells the mirrors' owner, after each update, that the update has written them.
class MirrorsWritten final : public Optimizer {
 public:
  MirrorsWritten(std::unique_ptr<Optimizer> inner, std::function<void()> written)
      : m_inner(std::move(inner)), m_written(std::move(written)) {}
  void step(nn::Backend& backend, nn::Stream& stream, float lr) override {
    m_inner->step(backend, stream, lr);
    m_written();
  }
  std::string name() const override { return m_inner->name(); }
  std::vector<OptimizerState> state() override { return m_inner->state(); }
  int64_t steps() const override { return m_inner->steps(); }
  void set_steps(int64_t steps) override { m_inner->set_steps(steps); }
  const std::vector<ParamGroup>& groups() const override { return m_inner->groups(); }

 private:
  std::unique_ptr<Optimizer> m_inner;
  std::function<void()> m_written;
};

}  // namespace

int64_t state_floats_per_parameter(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd: return 1;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
    case OptimizerKind::lamb: return 2;
  }
  throw Error(std::string("optimizer.name: no optimizer for value ") + k_optimizer_kinds.name(kind));
}

double lamb_trust_ratio(double w_norm, double u_norm) {
  return (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
}

double larc_factor(double w_norm, double g_norm, double weight_decay, double eta, bool clip, double lr) {
  if (!(w_norm > 0 && g_norm > 0)) return 1.0;
  const double local = eta * w_norm / (g_norm + weight_decay * w_norm);
  return clip ? std::min(local / lr, 1.0) : local;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& config, nn::Backend& backend,
                                          std::vector<ParamGroup> groups, std::function<void()> mirrors_written) {
  OptimizerOptions inner = config;
  if (config.larc) inner.weight_decay = 0.0;  // LARC applies it before scaling the gradient
  std::unique_ptr<Optimizer> opt;
  switch (config.name) {
    case OptimizerKind::sgd: opt = std::make_unique<Sgd>(inner, backend, std::move(groups)); break;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
    case OptimizerKind::lamb:
      opt = std::make_unique<AdamFamily>(config.name, inner, backend, std::move(groups));
      break;
  }
  if (!opt) throw Error(std::string("optimizer.name: no optimizer for value ") + k_optimizer_kinds.name(config.name));
  if (config.larc) opt = std::make_unique<Larc>(config, backend, std::move(opt));
  if (mirrors_written) opt = std::make_unique<MirrorsWritten>(std::move(opt), std::move(mirrors_written));
  return opt;
}

}  // namespace squall::optim
