// Rounds fitted to each node's speed (train.epoch_quorum < 1) and rounds that agree on the job's
// flags once a round (those, and parallel.outer.async): the loop's side of src/train/pace.hpp.
// The step stays the job's clock; a node that lets a step pass trains nothing in it, and the
// samples of that step stay at the front of its stream (docs/training.md, "A slow node").
#include <algorithm>
#include <cstdlib>
#include <string>

#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/train/training_run.hpp"

namespace squall::train {
namespace {

// SQUALL_PACE_SECONDS=T0,T1,...: node n's seconds per trained step are Tn, from the first round,
// instead of the measured ones: a test fits the rounds as a given straggler would, on any
// machine. A malformed value is a UsageError quoting it.
std::vector<double> forced_seconds(int nodes) {
  const char* env = std::getenv("SQUALL_PACE_SECONDS");
  if (env == nullptr || *env == '\0') return {};
  const std::string text(env);
  std::vector<double> out;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    char* rest = nullptr;
    const double v = std::strtod(item.c_str(), &rest);
    if (item.empty() || rest != item.c_str() + item.size() || !(v > 0))
      throw UsageError("SQUALL_PACE_SECONDS must be a list of seconds > 0, one per node, got '" + text + "'");
    out.push_back(v);
    at = end + 1;
  }
  if (std::ssize(out) != nodes)
    throw UsageError("SQUALL_PACE_SECONDS = '" + text + "' has " + std::to_string(out.size()) +
                     " values, and this job has " + std::to_string(nodes) + " nodes: give one per node");
  return out;
}

}  // namespace

void TrainingRun::setup_pace() {
  const bool outer = m_algorithm == parallel::Algorithm::outer;
  m_pace.on = outer && m_cfg.train.epoch_quorum < 1;
  m_pace.flags_per_round = m_pace.on || (outer && m_cfg.parallel.outer.async);
  m_pace.nodes = 1 + *std::max_element(m_node_of_rank.begin(), m_node_of_rank.end());
  m_pace.node_ranks.assign(static_cast<size_t>(m_pace.nodes), 0);
  for (int n : m_node_of_rank) ++m_pace.node_ranks[static_cast<size_t>(n)];
  if (!m_pace.on) return;
  m_pace.forced = forced_seconds(m_pace.nodes);
  m_pace.node_seconds = m_pace.forced;
}

std::vector<int64_t> TrainingRun::sampler_list(int64_t epoch, int64_t from) const {
  return m_data.sampler->indices(m_cfg.data.shuffle ? epoch : 0, m_spatial.node, m_spatial.local_rank, from);
}

// The epoch's own list joins the back of the stream (after what an earlier attempt of it took;
// a stream restored from a checkpoint holds it already), and the loader reads the stream from
// its front: the carried samples first.
void TrainingRun::start_paced_epoch(int64_t epoch, int64_t used, bool first) {
  const StepPlan& plan = m_data.plan;
  const int64_t batch = m_cfg.train.batch_size;
  m_pace.epoch_trained = m_pace.epoch_idle = 0;
  std::vector<int64_t> list;  // the list of `listed`'s epoch and start
  SampleRange listed{-1, -1, 0, 0};
  if (!(first && m_pace.restored)) {
    listed = {epoch, first ? m_pos.start_position : 0, 0, 0};
    list = sampler_list(epoch, listed.from);
    const int64_t size = std::ssize(list);
    const int64_t skip = std::min(size, (used - (first ? m_pos.start_batches : 0)) * batch);
    m_pace.stream.append({epoch, listed.from, skip, size});
  }
  m_pace.restored = false;
  if (!epoch_has_step(plan, used)) return;
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(m_pace.stream.size()));
  for (const SampleRange& r : m_pace.stream.ranges()) {
    if (r.epoch != listed.epoch || r.from != listed.from) {
      list = sampler_list(r.epoch, r.from);
      listed = r;
    }
    const int64_t end = std::min(r.end, std::ssize(list));
    for (int64_t i = r.begin; i < end; ++i) indices.push_back(list[static_cast<size_t>(i)]);
  }
  const int64_t batches = std::min(plan.batches_per_epoch - used, std::ssize(indices) / batch);
  m_device.loader->start_epoch(std::move(indices), batches);
}

