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
// By level (parallel.periods = [inside, across], period = across; docs/training.md,
// "Averaging by level"): every node n keeps its own centre z_n, identical on its ranks. On a
// step that inside divides and across does not, the same equations run inside the node,
// with z_n, the node's sum W_n (over its ranks only) and L_n its learners (beta from L_n):
//     w_j <- w_j - alpha (w_j - z_n) - lr * update_j;
//     z_n <- z_n + beta_n (W_n / L_n - z_n) + mu (z_n - z_n,prev).
// On a step that across divides, the job-wide equations run with the job's centre made of
// the nodes' centres, weighted by their learners (z = sum_n L_n z_n / L, likewise z_prev):
//     w_j <- w_j - alpha (w_j - z_n) - lr * update_j;
//     z   <- beta W / L + (1 - beta + mu) z - mu z_prev   (the same update as above);
//     z_n <- z;  z_n,prev <- z                            (every node's centre is z again).
// The learners are pulled towards the centre they know, their node's. The job's update carries
// the nodes' mean momentum; the node level's restarts from rest after it: carried over as
// z - z_n, the jump that joins the nodes would be amplified 1 / (1 - mu) times by the node
// steps that follow (sma [1, 4] diverged so on LeNet-5, 3 nodes x 2 ranks).
// The update is linear in W and the centres, so each rank folds its node's centres into its
// share of the job's sum, beta sum_j w_j + l_r ((1 - beta + mu) z_n - mu z_n,prev) (l_r: its
// learners): the job's synchronisation moves as many bytes as without a node level. The
// BatchNorm statistics are averaged at the job's synchronisations only. The central model
// (evaluation, checkpoints, the checksum) is the job's centre of the last such step. At the
// end of the run (complete()), where steps came after the job's last synchronisation, the
// centre moves once more as at a job's synchronisation, towards the learners as they are after
// the last step (the learners are not pulled: no step follows), so that it holds every step
// but the lag SMA's rule always has (a synchronisation's W is taken before its step's update).
//
// W only needs the weights from before the update, so across ranks its allreduce runs while
// the learners compute their passes (on worker threads), as in Crossbow. The BatchNorm
// statistics are averaged over the job into the central state at every synchronisation;
// the passes write them, so they are summed before the passes start.
#include <algorithm>
#include <memory>
#include <string>

#include "src/parallel/sync_algorithm.hpp"

namespace squall::parallel {
namespace {

class Sma final : public SyncAlgorithm {
 public:
  explicit Sma(GroupCore& core) : SyncAlgorithm(core), m_central(core) {
    if (core.options.by_level()) m_node = std::make_unique<CentralModel>(core);
  }

  bool central_is_replica0() const override { return false; }
  const float* central_params() const override { return m_central.z.data(); }
  const float* central_state() const override { return m_central.state.data(); }
  const float* node_params() const override { return m_node ? m_node->z.data() : m_central.z.data(); }
  void save(checkpoint::CheckpointData& out) const override { m_central.save(out); }
  void restore(const checkpoint::CheckpointData& in) override { m_central.restore(in); }
  // The node's centre differs from the job's between the job's synchronisations: each rank
  // keeps its node's in its own part.
  void save_own(checkpoint::CheckpointData& out) const override {
    if (!m_node) return;
    out.arrays["node_central/z"] = m_core.arena_to_host(m_node->z.data(), GroupCore::Arena::params);
    out.arrays["node_central/z_prev"] = m_core.arena_to_host(m_node->z_prev.data(), GroupCore::Arena::params);
  }
  void restore_own(const checkpoint::CheckpointData& in) override {
    if (!m_node) return;
    m_core.arena_from_host(m_node->z.data(), in, "node_central/z", GroupCore::Arena::params);
    m_core.arena_from_host(m_node->z_prev.data(), in, "node_central/z_prev", GroupCore::Arena::params);
  }
  void restart_node_level() override {
    if (!m_node) return;
    GroupCore& c = m_core;
    c.backend.copy(*c.stream, m_node->z.data(), m_central.z.data(), c.params);
    c.backend.copy(*c.stream, m_node->z_prev.data(), m_central.z_prev.data(), c.params);
    c.backend.copy(*c.stream, m_node->state.data(), m_central.state.data(), c.state);
  }

