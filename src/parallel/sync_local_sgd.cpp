// local-sgd: the learners take independent optimizer steps, and every `period` steps every
// replica is replaced by the job's average, which becomes the central model:
//     w_j <- optimizer(w_j, g_j)          every step,
//     w_j <- z = (1 / L) sum_k w_k        every period steps (L: the job's learners),
// with the BatchNorm statistics averaged the same way. With parallel.periods = [inside,
// across] (period = across), hierarchical local SGD (Lin et al., ICLR 2020): on the steps in
// between that inside divides, every replica of node n becomes its node's average,
//     w_j <- (1 / L_n) sum_{k in n} w_k   (L_n: the node's learners; the state likewise),
// summed over the node's ranks only; the central model stays the job's last average. Before `start_step` the group runs
// ssgd (post-local SGD: a synchronous warm-up phase); leaving it, every learner continues
// from learner 0's optimizer state (the others' was never used). At the end of the run
// (complete()) the job averages once more if steps came after its last average, so that the
// central model holds every step.
#include <string>

#include "src/parallel/sync_algorithm.hpp"

namespace squall::parallel {

std::unique_ptr<SyncAlgorithm> make_sma(GroupCore& core);
std::unique_ptr<SyncAlgorithm> make_outer(GroupCore& core);

namespace {

class LocalSgd final : public SyncAlgorithm {
 public:
  explicit LocalSgd(GroupCore& core) : SyncAlgorithm(core), m_warmup(make_ssgd(core)), m_central(core) {}

  bool central_is_replica0() const override { return !m_started; }
  const float* central_params() const override {
    return m_started ? m_central.z.data() : SyncAlgorithm::central_params();
  }
  const float* central_state() const override {
    return m_started ? m_central.state.data() : SyncAlgorithm::central_state();
  }
  size_t buckets() const override { return m_warmup->buckets(); }

  // z_prev is unused here; it is kept so that the checkpoint's layout is sma's.
  void save(checkpoint::CheckpointData& out) const override {
    out.ints["local_started"] = m_started ? 1 : 0;
    m_central.save(out);
  }
  void restore(const checkpoint::CheckpointData& in) override {
    m_started = in.integer("local_started") != 0;
    m_central.restore(in);
  }

  bool complete() override {
    if (!m_unsynced) return false;
    average(m_done - 1, GroupCore::Level::job);
    m_unsynced = false;
    return true;
  }

  bool step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
            const std::vector<LearnerBatch>* next) override {
    GroupCore& c = m_core;
    m_done = step + 1;
    m_unsynced = false;
    if (step < c.options.start_step) return m_warmup->step(batches, step, lr, next);
    c.run_passes(batches, step, next, false, false);
    c.after_learners();
    if (!m_started) start_local_phase();
    c.backend.record(*c.group_event, *c.stream);
    c.host_wait();  // the step's one wait: the losses and the learners' sums of squares
    {
      const auto span = c.phase_scope("update");
      c.replicas->run([&](Learner& l) {
        c.backend.wait(*l.stream, *c.group_event);
        if (c.local_update_ok(l, step)) c.local_update(l, lr);
        c.backend.record(*l.done, *l.stream);
      });
    }
    const GroupCore::Level level = c.sync_level(step - c.options.start_step + 1);
    if (level != GroupCore::Level::none) average(step, level);
    m_unsynced = level != GroupCore::Level::job;
    bool skipped = false;
    for (const auto& l : *c.replicas) skipped = skipped || l->overflow;
    return skipped;
  }

 private:
  void start_local_phase() {
    GroupCore& c = m_core;
    const Learner& first = (*c.replicas)[0];
    for (const auto& l : *c.replicas) {
      if (l->index == 0) continue;
      const auto source = first.optimizer->state();
      const auto target = l->optimizer->state();
      for (size_t i = 0; i < source.size() && i < target.size(); ++i)
        c.backend.copy(*c.stream, target[i].data, source[i].data, source[i].count);
      l->optimizer->set_steps(first.optimizer->steps());
    }
    c.backend.copy(*c.stream, m_central.z.data(), first.graph->read_params(), c.params);
    c.backend.copy(*c.stream, m_central.state.data(), first.graph->state(), c.state);
    m_started = true;
  }

  // The job's average (it becomes the central model) or the node's (level node).
  void average(int64_t step, GroupCore::Level level) {
    GroupCore& c = m_core;
    const bool job = level == GroupCore::Level::job;
    FusedSum& sum = job ? *c.sum : *c.node_sum;
    {
      const auto span = c.phase_scope("device_sum");
      c.after_learners();  // their updates
      sum.add(*c.replicas, FusedSum::Source::params, 0, c.params);
      sum.add_state(*c.replicas);
    }
    if ((job ? c.options.ranks : c.options.node_ranks) > 1) {
      const auto span = c.phase_scope("allreduce", &c.reduce_s);
      sum.reduce(sum.check(), (job ? "model average step " : "node model average step ") + std::to_string(step + 1),
                 false);
    }
    const auto span = c.phase_scope("update");
    float* fused = sum.data();
    c.backend.scale(*c.stream, 1.0f / static_cast<float>(job ? c.job_learners() : c.node_learners()), fused,
                    c.params + c.state);
    for (const auto& l : *c.replicas) {
      c.backend.copy(*c.stream, l->graph->params(), fused, c.params);
      c.backend.copy(*c.stream, l->graph->state(), fused + c.params, c.state);
    }
    if (job) {
      c.backend.copy(*c.stream, m_central.z.data(), fused, c.params);
      c.backend.copy(*c.stream, m_central.state.data(), fused + c.params, c.state);
    }
  }


  std::unique_ptr<SyncAlgorithm> m_warmup;
  CentralModel m_central;
  bool m_started = false;
  int64_t m_done = 0;         // steps done at this group's last step
  bool m_unsynced = false;    // that step was not the job's average (complete() takes one)
};

}  // namespace

void SyncAlgorithm::idle(int64_t step, float /*lr*/) {
  throw Error("learner group: step " + std::to_string(step + 1) +
              " was to pass without work, which only parallel.algorithm = outer's rounds allow (train.epoch_quorum)");
}

std::unique_ptr<SyncAlgorithm> make_sync_algorithm(Algorithm algorithm, GroupCore& core) {
  switch (algorithm) {
    case Algorithm::ssgd: return make_ssgd(core);
    case Algorithm::sma: return make_sma(core);
    case Algorithm::local_sgd: return std::make_unique<LocalSgd>(core);
    case Algorithm::outer: return make_outer(core);
  }
  throw Error("learner group: unknown algorithm");
}

}  // namespace squall::parallel
