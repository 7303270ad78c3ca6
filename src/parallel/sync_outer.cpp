// outer: an inner optimizer inside each node and an outer one across nodes (DiLoCo, Douillard
// et al. 2023; SlowMo, Wang et al. 2020). Every step, inside node n, ssgd over the node's
// learners (sync_ssgd.cpp over the node's sum): one model x_n per node, its optimizer state
// its own, never averaged. Every H steps (parallel.outer.period) an outer step across nodes,
// with x the centre, lr_t the inner learning rate of the step, eta the outer learning rate and
// mu the outer momentum:
//     delta = x - (1 / L) sum_j x_j          (the job's mean: L learners, node models weighted
//                                             by their learners)
//     b    <- mu b + delta / lr_t             (b = 0 at the start; delta / lr_t = 0 when lr_t = 0)
//     x    <- x - eta lr_t (delta / lr_t + mu b)      Nesterov (parallel.outer.nesterov)
//     x    <- x - eta lr_t b                          otherwise
// then every replica restarts from x, and the BatchNorm statistics are the job's mean. Written
// as x <- mean + (1 - eta) delta - eta mu lr_t b (b before its update without Nesterov), a
// term that is zero is not computed, so that H = 1, eta = 1, mu = 0 makes the centre the mean
// itself: ssgd inside the node, then the nodes' mean, which on one node is ssgd bit for bit.
// Before parallel.outer.start_step an outer step follows every step (a synchronous start).
#include <string>

#include "src/parallel/sync_algorithm.hpp"

namespace squall::parallel {
namespace {

class Outer final : public SyncAlgorithm {
 public:
  explicit Outer(GroupCore& core) : SyncAlgorithm(core), m_inner(make_node_ssgd(core)) {
    GroupCore& c = m_core;
    const Learner& first = (*c.replicas)[0];
    m_centre = c.backend.allocate(c.params);
    m_state = c.backend.allocate(c.state);
    m_momentum = c.backend.allocate(c.params);
    m_delta = c.backend.allocate(c.params);
    c.backend.copy(*c.stream, m_centre.data(), first.graph->read_params(), c.params);
    c.backend.copy(*c.stream, m_state.data(), first.graph->state(), c.state);
    c.backend.fill(*c.stream, m_momentum.data(), c.params, 0.0f);
  }

  // Between outer steps the nodes' models move apart from the centre.
  bool central_is_replica0() const override { return false; }
  const float* central_params() const override { return m_centre.data(); }
  const float* central_state() const override { return m_state.data(); }
  // The node's model: every replica of this node holds it.
  const float* node_params() const override { return (*m_core.replicas)[0].graph->read_params(); }

  // The centre and its state go into the checkpoint as central/params and central/state
  // (LearnerGroup::save_shared); the momentum here. The nodes' models and their optimizer
  // state are each rank's own part.
  void save(checkpoint::CheckpointData& out) const override {
    out.arrays["outer/momentum"] = m_core.arena_to_host(m_momentum.data(), GroupCore::Arena::params);
  }
  void restore(const checkpoint::CheckpointData& in) override {
    m_core.arena_from_host(m_centre.data(), in, "central/params", GroupCore::Arena::params);
    m_core.arena_from_host(m_state.data(), in, "central/state", GroupCore::Arena::state);
    m_core.arena_from_host(m_momentum.data(), in, "outer/momentum", GroupCore::Arena::params);
  }

  bool step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
            const std::vector<LearnerBatch>* next) override {
    const bool skipped = m_inner->step(batches, step, lr, next);
    if (m_core.options.outer.outer_step_after(step)) outer_step(step, lr);
    return skipped;
  }

 private:
  void outer_step(int64_t step, float lr) {
    GroupCore& c = m_core;
    const OuterOptions& o = c.options.outer;
    FusedSum& sum = *c.sum;
    {
      const auto span = c.phase_scope("device_sum");
      c.after_learners();
      sum.add(*c.replicas, FusedSum::Source::params, 0, c.params);
      sum.add_state(*c.replicas);
    }
    if (c.options.ranks > 1) {
      const auto span = c.phase_scope("allreduce", &c.reduce_s);
      sum.reduce(sum.check(), "outer step after step " + std::to_string(step + 1), false);
    }
    const auto span = c.phase_scope("update");
    nn::Backend& be = c.backend;
    nn::Stream& s = *c.stream;
    float* mean = sum.data();
    be.scale(s, 1.0f / static_cast<float>(c.job_learners()), mean, c.params + c.state);
    const auto eta = static_cast<float>(o.lr), mu = static_cast<float>(o.momentum);
    float* x = m_centre.data();
    float* b = m_momentum.data();
    float* delta = m_delta.data();
    be.copy(s, delta, x, c.params);
    be.axpy(s, -1.0f, mean, delta, c.params);  // delta = x - mean
    be.copy(s, x, mean, c.params);
    if (mu != 0 && !o.nesterov) be.axpy(s, -eta * mu * lr, b, x, c.params);
    be.axpby(s, lr > 0 ? 1.0f / lr : 0.0f, delta, mu, b, c.params);  // b <- mu b + delta / lr
    if (mu != 0 && o.nesterov) be.axpy(s, -eta * mu * lr, b, x, c.params);
    if (eta != 1) be.axpy(s, 1.0f - eta, delta, x, c.params);
    be.copy(s, m_state.data(), mean + c.params, c.state);
    for (const auto& l : *c.replicas) {
      be.copy(s, l->graph->params(), x, c.params);
      be.copy(s, l->graph->state(), m_state.data(), c.state);
    }
  }

  std::unique_ptr<SyncAlgorithm> m_inner;
  nn::Buffer m_centre, m_state, m_momentum, m_delta;
};

}  // namespace

std::unique_ptr<SyncAlgorithm> make_outer(GroupCore& core) { return std::make_unique<Outer>(core); }

}  // namespace squall::parallel