  bool step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
            const std::vector<LearnerBatch>* next) override {
    GroupCore& c = m_core;
    const GroupCore::Level level = c.sync_level(step + 1);
    const bool sync = level != GroupCore::Level::none;
    const bool job = level == GroupCore::Level::job;
    m_done = step + 1;
    m_unsynced = !job;
    // The level's sum, its ranks, and what it sums: the job's takes the BatchNorm state too.
    FusedSum& sum = sync && !job ? *c.node_sum : *c.sum;
    const int ranks = job ? c.options.ranks : c.options.node_ranks;
    const size_t end = job ? sum.check() : c.params;
    const std::string name = (job ? "model sum step " : "node model sum step ") + std::to_string(step + 1);
    // The job's sum carries the nodes' centres (a node level), and the learners are pulled
    // towards their node's centre at every synchronisation.
    const bool folded = job && m_node;
    CentralModel& centre = m_node && sync ? *m_node : m_central;
    const int learners = job ? c.job_learners() : c.node_learners();
    // L of the coefficients counts a spatial group once; the sums hold each of its ranks.
    const SmaCoefficients k = sma_coefficients(c.options.alpha, c.options.centre_rate, c.options.momentum,
                                               job ? c.distinct_learners() : learners);
    if (sync && ranks > 1 && c.replicas->threaded()) {
      // The state sum, then the passes (which write the state) with the model sum under them.
      const double t0 = steady_seconds();
      c.after_learners();
      if (job) sum.add_state(*c.replicas);
      c.backend.record(*c.group_event, *c.stream);
      c.run_passes(batches, step, next, false, true);
      sum.add(*c.replicas, FusedSum::Source::params, 0, c.params);  // the learners only read them now
      if (folded) fold_centres(sum, k);
      const double t1 = steady_seconds();
      c.phase("device_sum", -1, t0, t1);
      sum.reduce(end, name, false);
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
        {
          const auto span = c.phase_scope("device_sum");
          sum.add(*c.replicas, FusedSum::Source::params, 0, c.params);
          if (job) sum.add_state(*c.replicas);
          if (folded) fold_centres(sum, k);
        }
        if (ranks > 1) {
          const auto span = c.phase_scope("allreduce", &c.reduce_s);
          sum.reduce(end, name, false);
        }
      }
    }
    // W and the state sum are taken before the update: c_j uses the weights the gradients
    // were computed at.
    c.backend.record(*c.group_event, *c.stream);
    c.host_wait();  // the step's one wait: the losses and the learners' sums of squares
    const auto span = c.phase_scope("update");
    const auto alpha = static_cast<float>(k.alpha);
    const float* z = centre.z.data();
    c.replicas->run([&](Learner& l) {
      c.backend.wait(*l.stream, *c.group_event);
      if (sync) c.backend.axpby(*l.stream, alpha, z, 1.0f - alpha, l.graph->params(), c.params);  // w - alpha (w - z)
      if (c.local_update_ok(l, step)) c.local_update(l, lr);
      c.backend.record(*l.done, *l.stream);
    });
    if (sync) move_centre(centre, sum, k, learners, folded, job);
    bool skipped = false;
    for (const auto& l : *c.replicas) skipped = skipped || l->overflow;
    return skipped;
  }

