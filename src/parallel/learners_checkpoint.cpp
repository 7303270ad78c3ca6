// A learner group's checkpoints (src/parallel/learners.hpp; docs/training.md, "Checkpoints and
// restart"): the central model, the replicas and their optimizer state, the loss scale, and
// what the synchronisation algorithm keeps of its own. The flat arrays hold the arenas packed
// (GroupCore::arena_to_host; docs/formats.md, "Checkpoints"), so that a file does not depend on
// the padding between tensors in memory.
#include <string>

#include "src/parallel/group_core.hpp"
#include "src/parallel/learners.hpp"
#include "src/parallel/sync_algorithm.hpp"

namespace squall::parallel {

using Arena = GroupCore::Arena;

void LearnerGroup::save_shared(checkpoint::CheckpointData& out) {
  GroupCore& c = *m_core;
  settle();
  out.ints["learners"] = learners();
  out.arrays["central/params"] = c.arena_to_host(m_algorithm->central_params(), Arena::params);
  out.arrays["central/state"] = c.arena_to_host(m_algorithm->central_state(), Arena::state);
  m_algorithm->save(out);
  if (!replicas_differ()) {  // one model: learner 0's optimizer state is every learner's
    const Learner& first = (*c.replicas)[0];
    for (const optim::OptimizerState& st : first.optimizer->state())
      out.arrays["replica/optimizer/" + st.name] = c.to_host(st.data, st.count);
    out.ints["replica/optimizer_steps"] = first.optimizer->steps();
    c.scaler->save(out);
  }
  c.backend.synchronize(*c.stream);
}

void LearnerGroup::save_own(checkpoint::CheckpointData& out) {
  GroupCore& c = *m_core;
  settle();
  out.ints["group"] = replica_group();
  out.ints["learners"] = learners();
  for (const auto& l : *c.replicas) {
    const std::string prefix = "learner_" + std::to_string(l->index) + "/";
    out.arrays[prefix + "params"] = c.arena_to_host(l->graph->read_params(), Arena::params);
    out.arrays[prefix + "state"] = c.arena_to_host(l->graph->state(), Arena::state);
    for (const optim::OptimizerState& st : l->optimizer->state())
      out.arrays[prefix + "optimizer/" + st.name] = c.to_host(st.data, st.count);
    out.ints[prefix + "optimizer_steps"] = l->optimizer->steps();
  }
  m_algorithm->save_own(out);
  c.scaler->save(out);
  c.backend.synchronize(*c.stream);
}

void LearnerGroup::restore(const checkpoint::CheckpointData& shared, const checkpoint::CheckpointData* own,
                           bool from_centre, bool regrouped) {
  GroupCore& c = *m_core;
  settle();
  if (shared.integer("learners") != learners())
    throw Error(shared.origin + ": holds " + std::to_string(shared.integer("learners")) +
                " learner(s) per rank, this group has " + std::to_string(learners()));
  m_algorithm->restore(shared);
  if (own != nullptr) {
    if (own->integer("learners") != learners() || own->integer("group") != replica_group())
      throw Error(own->origin + ": the part of group " + std::to_string(own->integer("group")) + " with " +
                  std::to_string(own->integer("learners")) + " learner(s), not of group " +
                  std::to_string(replica_group()) + " with " + std::to_string(learners()));
    for (const auto& l : *c.replicas) {
      const std::string prefix = "learner_" + std::to_string(l->index) + "/";
      c.arena_from_host(l->graph->params(), *own, prefix + "params", Arena::params);
      c.arena_from_host(l->graph->state(), *own, prefix + "state", Arena::state);
      for (const optim::OptimizerState& st : l->optimizer->state())
        c.from_host(st.data, *own, prefix + "optimizer/" + st.name, st.count);
      l->optimizer->set_steps(own->integer(prefix + "optimizer_steps"));
    }
    m_algorithm->restore_own(*own);
    c.scaler->restore(*own, *c.stream);
  } else if (from_centre) {
    // A rank the checkpoint's job did not have: its learners are new replicas of the centre,
    // their optimizer state as a new run's (zero, step 0) and the loss scale its initial one.
    for (const auto& l : *c.replicas) {
      c.arena_from_host(l->graph->params(), shared, "central/params", Arena::params);
      c.arena_from_host(l->graph->state(), shared, "central/state", Arena::state);
      for (const optim::OptimizerState& st : l->optimizer->state()) c.backend.fill(*c.stream, st.data, st.count, 0.0f);
      l->optimizer->set_steps(0);
    }
  } else {
    if (replicas_differ())
      throw Error(shared.origin + ": has no per-rank part, but the replicas of " +
                  std::string(algorithm_name(m_options.algorithm)) + " differ at this point of the run");
    for (const auto& l : *c.replicas) {
      c.arena_from_host(l->graph->params(), shared, "central/params", Arena::params);
      c.arena_from_host(l->graph->state(), shared, "central/state", Arena::state);
      for (const optim::OptimizerState& st : l->optimizer->state())
        c.from_host(st.data, shared, "replica/optimizer/" + st.name, st.count);
      l->optimizer->set_steps(shared.integer("replica/optimizer_steps"));
    }
    c.scaler->restore(shared, *c.stream);
  }
  if (from_centre || regrouped) m_algorithm->restart_node_level();
  c.backend.record(*c.group_event, *c.stream);
  c.backend.synchronize(*c.stream);
  m_eval_current = false;
}

}  // namespace squall::parallel
