#pragma once
// ssgd across ranks: the learners' gradients handed to the allreduce bucket by bucket while
// their backward passes still compute the earlier layers' (docs/training.md, "ssgd").
// The plan is plan_buckets (buckets.hpp); this is the overlapped reduce.
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "src/parallel/group_core.hpp"

namespace squall::parallel {

class GradientBuckets {
 public:
  // Plans the buckets of the group's model (bucket_floats: options.bucket_floats).
  explicit GradientBuckets(GroupCore& core);

  size_t size() const { return m_plan.size(); }

  // The passes of `step` on the learners' threads and, on this thread, each bucket summed
  // over the learners (on the group stream, once every learner's backward pass has published
  // a mark at or below it) and handed to the allreduce once that sum is done and every
  // bucket before it has been handed over (the same order on every rank), several in flight
  // at once; then the state and the finite check. Returns the finite check, read at the
  // step's host wait, with fused[0, check] summed over the job (for the group stream's later
  // work; the host waits no more).
  float reduce(const std::vector<LearnerBatch>& batches, int64_t step, const std::vector<LearnerBatch>* next);

 private:
  GroupCore& m_core;
  std::vector<std::pair<size_t, size_t>> m_plan;  // [lo, hi) arena ranges, last layers first
  std::vector<std::unique_ptr<nn::Event>> m_summed;  // per bucket (and the state): level 1 is done
};

}  // namespace squall::parallel
