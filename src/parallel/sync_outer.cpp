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
// After it the steps come in rounds of H, or under QSR (parallel.outer.qsr = a; Gu et al.,
// "A Quadratic Synchronization Rule for Distributed Deep Learning", ICLR 2024) of
// max(H, floor((a / lr)^2)) steps with lr the inner rate of the round's first step: the period
// grows as the learning rate decays. A round that starts during the learning rate's warm-up
// lasts H, as the paper's do (its small rates would make the first round longer than the run).
// The run ends with an outer step (complete()): the last round is cut at the last step, so
// that the centre holds every step.
//
// Streaming (parallel.outer.streaming; Streaming DiLoCo, Douillard et al. 2025): the job's sum
// of the outer step after step t is started and left in flight while the nodes take inner step
// t + 1, the caller's thread driving it (GroupCore::drive); after that step the outer update
// is computed as above from the sum, and each node keeps its step t + 1 on top of the new
// centre: x_n <- x + (x_n(t + 1) - x_n(t)), the BatchNorm state likewise from the job's mean.
// The link is hidden behind one inner step; the centre is one step late. At the end of the
// run complete() applies the outer step still in flight, then takes the final outer step if
// steps came after it. A checkpoint between the two keeps
// only that a sum is pending: the nodes' models at the checkpoint are x_n(t), and the resumed
// run starts the same sum of them again before its first inner step.
//
// Asynchronous (parallel.outer.async; mpi/async_centre.hpp): the rounds are the same, but at
// the end of its round a node pushes its progress since the centre it last took to the job's
// centre, sharded over the node leaders, and takes the newest centre back, without waiting
// for the other nodes (up to parallel.outer.max_staleness rounds ahead of the slowest). The
// leader pushes for its node; the node's other ranks take the centre from it over the node's
// sum (the leader's values, everyone else's zeros). The running statistics travel with the
// parameters. Where every rank reads the central model at once (an evaluation, a checkpoint)
// the nodes agree on one centre first (a settling push, answered once every node has pushed
// as often), and the run ends with a last push answered once every node has finished.
#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "mpi/async_centre.hpp"
#include "src/core/clock.hpp"
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
    if (c.options.outer.streaming) m_snapshot = c.backend.allocate(c.params + c.state);
    c.backend.copy(*c.stream, m_centre.data(), first.graph->read_params(), c.params);
    c.backend.copy(*c.stream, m_state.data(), first.graph->state(), c.state);
    c.backend.fill(*c.stream, m_momentum.data(), c.params, 0.0f);
    if (c.options.outer.async) start_async();
  }
  ~Outer() override {
    // A sum in flight writes the group's buffer: retire it, unless the job is failing (a rank
    // that threw may never take its part, and the job ends anyway).
    if (!m_in_flight || std::uncaught_exceptions() > 0) return;
    try {
      m_core.sum->reducer().wait(m_ticket);
    } catch (...) {  // a destructor does not throw; the job's failure is reported elsewhere
    }
  }

  // Between outer steps the nodes' models move apart from the centre.
  bool central_is_replica0() const override { return false; }
  const float* central_params() const override { return m_centre.data(); }
  const float* central_state() const override { return m_state.data(); }
  // The node's model: every replica of this node holds it.
  const float* node_params() const override { return (*m_core.replicas)[0].graph->read_params(); }

  // The centre and its state go into the checkpoint as central/params and central/state
  // (LearnerGroup::save_shared); the momentum, where the round stands and a pending streamed
  // sum here. The nodes' models and their optimizer state are each rank's own part.
  void before_save() override {
    if (m_async_on && !m_finished && m_centre_service) m_saved = m_centre_service->state();
  }

  void save(checkpoint::CheckpointData& out) const override {
    if (m_saved) {
      // The asynchronous centre as the nodes agreed on it (agree: every node has pushed as
      // often, so no push is half applied): its momentum, parameters and running statistics,
      // under the synchronous outer's name too, so that either kind resumes the other.
      GroupCore& c = m_core;
      c.backend.copy_from_host(*c.stream, m_momentum.data(), m_saved->momentum.data(), c.params);
      c.backend.copy_from_host(*c.stream, m_delta.data(), m_saved->momentum.data() + c.params, c.state);
      out.arrays["outer/async/state_momentum"] = c.arena_to_host(m_delta.data(), GroupCore::Arena::state);
      out.ints["outer/async/pushes"] = m_saved->pushes.empty() ? 0 : m_saved->pushes[0];
      out.ints["outer/async/outer_steps"] = m_saved->outer_steps;
      out.ints["outer/async/nodes"] = static_cast<int64_t>(m_saved->pushes.size());
    }
    out.arrays["outer/momentum"] = m_core.arena_to_host(m_momentum.data(), GroupCore::Arena::params);
    out.ints["outer/last_outer_step"] = m_last;
    out.ints["outer/round_steps"] = m_round;
    out.ints["outer/pending"] = m_pending ? 1 : 0;
    out.reals["outer/pending_lr"] = m_pending_lr;
    out.ints["outer/outer_steps"] = m_outer_steps;
  }
  void restore(const checkpoint::CheckpointData& in) override {
    m_core.arena_from_host(m_centre.data(), in, "central/params", GroupCore::Arena::params);
    m_core.arena_from_host(m_state.data(), in, "central/state", GroupCore::Arena::state);
    m_core.arena_from_host(m_momentum.data(), in, "outer/momentum", GroupCore::Arena::params);
    // A checkpoint of the first outer version has no clock: its fixed rounds are derived again.
    m_last = in.ints.count("outer/last_outer_step") ? in.integer("outer/last_outer_step") : -1;
    m_round = in.ints.count("outer/round_steps") ? in.integer("outer/round_steps") : 0;
    const bool pending = in.ints.count("outer/pending") && in.integer("outer/pending") != 0;
    if (pending && !m_core.options.outer.streaming)
      throw Error(in.origin +
                  ": an outer step's sum was in flight (parallel.outer.streaming = true), but this run "
                  "has parallel.outer.streaming = false: resume with streaming on");
    m_restart = pending;
    m_pending_lr = pending ? static_cast<float>(in.real("outer/pending_lr")) : 0.0f;
    m_outer_steps = in.ints.count("outer/outer_steps") ? in.integer("outer/outer_steps") : 0;
    m_done = 0;  // no step of this group yet: complete() has no steps of its own to join
    if (m_async_on) restore_async(in);
  }

  int64_t outer_steps() const override { return m_outer_steps; }
  AsyncOuterStats async_stats() const override { return m_stats; }

  void agree() override {
    if (m_async_on && !m_finished) async_round(Push::settle, m_lr);
  }

  bool step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
            const std::vector<LearnerBatch>* next) override {
    GroupCore& c = m_core;
    if (m_restart) {  // resumed between a streamed sum's start and its outer update
      m_restart = false;
      begin(step - 1, m_pending_lr);
    }
    if (m_async_on) {
      const bool skipped = m_inner->step(batches, step, lr, next);
      m_done = step + 1;
      m_lr = lr;
      if (outer_step_after(step, lr)) async_round(Push::round, lr);
      return skipped;
    }
    bool skipped = false;
    {
      struct Undrive {
        GroupCore& c;
        ~Undrive() { c.drive = nullptr; }
      } undrive{c};
      if (m_in_flight) c.drive = [this] { return drive(); };
      skipped = m_inner->step(batches, step, lr, next);
    }
    if (m_pending) apply();
    m_done = step + 1;
    m_lr = lr;
    if (outer_step_after(step, lr)) {
      begin(step, lr);
      if (!c.options.outer.streaming) apply();
    }
    return skipped;
  }

  // A step this node lets pass (train.epoch_quorum): no inner step, the round's clock and its
  // outer step as after one. The node's model stays where its last trained step left it, so the
  // outer step averages a node that trained h of the round's H steps with one that trained H.
  void idle(int64_t step, float lr) override {
    m_done = step + 1;
    m_lr = lr;
    if (m_async_on) {
      if (outer_step_after(step, lr)) async_round(Push::round, lr);
      return;
    }
    if (m_pending) apply();  // not streaming (refused with the quorum): nothing is in flight
    if (outer_step_after(step, lr)) {
      begin(step, lr);
      apply();
    }
  }

  // Where step `step` falls in its round: the clock of outer_step_after, read without moving it
  // (the round's length is set at its first step, as there).
  RoundSpot round_spot(int64_t step, float lr) override {
    if (!in_rounds(step, lr)) return {};
    return {step - m_last, m_round};
  }

  // The streamed sum still pending, then the final outer step over the steps since the last
  // one (at the rate of the last step), as an outer step after that step would be. Streamed,
  // the final one is waited for at once: no inner step follows to hide it.
  bool complete() override {
    if (m_async_on) {
      if (m_finished) return false;
      // The last push: the steps since this node's last round, or none.
      async_round(m_done > m_last ? Push::final_steps : Push::final_only, m_lr);
      m_last = m_done;
      m_round = 0;
      return true;
    }
    bool changed = false;
    if (m_restart) {  // resumed with a sum pending and no step since: start it again
      m_restart = false;
      begin(std::max<int64_t>(0, m_last - 1), m_pending_lr);
    }
    if (m_pending) {
      apply();
      changed = true;
    }
    if (m_done > 0 && m_done > m_last) {
      begin(m_done - 1, m_lr);
      apply();
      m_last = m_done;
      m_round = 0;
      changed = true;
    }
    return changed;
  }

 private:
  // Whether step `step` (0-based, at inner rate lr) ends with an outer step; advances the clock.
  bool outer_step_after(int64_t step, float lr) {
    if (in_rounds(step, lr) && step + 1 - m_last < m_round) return false;
    m_last = step + 1;
    m_round = 0;
    return true;
  }

  // Whether step `step` (0-based, at inner rate lr) is past the synchronous start, in a round of
  // m_round steps that began after step m_last; sets the clock where it is not set yet (a fresh
  // start, or a checkpoint without the clock: fixed rounds) and the round's length at its first
  // step.
  bool in_rounds(int64_t step, float lr) {
    const optim::OuterOptions& o = m_core.options.outer;
    if (m_last < 0)
      m_last = step <= o.start_step ? step : o.start_step + (step - o.start_step) / o.period * o.period;
    if (step + 1 <= o.start_step) return false;
    if (m_round == 0) m_round = o.round_length(m_last, lr);
    return true;
  }

  // The job's sum of the nodes' models and state for the outer step after step `step`: started
  // and completed, or (streaming) left in flight with the nodes' models kept aside.
  void begin(int64_t step, float lr) {
    GroupCore& c = m_core;
    FusedSum& sum = *c.sum;
    {
      const auto span = c.phase_scope("device_sum");
      c.after_learners();
      sum.add(*c.replicas, FusedSum::Source::params, 0, c.params);
      sum.add_state(*c.replicas);
      if (c.options.outer.streaming) {
        const Learner& first = (*c.replicas)[0];
        c.backend.copy(*c.stream, m_snapshot.data(), first.graph->read_params(), c.params);
        c.backend.copy(*c.stream, m_snapshot.data() + c.params, first.graph->state(), c.state);
      }
    }
    m_pending = true;
    m_pending_lr = lr;
    if (c.options.ranks == 1) return;
    const std::string what = "outer step after step " + std::to_string(step + 1);
    if (!c.options.outer.streaming) {
      const auto span = c.phase_scope("allreduce", &c.reduce_s);
      sum.reduce(sum.check(), what, false);
      return;
    }
    m_started_at = steady_seconds();
    m_completed_at = 0;
    m_ticket = sum.start(0, sum.check(), what);
    m_in_flight = true;
  }

  // Drives the streamed sum while the learners compute: whether it moved (completed now).
  bool drive() {
    if (m_completed_at > 0 || !m_core.sum->reducer().test(m_ticket)) return false;
    m_completed_at = steady_seconds();
    return true;
  }

  // The outer update from the job's sum, and the replicas restarted from the centre (keeping
  // the inner step taken under a streamed sum).
  void apply() {
    GroupCore& c = m_core;
    FusedSum& sum = *c.sum;
    if (m_in_flight) {
      const double t0 = steady_seconds();
      {
        const auto span = c.phase_scope("allreduce", &c.reduce_s);
        if (m_completed_at == 0) sum.reducer().wait(m_ticket);
      }
      m_in_flight = false;
      // Hidden behind the inner step: from the start until it completed, or until the wait began.
      c.overlapped_s += std::max(0.0, (m_completed_at > 0 ? m_completed_at : t0) - m_started_at);
      sum.finish(0, sum.check());
    }
    m_pending = false;
    ++m_outer_steps;
    const float lr = m_pending_lr;
    const optim::OuterOptions& o = c.options.outer;
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
    const float* params = x;
    const float* state = m_state.data();
    if (o.streaming) {
      // The inner step taken since the sum began, on top of the new centre and state:
      // snapshot <- (x_n - snapshot) + x.
      const Learner& first = (*c.replicas)[0];
      float* kept = m_snapshot.data();
      be.axpby(s, 1.0f, first.graph->read_params(), -1.0f, kept, c.params);
      be.axpy(s, 1.0f, x, kept, c.params);
      be.axpby(s, 1.0f, first.graph->state(), -1.0f, kept + c.params, c.state);
      be.axpy(s, 1.0f, m_state.data(), kept + c.params, c.state);
      params = kept;
      state = kept + c.params;
    }
    for (const auto& l : *c.replicas) {
      be.copy(s, l->graph->params(), params, c.params);
      be.copy(s, l->graph->state(), state, c.state);
    }
  }

  enum class Push { round, settle, final_steps, final_only };

  // The centre's shards and this node's client, on the node's leader (collective over the
  // leaders: every node makes its Outer at the same point).
  void start_async() {
    GroupCore& c = m_core;
    m_async_on = true;
    m_host.resize(c.params + c.state);
    if (c.options.leaders == nullptr) return;
    read_node_model();
    mpi::AsyncCentreOptions o;
    o.lr = c.options.outer.lr;
    o.momentum = c.options.outer.momentum;
    o.nesterov = c.options.outer.nesterov;
    o.max_staleness = c.options.outer.max_staleness;
    o.stall_abort_s = c.options.stall_abort_s;
    // The node's part of the job's learners: its ranks' over the job's (every rank the same
    // learner count).
    const double share = static_cast<double>(c.options.node_ranks) / static_cast<double>(c.options.ranks);
    m_centre_service = std::make_unique<mpi::AsyncCentre>(*c.options.leaders, m_host.data(), m_host.size(), share, o);
  }

  // The centre's shards from a checkpoint (collective over the leaders): the centre and its
  // momentum as saved (a synchronous outer checkpoint's momentum for the parameters, zero for
  // the statistics), every node starting again from the centre. The nodes' push counts carry
  // over where the job has as many nodes, and start again from 0 otherwise (they only say who
  // is ahead).
  void restore_async(const checkpoint::CheckpointData& in) {
    GroupCore& c = m_core;
    if (!m_centre_service) return;
    const size_t n = c.params + c.state;
    mpi::AsyncCentreState st;
    st.centre.resize(n);
    st.momentum.assign(n, 0.0f);
    st.accumulated.assign(n, 0.0f);
    c.backend.copy_to_host(*c.stream, st.centre.data(), m_centre.data(), c.params);
    c.backend.copy_to_host(*c.stream, st.centre.data() + c.params, m_state.data(), c.state);
    c.backend.copy_to_host(*c.stream, st.momentum.data(), m_momentum.data(), c.params);
    if (in.arrays.count("outer/async/state_momentum")) {
      c.arena_from_host(m_delta.data(), in, "outer/async/state_momentum", GroupCore::Arena::state);
      c.backend.copy_to_host(*c.stream, st.momentum.data() + c.params, m_delta.data(), c.state);
    }
    c.host_wait();
    const auto nodes = static_cast<size_t>(m_centre_service->nodes());
    const bool same = in.ints.count("outer/async/nodes") && in.integer("outer/async/nodes") == static_cast<int64_t>(nodes);
    st.pushes.assign(nodes, same ? in.integer("outer/async/pushes") : 0);
    st.outer_steps = in.ints.count("outer/async/outer_steps") ? in.integer("outer/async/outer_steps") : 0;
    m_centre_service->restore(st);
  }

  // The node's model and state (every replica of the node holds them) into m_host.
  void read_node_model() {
    GroupCore& c = m_core;
    const Learner& first = (*c.replicas)[0];
    c.backend.copy_to_host(*c.stream, m_host.data(), first.graph->read_params(), c.params);
    c.backend.copy_to_host(*c.stream, m_host.data() + c.params, first.graph->state(), c.state);
    c.host_wait();
  }

  // This node's push of its progress and the newest centre to every replica of the node.
  void async_round(Push kind, float lr) {
    GroupCore& c = m_core;
    nn::Backend& be = c.backend;
    nn::Stream& s = *c.stream;
    const size_t n = c.params + c.state;
    c.after_learners();
    if (m_centre_service) {
      read_node_model();
      const auto span = c.phase_scope("allreduce", &c.reduce_s);
      mpi::PushResult r;
      switch (kind) {
        case Push::round: r = m_centre_service->push_pull(m_host.data(), lr, m_host.data()); break;
        case Push::settle: r = m_centre_service->settle(m_host.data(), lr, m_host.data()); break;
        case Push::final_steps: r = m_centre_service->finish(m_host.data(), lr, m_host.data()); break;
        case Push::final_only: r = m_centre_service->finish(nullptr, lr, m_host.data()); break;
      }
      if (kind != Push::final_only) {
        ++m_stats.pushes;
        m_stats.staleness_max = std::max(m_stats.staleness_max, r.staleness);
        m_stats.staleness_sum += static_cast<double>(r.staleness);
      }
      m_stats.wait_s += r.waited_s;
      m_stats.wait_cpu_s += r.waited_cpu_s;
      m_stats.serve_cpu_s = m_centre_service->serve_cpu_seconds();
    }
    if (kind == Push::final_steps || kind == Push::final_only) m_finished = true;
    if (kind == Push::round) ++m_outer_steps;
    if (c.options.node_ranks > 1) {
      // The leader's centre to the node's other ranks: a sum of it and zeros, exact.
      FusedSum& node = *c.node_sum;
      if (m_centre_service) be.copy_from_host(s, node.data(), m_host.data(), n);
      else be.fill(s, node.data(), n, 0.0f);
      const auto span = c.phase_scope("allreduce", &c.reduce_s);
      node.reduce(node.check(), "the asynchronous centre over the node", false);
      const float* centre = node.data();
      be.copy(s, m_centre.data(), centre, c.params);
      be.copy(s, m_state.data(), centre + c.params, c.state);
    } else {
      be.copy_from_host(s, m_centre.data(), m_host.data(), c.params);
      be.copy_from_host(s, m_state.data(), m_host.data() + c.params, c.state);
    }
    for (const auto& l : *c.replicas) {
      be.copy(s, l->graph->params(), m_centre.data(), c.params);
      be.copy(s, l->graph->state(), m_state.data(), c.state);
    }
  }

  std::unique_ptr<SyncAlgorithm> m_inner;
  nn::Buffer m_centre, m_state, m_momentum, m_delta;
  // parallel.outer.async:
  bool m_async_on = false;
  bool m_finished = false;  // the last push made: the centre service has ended
  std::unique_ptr<mpi::AsyncCentre> m_centre_service;  // on the node's leader
  std::vector<float> m_host;                           // the node's model and state, the centre taken
  AsyncOuterStats m_stats;
  std::optional<mpi::AsyncCentreState> m_saved;  // the agreed centre, for save() (on the leaders)
  nn::Buffer m_snapshot;     // streaming: the node's model and state when the sum began
  int64_t m_last = -1;       // steps done at the last outer step (-1: derive it at the next step)
  int64_t m_round = 0;       // the current round's steps (0: set at its first step)
  bool m_pending = false;    // a sum begun whose outer update is still to come
  float m_pending_lr = 0;    // ... the inner rate of the step it follows
  bool m_restart = false;    // resumed with one pending: start its sum again first
  int64_t m_done = 0;        // steps done at this group's last step (0: none since it was made)
  float m_lr = 0;            // ... and that step's inner rate
  int64_t m_outer_steps = 0;  // outer updates applied, every attempt's
  bool m_in_flight = false;  // its ticket is not yet retired
  mpi::Allreduce::Ticket m_ticket = 0;
  double m_started_at = 0, m_completed_at = 0;
};

}  // namespace

std::unique_ptr<SyncAlgorithm> make_outer(GroupCore& core) { return std::make_unique<Outer>(core); }

}  // namespace squall::parallel