  // The job's synchronisation of the centre after the last step, where it was not one.
  bool complete() override {
    if (!m_unsynced) return false;
    m_unsynced = false;
    GroupCore& c = m_core;
    FusedSum& sum = *c.sum;
    const int learners = c.job_learners();
    const SmaCoefficients k =
        sma_coefficients(c.options.alpha, c.options.centre_rate, c.options.momentum, c.distinct_learners());
    {
      const auto span = c.phase_scope("device_sum");
      c.after_learners();
      sum.add(*c.replicas, FusedSum::Source::params, 0, c.params);
      sum.add_state(*c.replicas);
      if (m_node) fold_centres(sum, k);
    }
    if (c.options.ranks > 1) {
      const auto span = c.phase_scope("allreduce", &c.reduce_s);
      sum.reduce(sum.check(), "model sum at the end, after step " + std::to_string(m_done), false);
    }
    const auto span = c.phase_scope("update");
    move_centre(m_node ? *m_node : m_central, sum, k, learners, m_node != nullptr, true);
    return true;
  }

 private:
  // The centre's move at a synchronisation of `learners` learners whose sum is in `sum`:
  // z_new = z + beta (W / L - z) + mu (z - z_prev), built in z_prev's buffer (the learners
  // may be reading z), then swapped; `folded`: the job's sum is the new centre times L already
  // (a node level); `job`: the BatchNorm statistics are the job's mean.
  void move_centre(CentralModel& centre, FusedSum& sum, const SmaCoefficients& k, int learners, bool folded,
                   bool job) {
    GroupCore& c = m_core;
    const auto beta = static_cast<float>(k.beta);
    const auto mu = static_cast<float>(k.mu);
    const auto n = static_cast<float>(learners);
    const float* z = centre.z.data();
    float* zp = centre.z_prev.data();
    if (folded) {
      c.backend.copy(*c.stream, zp, sum.data(), c.params);
      c.backend.scale(*c.stream, 1.0f / n, zp, c.params);
    } else {
      c.backend.axpby(*c.stream, 1.0f - beta + mu, z, -mu, zp, c.params);
      c.backend.axpy(*c.stream, beta / n, sum.data(), zp, c.params);
    }
    std::swap(centre.z, centre.z_prev);
    if (folded) {  // the job's centre is every node's now
      c.after_learners();  // they have read the node's old centre (in z_prev's buffer now)
      c.backend.copy(*c.stream, m_node->z_prev.data(), m_node->z.data(), c.params);
      c.backend.copy(*c.stream, m_central.z.data(), m_node->z.data(), c.params);
      c.backend.copy(*c.stream, m_central.z_prev.data(), m_node->z.data(), c.params);
    }
    if (job) {
      c.backend.copy(*c.stream, m_central.state.data(), sum.data() + c.params, c.state);
      c.backend.scale(*c.stream, 1.0f / n, m_central.state.data(), c.state);
    }
  }

  // This rank's share of the job's new centre times L, in place of its learners' sum W_r:
  // beta W_r + l_r ((1 - beta + mu) z_n - mu z_n,prev), on the group stream.
  void fold_centres(FusedSum& sum, const SmaCoefficients& k) {
    GroupCore& c = m_core;
    const auto beta = static_cast<float>(k.beta);
    const auto mu = static_cast<float>(k.mu);
    const auto mine = static_cast<float>(c.replicas->size());
    c.backend.scale(*c.stream, beta, sum.data(), c.params);
    c.backend.axpy(*c.stream, mine * (1.0f - beta + mu), m_node->z.data(), sum.data(), c.params);
    c.backend.axpy(*c.stream, -mine * mu, m_node->z_prev.data(), sum.data(), c.params);
  }

  CentralModel m_central;               // the job's centre
  std::unique_ptr<CentralModel> m_node;  // this node's (a node level only; its state is unused)
  int64_t m_done = 0;                    // steps done at this group's last step
  bool m_unsynced = false;               // that step was not the job's synchronisation
};

}  // namespace

std::unique_ptr<SyncAlgorithm> make_sma(GroupCore& core) { return std::make_unique<Sma>(core); }

}  // namespace squall::parallel