// A step of a run whose rounds agree once a round: where it falls in the outer rounds, fitted at
// a round's start (or a resume's) to the nodes' seconds; trained, or let pass past the node's
// steps. Returns whether it ends a round.
bool TrainingRun::round_step(int64_t epoch, int64_t used) {
  const double lr = lr_at_samples(m_pos.samples_done);
  const parallel::RoundSpot spot = m_device.group->round_spot(m_pos.step, static_cast<float>(lr));
  if (m_pace.on) {
    if (spot.position == 0 || m_pace.round_fit.empty()) {
      m_pace.round_fit.assign(static_cast<size_t>(m_pace.nodes), spot.length);
      if (!m_pace.node_seconds.empty())
        m_pace.round_fit =
            fit_round_steps(m_pace.node_seconds, m_pace.node_ranks, spot.length, m_cfg.train.epoch_quorum);
    }
    // The samples the job trains in this step: those of the nodes whose fitted steps it is in.
    // Every rank fits every node's round from the same agreed seconds, so every rank counts the
    // same, and the learning rate and the run's end (fit_paced_end) fall alike everywhere.
    int64_t ranks = 0;
    for (size_t n = 0; n < m_pace.round_fit.size(); ++n)
      if (spot.position < m_pace.round_fit[n]) ranks += m_pace.node_ranks[n];
    m_pace.step_trained = step_samples() * ranks / m_ranks;
  }
  if (m_pace.on && spot.position >= m_pace.round_fit[static_cast<size_t>(m_topo.node())]) {
    idle_step(epoch, used, lr);
  } else {
    const Stopwatch t;
    train_step(epoch, used);
    if (m_pace.on) {
      const double seconds = t.seconds();
      // A step that ends the round holds the outer step, and under synchronous outer its wait
      // for the slowest node: not the node's pace.
      if (spot.position + 1 < spot.length) {
        m_pace.step_times.add(seconds);
        m_pace.attempt_trained_s += seconds;
        ++m_pace.attempt_trained;
      }
      m_pace.stream.take(m_data.plan.learners * m_cfg.train.batch_size);
      ++m_pace.trained_steps;
      ++m_pace.epoch_trained;
    }
  }
  return spot.position + 1 >= spot.length;
}

// A step this node lets pass: the clock moves, the group takes the outer step due after it, and
// the step's batches stay in the stream, carried.
void TrainingRun::idle_step(int64_t epoch, int64_t used, double lr) {
  m_fault.before_step(m_rank, m_pos.step + 1);
  m_device.group->idle_step(m_pos.step, static_cast<float>(lr));
  m_steady.step_ended(steady_seconds(), 0);
  ++m_pos.step;
  m_pos.at = {epoch, used};
  m_pos.samples_done += m_pace.step_trained;
  m_pace.carried += m_data.plan.learners * m_cfg.train.batch_size;
  ++m_pace.idle_steps;
  ++m_pace.epoch_idle;
  log_step(epoch, lr, {}, 0.0);
}

// A paced run trains the samples of its plan, train.epochs of the training set over the job: a
// node that lets steps pass trains fewer than the clock's steps take, so the run goes on past its
// planned steps, into epochs after train.epochs, until the job has trained them, and ends at the
// step at which it has (step_plan.hpp, fit_end_to_samples). The learning rate follows the samples
// trained, so its schedule ends there too. train.max_steps keeps its count of steps.
void TrainingRun::fit_paced_end() {
  if (m_pace.planned_steps == 0) m_pace.planned_steps = m_data.plan.total_steps;
  const StepPlan& p = m_data.plan;
  const int64_t was = p.total_steps;
  if (fit_end_to_samples(m_data.plan, m_pos.step, m_pos.at, m_pos.samples_done) != SampleEnd::extended || !m_root)
    return;
  const int64_t planned = p.schedule_steps * p.schedule_step_samples;
  if (was == m_pace.planned_steps)
    log::info("the run's " + std::to_string(m_pace.planned_steps) + " planned steps trained " +
              std::to_string(m_pos.samples_done) + " of its " + std::to_string(planned) +
              " samples over the job (train.epoch_quorum: slower nodes let steps pass): it goes on into epoch " +
              std::to_string(p.epochs) + " until it has trained them all");
}

