#include "src/parallel/learners.hpp"

#include <algorithm>

#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/parallel/group_core.hpp"
#include "src/parallel/sync_algorithm.hpp"

namespace squall::parallel {

LearnerGroup::LearnerGroup(nn::Backend& backend, std::function<std::unique_ptr<nn::Graph>()> make_graph,
                           int64_t batch, int64_t label_count, const optim::OptimizerOptions& optimizer,
                           std::vector<float> class_weights, LearnerGroupOptions options, mpi::Allreduce& allreduce,
                           mpi::Allreduce* node_allreduce)
    : m_options(options), m_batch(batch), m_core(std::make_unique<GroupCore>(backend, m_options)) {
  // The config checks its keys and names them (src/config/config_checks.cpp); these guard the
  // group's own invariants, for a group built without a config (tests), in its arguments' terms.
  auto refuse = [](const std::string& what) { throw Error("learner group: " + what); };
  if (options.learners < 1) refuse("learners = " + std::to_string(options.learners) + ", must be >= 1");
  if (options.period < 1) refuse("period = " + std::to_string(options.period) + ", must be >= 1");
  if (m_options.inside_period == 0) m_options.inside_period = options.period;
  const int64_t inside = m_options.inside_period;
  const std::string periods = "inside_period = " + std::to_string(inside) + " and period = " +
                              std::to_string(options.period);
  if (inside < 1 || options.period % inside != 0) refuse(periods + ": period must be a multiple of inside_period > 0");
  if (m_options.by_level() && options.algorithm != Algorithm::sma && options.algorithm != Algorithm::local_sgd)
    refuse(periods + ": a node level between the job's synchronisations is sma's and local-sgd's, not " +
           std::string(algorithm_name(options.algorithm)) + "'s");
  if (options.node_ranks < 1 || options.node_ranks > options.ranks)
    refuse(std::to_string(options.node_ranks) + " ranks on the node of a job of " + std::to_string(options.ranks));
  if (m_options.node_level() && options.node_ranks > 1 && node_allreduce == nullptr)
    refuse(std::string(m_options.by_level() ? "the node level (" + periods + ")" : "outer's inner steps") +
           " need the node's sum (node_allreduce)");
  if (options.algorithm == Algorithm::outer && options.outer.period < 1)
    refuse("outer.period = " + std::to_string(options.outer.period) + ", must be >= 1");
  if (options.algorithm == Algorithm::sma)
    if (const std::string why = sma_instability(options.alpha, options.centre_rate, options.momentum); !why.empty())
      refuse("sma's " + why);
  if (options.ranks < 1) refuse("the job needs at least one rank");
  if (options.spatial_ranks < 1 || options.ranks % options.spatial_ranks != 0)
    refuse("spatial groups of " + std::to_string(options.spatial_ranks) + " ranks in a job of " +
           std::to_string(options.ranks));
  if (options.tile != nullptr && options.learners > 1)
    refuse(std::to_string(options.learners) + " learners on a rank that holds a tile of each sample (one only)");
  if (options.tile != nullptr && options.by_level())
    refuse(periods + ": a node level with a split sample is not built");
  const nn::Capabilities can = backend.capabilities();
  if (options.graphs && !can.can_capture) refuse("the " + backend.name() + " backend cannot capture a learner's pass");
  if (m_options.threads <= 0) m_options.threads = can.threads;
  GroupCore& c = *m_core;
  c.setup.backend = &backend;
  c.setup.make_graph = std::move(make_graph);
  c.setup.batch = batch;
  c.setup.label_count = label_count;
  c.setup.precision = options.precision;
  c.setup.layout = options.layout;
  c.setup.seed = options.seed;
  c.setup.rank = options.rank;
  c.setup.optimizer = optimizer;
  c.setup.tile = options.tile;
  c.setup.class_weights = class_weights;
  // ssgd sums the tiles' gradient shares in its one allreduce over the job; the others update
  // each learner from its own gradient, which must be the whole sample's first.
  // (A job of one group, whose group the caller gives as a job of one rank, sums in the pass too.)
  c.setup.sum_over_tile =
      options.tile != nullptr && (options.algorithm != Algorithm::ssgd || options.ranks == options.spatial_ranks);
  c.scaler = std::make_unique<LossScaler>(backend, *c.stream, options.loss_scaling);
  if (!class_weights.empty()) {
    c.class_weights = backend.allocate(class_weights.size());
    backend.copy_from_host(*c.stream, c.class_weights.data(), class_weights.data(), class_weights.size());
  }
  // Learners run on worker threads when there are several, or when the job has several
  // ranks (the caller's thread then drives the allreduce while they compute).
  c.replicas = std::make_unique<ReplicaSet>(c.setup, m_options.threads, options.learners,
                                            options.learners > 1 || options.ranks > 1);
  c.params = (*c.replicas)[0].graph->param_arena_floats();
  c.state = (*c.replicas)[0].graph->state_arena_floats();
  c.sum = std::make_unique<FusedSum>(backend, *c.stream, allreduce, c.params, c.state, options.bf16_gradients,
                                     options.ranks > 1, [&c] { c.host_wait(); });
  if (m_options.node_level()) {
    // The node level's sum (a node of one rank sums nothing across ranks: the one-rank sum).
    // outer's is of gradients, which parallel.comm_precision = bf16 may round.
    if (node_allreduce == nullptr || options.node_ranks == 1) c.own_node = std::make_unique<mpi::OneRankAllreduce>();
    mpi::Allreduce& node = c.own_node ? *c.own_node : *node_allreduce;
    const bool bf16 = options.algorithm == Algorithm::outer && options.bf16_gradients;
    c.node_sum = std::make_unique<FusedSum>(backend, *c.stream, node, c.params, c.state, bf16,
                                            options.node_ranks > 1, [&c] { c.host_wait(); });
  }
  m_algorithm = make_sync_algorithm(options.algorithm, c);
  backend.synchronize(*c.stream);
}

LearnerGroup::~LearnerGroup() {
  // No stream may still be working on the memory the pieces free.
  try {
    settle();
  } catch (const std::exception& e) {
    log::warn(std::string("learner group: a stream failed while the group was closed: ") + e.what());
  }
}

int LearnerGroup::learners() const { return m_core->replicas->size(); }
size_t LearnerGroup::parameter_count() const { return (*m_core->replicas)[0].graph->parameter_count(); }
size_t LearnerGroup::state_value_count() const { return (*m_core->replicas)[0].graph->state_value_count(); }
size_t LearnerGroup::param_arena_floats() const { return m_core->params; }
size_t LearnerGroup::state_arena_floats() const { return m_core->state; }
std::string LearnerGroup::optimizer_name() const { return (*m_core->replicas)[0].optimizer->name(); }
void LearnerGroup::set_phase_hook(PhaseHook hook) { m_core->hook = std::move(hook); }
double LearnerGroup::reduce_seconds() const { return m_core->reduce_s; }
double LearnerGroup::overlapped_reduce_seconds() const { return m_core->overlapped_s; }
int64_t LearnerGroup::host_waits() const { return m_core->host_waits; }
size_t LearnerGroup::buckets() const { return m_algorithm->buckets(); }
int LearnerGroup::max_buckets_in_flight() const { return m_core->max_buckets_in_flight; }
float LearnerGroup::loss_scale() const { return m_core->scaler->scale(); }
int64_t LearnerGroup::skipped_steps() const { return m_core->scaler->skipped_steps(); }
bool LearnerGroup::replicas_differ() const { return !m_algorithm->central_is_replica0(); }

SmaCoefficients LearnerGroup::sma() const {
  return sma_coefficients(m_options.alpha, m_options.centre_rate, m_options.momentum,
                          static_cast<int64_t>(m_options.ranks / m_options.spatial_ranks) * learners());
}

int LearnerGroup::captured_learners() const {
  int n = 0;
  for (const auto& l : *m_core->replicas) n += l->captured ? 1 : 0;
  return n;
}

std::vector<float> LearnerGroup::step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
                                      const std::vector<LearnerBatch>* next) {
  GroupCore& c = *m_core;
  if (batches.size() != static_cast<size_t>(learners()))
    throw Error("learner group: " + std::to_string(batches.size()) + " batches for " + std::to_string(learners()) +
                " learners");
  if (next != nullptr && next->size() != batches.size())
    throw Error("learner group: " + std::to_string(next->size()) + " next batches for " +
                std::to_string(learners()) + " learners");
  const Stopwatch step_time;
  const double reduce_before = c.reduce_s;
  for (const auto& l : *c.replicas) l->overflow = false;
  const bool skipped = m_algorithm->step(batches, step, lr, next);
  c.scaler->end_step(skipped, *c.stream);
  // The learners' next passes are ordered after the group's updates of their replicas.
  c.backend.record(*c.group_event, *c.stream);
  m_eval_current = false;
  std::vector<float> losses;
  for (const auto& l : *c.replicas) losses.push_back(l->loss());
  if (m_options.tile != nullptr) {
    // A split sample's loss: its tiles' means weighted by their shares of the label weights.
    std::vector<double> whole;
    for (const auto& l : *c.replicas) whole.push_back(static_cast<double>(l->loss()) * l->share());
    m_options.tile->sum(whole.data(), whole.size());
    for (size_t j = 0; j < losses.size(); ++j) losses[j] = static_cast<float>(whole[j]);
  }
  m_compute_s += step_time.seconds() - (c.reduce_s - reduce_before);
  return losses;
}

