// ssgd: synchronous SGD. With g_j the gradient of learner j (of the job's L) on its batch and
// S the loss scale (1 without dynamic loss scaling),
//     g = (1 / (L S)) sum_j g_j,        w <- optimizer(w, g),
// one model: learner 0 applies the optimizer and the others copy its weights, so every
// replica is the central model. The sum is the hierarchical allreduce: level 1 inside the
// device (the fused sum), levels 2-4 over the job. Across ranks the gradients go to the
// allreduce in buckets while the backward passes still run (gradient_buckets.hpp). The
// BatchNorm statistics are averaged the same way, with the gradients.
//
// The step is not applied when the sum is not finite (train.nonfinite = skip, fp16's loss
// scaling; otherwise NonFiniteStep names the culprit): the check is every learner's sum of
// squares of its gradients, summed over the job with them, so every rank takes the same
// decision, read with the losses at the step's one host wait.
//
// Under parallel.spatial the ranks of a group each hold a tile of one learner's samples: the
// job's sum adds their shares of its gradient with the other groups' in the same allreduce,
// and L counts the groups (GroupCore::distinct_learners); the state, the same on every rank
// of a group, is averaged over every rank.
//
// The same over one node (outer's inner steps, sync_outer.cpp): L is then the node's learners,
// the sum runs over the node's ranks (no buckets), and the replicas of a node are one model.
#include <cmath>
#include <string>

#include "src/parallel/gradient_buckets.hpp"
#include "src/parallel/sync_algorithm.hpp"

namespace squall::parallel {
namespace {

class Ssgd final : public SyncAlgorithm {
 public:
  Ssgd(GroupCore& core, bool node) : SyncAlgorithm(core), m_buckets(core), m_node(node) {}

  size_t buckets() const override { return m_buckets.size(); }

  bool step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
            const std::vector<LearnerBatch>* next) override {
    GroupCore& c = m_core;
    const std::string name = (m_node ? "node gradients step " : "gradients step ") + std::to_string(step + 1);
    FusedSum& sum = m_node ? *c.node_sum : *c.sum;
    const int ranks = m_node ? c.options.node_ranks : c.options.ranks;
    // One learner of a one-rank job sums nothing: it updates its own gradients.
    const bool fused = c.replicas->size() > 1 || ranks > 1;
    float check = 0;
    if (!m_node && ranks > 1 && c.replicas->threaded()) {
      check = m_buckets.reduce(batches, step, next);
    } else {
      c.run_passes(batches, step, next, false, false);
      c.after_learners();
      if (fused) {
        const auto span = c.phase_scope("device_sum");
        sum.add(*c.replicas, FusedSum::Source::grads, 0, c.params);
        sum.add_state(*c.replicas);
        sum.add_norms(*c.replicas);
      }
      if (ranks > 1) {
        {
          const auto span = c.phase_scope("allreduce", &c.reduce_s);
          sum.reduce(sum.check() + 1, name, true);
        }
        check = sum.read_check();
      } else {
        c.host_wait();  // the step's one wait: the losses and the learners' sums of squares
        for (const auto& l : *c.replicas) check += l->grad_norm2();
      }
    }
    const auto span = c.phase_scope("update");
    Learner& first = (*c.replicas)[0];
    float* g = fused ? sum.data() : first.graph->grads();
    // The sum of squares overflows for large but finite gradients (|g| > 1e19) too: only
    // then, rarely, look at the values themselves.
    const bool finite = std::isfinite(check) || all_finite(c.backend, *c.stream, g, c.params);
    if (!finite && !c.skips_nonfinite()) {
      std::string culprit;
      for (const auto& l : *c.replicas)
        if (const std::string where = locate_nonfinite(c.backend, *l); !where.empty()) {
          culprit = "rank " + std::to_string(c.options.rank) + " learner " + std::to_string(l->index) + ": " + where;
          break;
        }
      throw NonFiniteStep(std::string("the gradient sum over the ") + (m_node ? "node" : "job") +
                              " is not finite at step " + std::to_string(step + 1),
                          culprit, !m_node);
    }
    // Each rank's state is summed once, and so are the gradients of whole samples; the tiles'
    // shares of a split sample's gradient (parallel.spatial, not summed over the group in the
    // pass) make one learner's gradient per group.
    const bool shares = !m_node && c.options.tile != nullptr && !c.setup.sum_over_tile;
    const float inv_state = 1.0f / static_cast<float>(m_node ? c.node_learners() : c.job_learners());
    const float inv = shares ? 1.0f / static_cast<float>(c.distinct_learners()) : inv_state;
    if (fused) {
      // The gradients' mean, unscaled by the loss scale; the state's mean, into every replica.
      float* state = sum.data() + c.params;
      c.backend.scale(*c.stream, inv_state, state, c.state);
      if (finite) {
        c.backend.scale(*c.stream, inv / c.scaler->scale(), g, c.params);
        c.backend.copy(*c.stream, first.graph->grads(), g, c.params);
        first.optimizer->step(c.backend, *c.stream, lr);
      }
      for (const auto& l : *c.replicas) {
        if (l->index != 0 && finite) c.backend.copy(*c.stream, l->graph->params(), first.graph->read_params(), c.params);
        c.backend.copy(*c.stream, l->graph->state(), state, c.state);
      }
    } else if (finite) {
      if (c.scaler->scale() != 1.0f) c.backend.scale(*c.stream, inv / c.scaler->scale(), g, c.params);
      first.optimizer->step(c.backend, *c.stream, lr);
    }
    return !finite;
  }

 private:
  GradientBuckets m_buckets;
  bool m_node;  // the sum over this node, not the job (outer's inner steps)
};

}  // namespace

std::unique_ptr<SyncAlgorithm> make_ssgd(GroupCore& core) { return std::make_unique<Ssgd>(core, false); }
std::unique_ptr<SyncAlgorithm> make_node_ssgd(GroupCore& core) { return std::make_unique<Ssgd>(core, true); }

}  // namespace squall::parallel