// The epoch's end: the stream keeps only the samples carried (the epoch's own leftover, fewer
// than a step takes, goes as in any run), and the record says what each node trained.
// Collective: every rank ends its epochs at the same step.
void TrainingRun::end_paced_epoch(int64_t epoch, bool ended) {
  if (ended) m_pace.stream.keep_first(m_pace.carried);
  const std::vector<int> trained = m_world.allgather(static_cast<int>(m_pace.epoch_trained));
  const std::vector<int> idle = m_world.allgather(static_cast<int>(m_pace.epoch_idle));
  const int64_t carried = m_world.allreduce_sum(m_pace.carried);
  if (!m_root) return;
  std::vector<int64_t> node_trained(static_cast<size_t>(m_pace.nodes), 0), node_idle(node_trained);
  for (size_t r = 0; r < trained.size(); ++r) {
    node_trained[static_cast<size_t>(m_node_of_rank[r])] = trained[r];
    node_idle[static_cast<size_t>(m_node_of_rank[r])] = idle[r];
  }
  m_log->paced(epoch, m_pos.step, node_trained, node_idle, carried, m_cfg.train.epoch_quorum);
}

// The run's steps per node (all attempts'), what is carried at the end, and under
// parallel.outer.async every node's pushes and staleness: for summary.json. Collective.
void TrainingRun::gather_pace_records() {
  const parallel::AsyncOuterStats a = m_device.group->async_stats();
  const nlohmann::json mine = {{"trained", m_pace.trained_steps},
                               {"idle", m_pace.idle_steps},
                               {"pushes", a.pushes},
                               {"staleness_max", a.staleness_max},
                               {"staleness_mean", a.pushes > 0 ? a.staleness_sum / static_cast<double>(a.pushes) : 0.0},
                               {"wait_s", a.wait_s},
                               {"wait_cpu_s", a.wait_cpu_s},
                               {"serve_cpu_s", a.serve_cpu_s},
                               {"step_s", m_pace.attempt_trained > 0
                                              ? m_pace.attempt_trained_s / static_cast<double>(m_pace.attempt_trained)
                                              : 0.0}};
  const std::vector<std::string> all = m_world.gather_strings(mine.dump());
  const int64_t carried = m_world.allreduce_sum(m_pace.carried);
  if (!m_root) return;
  const auto nodes = static_cast<size_t>(m_pace.nodes);
  m_pace.node_trained.assign(nodes, 0);
  m_pace.node_idle.assign(nodes, 0);
  m_pace.node_step_s.assign(nodes, 0.0);
  m_pace.node_async = nlohmann::json::array();
  std::vector<nlohmann::json> leaders(nodes);
  for (size_t r = 0; r < all.size(); ++r) {
    const nlohmann::json j = nlohmann::json::parse(all[r]);
    const auto n = static_cast<size_t>(m_node_of_rank[r]);
    m_pace.node_trained[n] = j.at("trained").get<int64_t>();
    m_pace.node_idle[n] = j.at("idle").get<int64_t>();
    m_pace.node_step_s[n] = std::max(m_pace.node_step_s[n], j.at("step_s").get<double>());
    if (j.at("pushes").get<int64_t>() > 0) leaders[n] = j;  // the node's leader pushed for it
  }
  for (size_t n = 0; n < nodes; ++n) {
    if (leaders[n].is_null()) continue;
    nlohmann::json j = leaders[n];
    j.erase("trained");
    j.erase("idle");
    j.erase("step_s");
    j["node"] = n;
    m_pace.node_async.push_back(j);
  }
  m_pace.carried_total = carried;
}

}  // namespace squall::train