void LearnerGroup::idle_step(int64_t step, float lr) {
  GroupCore& c = *m_core;
  const Stopwatch step_time;
  const double reduce_before = c.reduce_s;
  m_algorithm->idle(step, lr);
  c.backend.record(*c.group_event, *c.stream);
  m_eval_current = false;
  m_compute_s += step_time.seconds() - (c.reduce_s - reduce_before);
}

RoundSpot LearnerGroup::round_spot(int64_t step, float lr) { return m_algorithm->round_spot(step, lr); }

void LearnerGroup::settle() const {
  GroupCore& c = *m_core;
  for (const auto& l : *c.replicas) c.backend.synchronize(*l->stream);
  c.backend.synchronize(*c.stream);
}

const float* LearnerGroup::central_params() const {
  settle();
  return m_algorithm->central_params();
}

const float* LearnerGroup::central_state() const {
  settle();
  return m_algorithm->central_state();
}

const float* LearnerGroup::node_params() const {
  settle();
  return m_algorithm->node_params();
}

const float* LearnerGroup::replica_params(int learner) const {
  SQUALL_CHECK(learner >= 0 && learner < learners(), "replica_params: no such learner");
  settle();
  return (*m_core->replicas)[learner].graph->read_params();
}

std::string LearnerGroup::layout_text() const { return (*m_core->replicas)[0].graph->layout_text(); }

