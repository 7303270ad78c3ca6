// What the pieces of a learner group share (src/parallel/group_core.hpp), and the non-finite
// locator.
#include "src/parallel/group_core.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace squall::parallel {

void IdleBackoff::operator()(bool moved) {
  if (moved) {
    m_idle = 0;
  } else if (++m_idle < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

GroupCore::GroupCore(nn::Backend& b, const LearnerGroupOptions& o)
    : backend(b), options(o), stream(b.create_stream()), group_event(b.create_event()) {}

void GroupCore::host_wait() {
  const auto span = phase_scope("host_wait");
  backend.synchronize(*stream);
  ++host_waits;
}

void GroupCore::after_learners() {
  for (const auto& l : *replicas) backend.wait(*stream, *l->done);
}

void GroupCore::run_passes(const std::vector<LearnerBatch>& batches, int64_t step,
                           const std::vector<LearnerBatch>* next, bool marks, bool start_only) {
  PassOptions pass;
  pass.class_weights = class_weights ? class_weights.data() : nullptr;
  pass.loss_scale = scaler->device_scale();
  pass.marks = marks;
  pass.capture = options.graphs;
  if (hook) pass.hook = hook;
  m_pass = [this, &batches, step, next, pass](Learner& l) {
    const auto j = static_cast<size_t>(l.index);
    l.pass(batches[j], step, *group_event, pass, next != nullptr ? &(*next)[j] : nullptr);
  };
  if (start_only) {
    replicas->start(m_pass);
  } else if (drive && replicas->threaded()) {
    replicas->start(m_pass);
    for (IdleBackoff idle; !replicas->finished();) idle(drive());
    replicas->wait();
  } else {
    replicas->run(m_pass);
  }
}

bool GroupCore::local_update_ok(Learner& l, int64_t step) {
  if (std::isfinite(l.grad_norm2()) || all_finite(backend, *l.stream, l.graph->grads(), params)) return true;
  if (!skips_nonfinite()) {
    const std::string where = locate_nonfinite(backend, l);
    const std::string culprit = "rank " + std::to_string(options.rank) + " learner " + std::to_string(l.index) +
                                ": " + (where.empty() ? "its gradients are not finite" : where);
    throw NonFiniteStep("step " + std::to_string(step + 1) + ": " + culprit, culprit, false);
  }
  l.overflow = true;
  return false;
}

void GroupCore::local_update(Learner& l, float lr) {
  if (scaler->dynamic()) backend.scale(*l.stream, 1.0f / scaler->scale(), l.graph->grads(), params);
  l.optimizer->step(backend, *l.stream, lr);
}

std::vector<float> GroupCore::to_host(const float* data, size_t n) {
  std::vector<float> out(n);
  if (n > 0) backend.copy_to_host(*stream, out.data(), data, n);
  return out;
}

void GroupCore::from_host(float* data, const checkpoint::CheckpointData& from, const std::string& name, size_t n) {
  const std::vector<float>& v = from.array(name, n);
  if (n > 0) backend.copy_from_host(*stream, data, v.data(), n);
}

namespace {

const std::vector<nn::ParamInfo>& arena_info(const GroupCore& c, GroupCore::Arena which) {
  const nn::Graph& g = *(*c.replicas)[0].graph;
  return which == GroupCore::Arena::params ? g.param_info() : g.state_info();
}

}  // namespace

std::vector<float> GroupCore::arena_to_host(const float* data, Arena which) {
  const std::vector<float> arena = to_host(data, which == Arena::params ? params : state);
  backend.synchronize(*stream);
  return nn::pack_arena(arena, arena_info(*this, which));
}

void GroupCore::arena_from_host(float* data, const checkpoint::CheckpointData& from, const std::string& name,
                                Arena which) {
  const std::vector<nn::ParamInfo>& info = arena_info(*this, which);
  const size_t n = which == Arena::params ? params : state;
  const std::vector<float> arena =
      nn::unpack_arena(from.array(name, nn::packed_count(info)), info, n, from.origin + ": dataset " + name);
  if (n > 0) backend.copy_from_host(*stream, data, arena.data(), n);
  // The copy reads `arena`, which goes out of scope here.
  backend.synchronize(*stream);
}

CentralModel::CentralModel(GroupCore& c) : core(c) {
  const Learner& first = (*c.replicas)[0];
  z = c.backend.allocate(c.params);
  z_prev = c.backend.allocate(c.params);
  state = c.backend.allocate(c.state);
  c.backend.copy(*c.stream, z.data(), first.graph->read_params(), c.params);
  c.backend.copy(*c.stream, z_prev.data(), first.graph->read_params(), c.params);
  c.backend.copy(*c.stream, state.data(), first.graph->state(), c.state);
}

void CentralModel::save(checkpoint::CheckpointData& out) const {
  using Arena = GroupCore::Arena;
  out.arrays["central/z"] = core.arena_to_host(z.data(), Arena::params);
  out.arrays["central/z_prev"] = core.arena_to_host(z_prev.data(), Arena::params);
  out.arrays["central/averaged_state"] = core.arena_to_host(state.data(), Arena::state);
}

void CentralModel::restore(const checkpoint::CheckpointData& in) {
  using Arena = GroupCore::Arena;
  core.arena_from_host(z.data(), in, "central/z", Arena::params);
  core.arena_from_host(z_prev.data(), in, "central/z_prev", Arena::params);
  core.arena_from_host(state.data(), in, "central/averaged_state", Arena::state);
}

bool all_finite(nn::Backend& backend, nn::Stream& stream, const float* x, size_t n) {
  std::vector<float> values(n);
  backend.synchronize(stream);
  backend.copy_to_host(stream, values.data(), x, n);
  backend.synchronize(stream);
  return std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
}

namespace {

// "NaN" or "infinite" for the first non-finite value of x, "" when all are finite.
std::string nonfinite_kind(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : "infinite";
  return {};
}

}  // namespace

std::string locate_nonfinite(nn::Backend& backend, Learner& l) {
  nn::Graph& g = *l.graph;
  nn::Stream& stream = *l.stream;
  backend.synchronize(stream);
  auto host = [&](const float* data, size_t n) {
    std::vector<float> out(n);
    backend.copy_to_host(stream, out.data(), data, n);
    backend.synchronize(stream);
    return out;
  };
  const float loss = l.loss();
  if (!std::isfinite(loss)) {
    const std::string of_loss = std::string(" (the loss is ") + (std::isnan(loss) ? "NaN" : "infinite") + ")";
    for (int i = 1; i < g.size(); ++i) {
      const nn::Tensor v = g.node_value(i);
      const auto n = static_cast<size_t>(v.numel());
      std::vector<float> values;
      if (v.dtype == nn::DType::f32) {
        values = host(v.f32(), n);
      } else {
        nn::Buffer wide = backend.allocate(n);
        backend.convert(stream, v.data, v.dtype, wide.data(), nn::DType::f32, n);
        values = host(wide.data(), n);
      }
      if (const std::string kind = nonfinite_kind(values); !kind.empty())
        return "the output of layer '" + g.node_name(i) + "' is " + kind + of_loss;
    }
    return std::string("the loss is ") + (std::isnan(loss) ? "NaN" : "infinite");
  }
  const auto& info = g.param_info();
  for (size_t i = info.size(); i-- > 0;)  // backward order: where the backward pass went wrong first
    if (const std::string kind = nonfinite_kind(host(g.grads() + info[i].offset, info[i].count)); !kind.empty())
      return "the gradient of " + info[i].name + " is " + kind;
  return {};
}

}  // namespace squall::parallel
