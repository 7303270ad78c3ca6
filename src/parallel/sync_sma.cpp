// sma: Crossbow's synchronous model averaging (VLDB 2019). On a synchronisation step (every
// `period` steps), with z the central model, W the sum of all replicas in the job, L the
// job's learner count and (alpha, beta, mu) = sma_coefficients(...) (sma.hpp),
//     c_j = alpha (w_j - z);   w_j <- w_j - c_j - lr * update_j;
//     z   <- z + beta (W / L - z) + mu (z - z_prev).
// beta defaults to min(alpha L, 1): Crossbow's own rule (z moves by the sum of the c_j) while
// alpha L <= 1, and a fixed moving rate towards the learners' mean beyond, as in EASGD, so
// that the centre stays stable for any L (docs/training.md, "SMA at any scale"). The
// correction is applied before the optimizer's update, so weight decay (if any) sees the
// corrected weights. Between synchronisation steps the learners take independent steps.
//
// W only needs the weights from before the update, so across ranks its allreduce runs while
// the learners compute their passes (on worker threads), as in Crossbow. The BatchNorm
// statistics are averaged over the job into the central state at every synchronisation;
// the passes write them, so they are summed before the passes start.
#include <algorithm>
#include <string>

#include "src/parallel/sync_algorithm.hpp"

namespace squall::train {
namespace {

class Sma final : public SyncAlgorithm {
 public:
  explicit Sma(GroupCore& core) : SyncAlgorithm(core), m_central(core) {}

  bool central_is_replica0() const override { return false; }
  const float* central_params() const override { return m_central.z.data(); }
  const float* central_state() const override { return m_central.state.data(); }
  void save(io::CheckpointData& out) const override { m_central.save(out); }
  void restore(const io::CheckpointData& in) override { m_central.restore(in); }

  bool step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
            const std::vector<LearnerBatch>* next) override {
    GroupCore& c = m_core;
    const bool sync = (step + 1) % c.options.period == 0;
    const std::string name = "model sum step " + std::to_string(step + 1);
    if (sync && c.options.ranks > 1 && c.replicas->threaded()) {
      // The state sum, then the passes (which write the state) with the model sum under them.
      const double t0 = steady_seconds();
      c.after_learners();
      c.sum->add_state(*c.replicas);
      c.backend.record(*c.group_event, *c.stream);
      c.run_passes(batches, step, next, false, true);
      c.sum->add(*c.replicas, FusedSum::Source::params, 0, c.params);  // the learners only read them now
      const double t1 = steady_seconds();
      c.phase("device_sum", -1, t0, t1);
      c.sum->reduce(c.sum->check(), name, false);
      const double reduced = steady_seconds();
      c.phase("allreduce", -1, t1, reduced);
      c.replicas->wait();
      double passes_end = 0;
      for (const auto& l : *c.replicas) passes_end = std::max(passes_end, l->pass_end);
      const double exposed = std::max(0.0, reduced - std::max(passes_end, t1));
      c.reduce_s += exposed;
      c.overlapped_s += (reduced - t1) - exposed;
      c.after_learners();
    } else {
      c.run_passes(batches, step, next, false, false);
      c.after_learners();
      if (sync) {
        const double t0 = steady_seconds();
        c.sum->add(*c.replicas, FusedSum::Source::params, 0, c.params);
        c.sum->add_state(*c.replicas);
        c.phase("device_sum", -1, t0, steady_seconds());
        if (c.options.ranks > 1) {
          const double t1 = steady_seconds();
          c.sum->reduce(c.sum->check(), name, false);
          c.phase("allreduce", -1, t1, steady_seconds());
          c.reduce_s += steady_seconds() - t1;
        }
      }
    }
    // W and the state sum are taken before the update: c_j uses the weights the gradients
    // were computed at.
    c.backend.record(*c.group_event, *c.stream);
    c.host_wait();  // the step's one wait: the losses and the learners' sums of squares
    const double t0 = steady_seconds();
    const SmaCoefficients k = sma_coefficients(c.options.alpha, c.options.centre_rate, c.options.momentum,
                                               c.job_learners());
    const auto alpha = static_cast<float>(k.alpha);
    const float* z = m_central.z.data();
    c.replicas->run([&](Learner& l) {
      c.backend.wait(*l.stream, *c.group_event);
      if (sync) c.backend.axpby(*l.stream, alpha, z, 1.0f - alpha, l.graph->params(), c.params);  // w - alpha (w - z)
      if (c.local_update_ok(l, step)) c.local_update(l, lr);
      c.backend.record(*l.done, *l.stream);
    });
    if (sync) {
      // z_new = z + beta (W / L - z) + mu (z - z_prev), built in z_prev's buffer, then swapped.
      const auto beta = static_cast<float>(k.beta);
      const auto mu = static_cast<float>(k.mu);
      const auto n = static_cast<float>(c.job_learners());
      float* zp = m_central.z_prev.data();
      c.backend.axpby(*c.stream, 1.0f - beta + mu, z, -mu, zp, c.params);
      c.backend.axpy(*c.stream, beta / n, c.sum->data(), zp, c.params);
      std::swap(m_central.z, m_central.z_prev);
      c.backend.copy(*c.stream, m_central.state.data(), c.sum->data() + c.params, c.state);
      c.backend.scale(*c.stream, 1.0f / n, m_central.state.data(), c.state);
    }
    c.phase("update", -1, t0, steady_seconds());
    bool skipped = false;
    for (const auto& l : *c.replicas) skipped = skipped || l->overflow;
    return skipped;
  }


 private:
  CentralModel m_central;
};

}  // namespace

std::unique_ptr<SyncAlgorithm> make_sma(GroupCore& core) { return std::make_unique<Sma>(core); }

}  // namespace squall::train