nn::Graph& LearnerGroup::replica_graph(int learner) {
  SQUALL_CHECK(learner >= 0 && learner < learners(), "replica_graph: no such learner");
  settle();
  return *(*m_core->replicas)[learner].graph;
}

nn::Graph& LearnerGroup::eval_graph() {
  GroupCore& c = *m_core;
  if (!m_eval) {
    c.backend.bind_calling_thread(m_options.threads);
    m_eval = c.setup.make_graph();
    m_eval->set_dtype(m_options.precision);
    m_eval->set_layout(m_options.layout);
    m_eval->set_forward_only(true);
    m_eval->build(c.backend, m_batch, m_options.seed);
  }
  if (!m_eval_current) {
    settle();
    m_algorithm->agree();
    c.backend.copy(*c.stream, m_eval->params(), m_algorithm->central_params(), c.params);
    c.backend.copy(*c.stream, m_eval->state(), m_algorithm->central_state(), c.state);
    c.backend.synchronize(*c.stream);
    m_eval_current = true;
  }
  return *m_eval;
}

void LearnerGroup::add_learner() {
  GroupCore& c = *m_core;
  settle();
  Learner& l = c.replicas->add();
  c.backend.copy(*c.stream, l.graph->params(), m_algorithm->central_params(), c.params);
  c.backend.copy(*c.stream, l.graph->state(), m_algorithm->central_state(), c.state);
  if (m_algorithm->central_is_replica0()) {
    // Synchronous phase: every replica must take the same steps, optimizer state included.
    const Learner& first = (*c.replicas)[0];
    const auto source = first.optimizer->state();
    const auto target = l.optimizer->state();
    for (size_t i = 0; i < source.size() && i < target.size(); ++i)
      c.backend.copy(*c.stream, target[i].data, source[i].data, source[i].count);
    l.optimizer->set_steps(first.optimizer->steps());
  }
  c.backend.record(*c.group_event, *c.stream);
  c.backend.synchronize(*c.stream);
}

bool LearnerGroup::complete() {
  const bool changed = m_algorithm->complete();
  if (changed) {
    // Anything the learners run next is ordered after what it did to their replicas.
    m_core->backend.record(*m_core->group_event, *m_core->stream);
    m_eval_current = false;
  }
  return changed;
}

int64_t LearnerGroup::outer_steps() const { return m_algorithm->outer_steps(); }

AsyncOuterStats LearnerGroup::async_stats() const { return m_algorithm->async_stats(); }

void LearnerGroup::prepare_checkpoint() {
  settle();
  m_algorithm->agree();
  m_algorithm->before_save();
  m_eval_current = false;
}

void LearnerGroup::remove_learner() {
  settle();
  m_core->replicas->remove();
}

}  // namespace squall::parallel
