// Averaging by level, parallel.periods = [inside, across] (docs/training.md, "Averaging by
// level"): several ranks of one job in one process, each on a thread of its own with its own
// learner group, summed by an in-process allreduce over the job and one per node, against
// references of hierarchical local SGD and of SMA by level written out in double; [1, 1] and
// [p, p] against today's parallel.period; a checkpoint in the middle of an across period;
// the config's checks. And parallel.algorithm = outer, whose inner steps are ssgd inside each
// node and whose outer steps join the nodes (docs/training.md, "The outer optimizer"), against
// its equations in double, against ssgd, and across a checkpoint.
#include <barrier>
#include <catch2/catch.hpp>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <thread>

#include "src/config/config.hpp"
#include "src/core/error.hpp"
#include "src/parallel/learners.hpp"
#include "src/train/run_dir.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using parallel::Algorithm;
using parallel::LearnerGroup;
using parallel::LearnerGroupOptions;
using Catch::Matchers::Contains;

namespace {

// The sum over a set of threads ("ranks"): every member copies its buffer in, then each adds
// the copies in member order, so that all end with the same bits, as the job's sums do.
class ThreadSum final : public mpi::Allreduce {
 public:
  struct Shared {
    explicit Shared(int n) : members(n), barrier(n), slots(static_cast<size_t>(n)) {}
    int members;
    std::barrier<> barrier;
    std::vector<std::vector<float>> slots;
  };
  ThreadSum(std::shared_ptr<Shared> shared, int index) : m_shared(std::move(shared)), m_index(index) {}

  using Allreduce::start;
  Ticket start(void* data, size_t count, mpi::DType type, std::string_view, void*) override {
    check_type(type);
    auto* x = static_cast<float*>(data);
    Shared& s = *m_shared;
    s.slots[static_cast<size_t>(m_index)].assign(x, x + count);
    s.barrier.arrive_and_wait();
    for (size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (const auto& slot : s.slots) sum += slot[i];
      x[i] = sum;
    }
    s.barrier.arrive_and_wait();  // nobody refills a slot before every member has read it
    return ++m_started;
  }
  bool test(Ticket) override { return true; }
  void wait(Ticket) override {}
  int ranks() const override { return m_shared->members; }
  bool takes(mpi::DType type) const override { return type == mpi::DType::f32; }
  std::string mode() const override { return "threads"; }

 private:
  std::shared_ptr<Shared> m_shared;
  int m_index;
  Ticket m_started = 0;
};

struct Job {
  Algorithm algorithm = Algorithm::sma;
  int64_t inside = 0, across = 1;  // inside 0: today's parallel.period = across
  std::vector<int> node_of_rank{0, 0, 1, 1};
  int learners = 2;
  int64_t steps = 8;
  int64_t resume_at = -1;  // >= 0: checkpoint after this many steps, continue in new groups
  optim::OuterOptions outer;
  bool decay = false;            // the learning rate k_lr / (1 + step) instead of k_lr (outer's QSR)
  int64_t warmup = 0;            // a linear warm-up of the learning rate over this many steps first
  bool complete_at_end = false;  // LearnerGroup::complete() after the last step, one more Snap
};

constexpr int64_t k_batch = 3;
constexpr double k_alpha = 0.2, k_mu = 0.7, k_lr = 0.3;

// The learning rate of a step, as the group is given it.
float lr_at(const Job& job, int64_t step) {
  if (step < job.warmup) return static_cast<float>(k_lr * static_cast<double>(step + 1) / static_cast<double>(job.warmup));
  return static_cast<float>(job.decay ? k_lr / static_cast<double>(1 + step) : k_lr);
}

// What a rank holds after a step: the central model, its node's model, its replicas.
struct Snap {
  std::vector<float> central, node;
  std::vector<std::vector<float>> replicas;
};
using Trace = std::vector<std::vector<Snap>>;  // [rank][step]

Snap snap(const LearnerGroup& group, int learners) {
  const size_t n = group.param_arena_floats();
  Snap s;
  s.central = test::on_host(group.central_params(), n);
  s.node = test::on_host(group.node_params(), n);
  for (int j = 0; j < learners; ++j) s.replicas.push_back(test::on_host(group.replica_params(j), n));
  return s;
}

int ranks_on(const std::vector<int>& node_of_rank, int node) {
  return static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.end(), node));
}

Trace run_job(const Job& job) {
  const int ranks = static_cast<int>(job.node_of_rank.size());
  const int nodes = *std::max_element(job.node_of_rank.begin(), job.node_of_rank.end()) + 1;
  auto everyone = std::make_shared<ThreadSum::Shared>(ranks);
  std::vector<std::shared_ptr<ThreadSum::Shared>> per_node;
  for (int n = 0; n < nodes; ++n) per_node.push_back(std::make_shared<ThreadSum::Shared>(ranks_on(job.node_of_rank, n)));
  Trace trace(static_cast<size_t>(ranks));
  std::vector<std::exception_ptr> failed(static_cast<size_t>(ranks));
  auto rank_main = [&](int rank) {
    try {
      const int node = job.node_of_rank[static_cast<size_t>(rank)];
      int local = 0;
      for (int r = 0; r < rank; ++r) local += job.node_of_rank[static_cast<size_t>(r)] == node ? 1 : 0;
      auto backend = test::make_test_backend(1);
      ThreadSum job_sum(everyone, rank), node_sum(per_node[static_cast<size_t>(node)], local);
      LearnerGroupOptions o;
      o.algorithm = job.algorithm;
      o.learners = job.learners;
      o.ranks = ranks;
      o.rank = rank;
      o.period = job.across;
      o.inside_period = job.inside;
      o.node_ranks = ranks_on(job.node_of_rank, node);
      o.alpha = k_alpha;
      o.momentum = k_mu;
      o.outer = job.outer;
      o.threads = 1;
      auto make = [&] {
        return std::make_unique<LearnerGroup>(*backend, test::make_tiny_graph, k_batch, k_batch, test::plain_sgd(),
                                              std::vector<float>{}, o, job_sum, &node_sum);
      };
      auto group = make();
      for (int64_t step = 0; step < job.steps; ++step) {
        if (step == job.resume_at) {
          checkpoint::CheckpointData shared, own;
          group->save_shared(shared);
          group->save_own(own);
          group = make();
          group->restore(shared, &own);
        }
        const test::TinyStep batches = test::tiny_step(rank, job.learners, step, k_batch);
        group->step(batches.inputs, step, lr_at(job, step));
        if (job.complete_at_end && step + 1 == job.steps) {
          trace[static_cast<size_t>(rank)].push_back(snap(*group, job.learners));
          group->complete();
        }
        trace[static_cast<size_t>(rank)].push_back(snap(*group, job.learners));
      }
    } catch (...) {
      failed[static_cast<size_t>(rank)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
  return trace;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double diff(const std::vector<float>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

double diff(const std::vector<float>& a, const std::vector<float>& b) {
  return diff(a, std::vector<double>(b.begin(), b.end()));
}

using Vec = std::vector<double>;

// The reference, in double: every replica w[rank][learner], every node's centre and the one
// before it (sma), the job's central model.
struct Reference {
  std::vector<std::vector<Vec>> w;
  std::vector<Vec> zn, zpn;
  Vec z;
  Vec b;  // outer's momentum
  // outer's streamed sum: begun after an outer step's inner step, applied after the next one.
  bool pending = false;
  Vec pending_mean;
  double pending_lr = 0;
  std::vector<Vec> snapshot;  // [rank]: its node's model when the sum began
};

// The outer update of the centre from the job's mean at inner rate lr; returns the new centre.
void reference_outer_update(const Job& job, Reference& r, const Vec& mean, double lr) {
  const double eta = job.outer.lr, mu = job.outer.momentum;
  for (size_t i = 0; i < r.z.size(); ++i) {
    const double delta = r.z[i] - mean[i];
    r.b[i] = mu * r.b[i] + delta / lr;
    r.z[i] -= eta * lr * (job.outer.nesterov ? delta / lr + mu * r.b[i] : r.b[i]);
  }
}

// A streamed outer step still pending is applied: every replica keeps the inner steps taken since
// its sum began, on top of the new centre.
void reference_apply_pending(const Job& job, Reference& r) {
  if (!r.pending) return;
  reference_outer_update(job, r, r.pending_mean, r.pending_lr);
  for (size_t k = 0; k < r.w.size(); ++k)
    for (Vec& wj : r.w[k])
      for (size_t i = 0; i < wj.size(); ++i) wj[i] = r.z[i] + (wj[i] - r.snapshot[k][i]);
  r.pending = false;
}

Reference start_reference(const Job& job, const std::vector<float>& initial) {
  const int ranks = static_cast<int>(job.node_of_rank.size());
  const int nodes = *std::max_element(job.node_of_rank.begin(), job.node_of_rank.end()) + 1;
  Reference r;
  const Vec w0(initial.begin(), initial.end());
  r.w.assign(static_cast<size_t>(ranks), std::vector<Vec>(static_cast<size_t>(job.learners), w0));
  r.zn.assign(static_cast<size_t>(nodes), w0);
  r.zpn = r.zn;
  r.z = w0;
  r.b.assign(w0.size(), 0.0);
  return r;
}

// One step of hierarchical local SGD (Lin et al.), of SMA by level, or of outer, as
// docs/training.md writes them. outer: whether this step ends with an outer step (the test
// says; the fixed rule where it does not).
void reference_step(const Job& job, Reference& r, int64_t step, std::optional<bool> outer_now = std::nullopt) {
  const int ranks = static_cast<int>(r.w.size());
  const int nodes = static_cast<int>(r.zn.size());
  const int64_t done = step + 1;
  const bool job_level = done % job.across == 0;
  const bool node_level = !job_level && job.inside > 0 && done % job.inside == 0;
  const size_t n = r.z.size();
  std::vector<std::vector<Vec>> g(static_cast<size_t>(ranks));
  for (int k = 0; k < ranks; ++k)
    for (int j = 0; j < job.learners; ++j)
      g[k].push_back(test::tiny_gradient(r.w[k][j], test::tiny_batch(k, j, step, k_batch)));
  auto node_of = [&](int k) { return job.node_of_rank[static_cast<size_t>(k)]; };
  auto learners_of = [&](int node) { return ranks_on(job.node_of_rank, node) * job.learners; };
  // The sum of the replicas over a node (node >= 0) or the job (-1), before the step's update.
  auto sum_over = [&](int node) {
    Vec s(n, 0.0);
    for (int k = 0; k < ranks; ++k)
      if (node < 0 || node_of(k) == node)
        for (const Vec& wj : r.w[k])
          for (size_t i = 0; i < n; ++i) s[i] += wj[i];
    return s;
  };
  const double total = static_cast<double>(ranks * job.learners);
  if (job.algorithm == Algorithm::outer) {
    const double lr = lr_at(job, step);
    // Inner: each node's learners take one step on their mean gradient.
    for (int m = 0; m < nodes; ++m) {
      Vec mean_g(n, 0.0);
      for (int k = 0; k < ranks; ++k)
        if (node_of(k) == m)
          for (const Vec& gj : g[k])
            for (size_t i = 0; i < n; ++i) mean_g[i] += gj[i] / learners_of(m);
      for (int k = 0; k < ranks; ++k)
        if (node_of(k) == m)
          for (Vec& wj : r.w[k])
            for (size_t i = 0; i < n; ++i) wj[i] -= lr * mean_g[i];
    }
    reference_apply_pending(job, r);
    if (!outer_now.value_or(job.outer.outer_step_after(step))) return;
    // Outer: delta = z - mean, b <- mu b + delta / lr, z <- z - eta lr (delta / lr + mu b)
    // (Nesterov) or z <- z - eta lr b.
    Vec mean = sum_over(-1);
    for (double& v : mean) v /= total;
    if (job.outer.streaming) {
      r.pending = true;
      r.pending_mean = std::move(mean);
      r.pending_lr = lr;
      r.snapshot.clear();
      for (const auto& wk : r.w) r.snapshot.push_back(wk[0]);
      return;
    }
    reference_outer_update(job, r, mean, lr);
    for (auto& wk : r.w)
      for (Vec& wj : wk) wj = r.z;
    return;
  }
  if (job.algorithm == Algorithm::local_sgd) {
    for (int k = 0; k < ranks; ++k)
      for (int j = 0; j < job.learners; ++j)
        for (size_t i = 0; i < n; ++i) r.w[k][j][i] -= k_lr * g[k][j][i];
    if (job_level || node_level) {
      std::vector<Vec> mean(static_cast<size_t>(nodes));
      for (int m = 0; m < nodes; ++m) {
        mean[m] = sum_over(job_level ? -1 : m);
        const double count = job_level ? total : learners_of(m);
        for (double& v : mean[m]) v /= count;
      }
      for (int k = 0; k < ranks; ++k)
        for (Vec& wj : r.w[k]) wj = mean[node_of(k)];
      if (job_level) r.z = mean[0];
    }
    return;
  }
  // sma
  std::vector<Vec> W(static_cast<size_t>(nodes));
  for (int m = 0; m < nodes; ++m) W[m] = sum_over(m);
  const Vec W_job = sum_over(-1);
  for (int k = 0; k < ranks; ++k)
    for (int j = 0; j < job.learners; ++j)
      for (size_t i = 0; i < n; ++i) {
        const double pull = job_level || node_level ? k_alpha * (r.w[k][j][i] - r.zn[node_of(k)][i]) : 0.0;
        r.w[k][j][i] -= pull + k_lr * g[k][j][i];
      }
  if (node_level) {
    for (int m = 0; m < nodes; ++m) {
      const double Ln = learners_of(m), beta = std::min(k_alpha * Ln, 1.0);
      Vec z_new(n);
      for (size_t i = 0; i < n; ++i)
        z_new[i] = r.zn[m][i] + beta * (W[m][i] / Ln - r.zn[m][i]) + k_mu * (r.zn[m][i] - r.zpn[m][i]);
      r.zpn[m] = r.zn[m];
      r.zn[m] = z_new;
    }
  } else if (job_level) {
    Vec zbar(n, 0.0), zpbar(n, 0.0);
    for (int m = 0; m < nodes; ++m)
      for (size_t i = 0; i < n; ++i) {
        zbar[i] += learners_of(m) * r.zn[m][i] / total;
        zpbar[i] += learners_of(m) * r.zpn[m][i] / total;
      }
    const double beta = std::min(k_alpha * total, 1.0);
    for (size_t i = 0; i < n; ++i)
      r.z[i] = beta * W_job[i] / total + (1 - beta + k_mu) * zbar[i] - k_mu * zpbar[i];
    for (int m = 0; m < nodes; ++m) r.zpn[m] = r.zn[m] = r.z;
  }
}

std::vector<float> initial_params() {
  auto backend = test::make_test_backend(1);
  mpi::OneRankAllreduce alone;
  LearnerGroupOptions o;
  LearnerGroup g(*backend, test::make_tiny_graph, k_batch, k_batch, test::plain_sgd(), {}, o, alone);
  return test::on_host(g.central_params(), g.param_arena_floats());
}

}  // namespace

TEST_CASE("parallel.periods [1, 1] and [p, p] are parallel.period 1 and p, bit for bit", "[learners][periods]") {
  const Algorithm algorithm = GENERATE(Algorithm::sma, Algorithm::local_sgd);
  const int64_t p = GENERATE(1, 4);
  Job today;
  today.algorithm = algorithm;
  today.across = p;
  Job same = today;
  same.inside = p;
  const Trace a = run_job(today), b = run_job(same);
  INFO(parallel::algorithm_name(algorithm) << " period " << p);
  for (size_t k = 0; k < a.size(); ++k) {
    CHECK(same_bits(a[k].back().central, b[k].back().central));
    for (size_t j = 0; j < a[k].back().replicas.size(); ++j)
      CHECK(same_bits(a[k].back().replicas[j], b[k].back().replicas[j]));
  }
  // The run trained: the check above compared models that moved.
  CHECK(diff(a[0].back().replicas[0], initial_params()) > 1e-3);
}

TEST_CASE("local-sgd [1, 4] averages inside each node every step and over the job every 4", "[learners][periods]") {
  Job job;
  job.algorithm = Algorithm::local_sgd;
  job.inside = 1;
  job.across = 4;
  job.node_of_rank = GENERATE(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 1});
  const Trace t = run_job(job);
  Reference ref = start_reference(job, initial_params());
  const size_t ranks = t.size();
  for (int64_t step = 0; step < job.steps; ++step) {
    reference_step(job, ref, step);
    INFO("nodes of ranks " << job.node_of_rank.size() << ", step " << step + 1);
    for (size_t k = 0; k < ranks; ++k)
      for (int j = 0; j < job.learners; ++j) CHECK(diff(t[k][step].replicas[j], ref.w[k][j]) < 1e-5);
    const bool across = (step + 1) % job.across == 0;
    // Inside a node every replica is the very same model; across nodes they differ until
    // the job's average, after which every replica and the central model are one.
    for (size_t k = 0; k < ranks; ++k)
      for (int j = 0; j < job.learners; ++j) {
        const bool same_node = job.node_of_rank[k] == 0;
        if (across || same_node) CHECK(same_bits(t[k][step].replicas[j], t[0][step].replicas[0]));
        else CHECK(diff(t[k][step].replicas[j], t[0][step].replicas[0]) > 1e-6);
      }
    if (across) CHECK(same_bits(t[ranks - 1][step].central, t[0][step].replicas[0]));
  }
}

TEST_CASE("sma [1, 4] keeps one centre per node and joins them every 4 steps", "[learners][periods]") {
  Job job;
  job.algorithm = Algorithm::sma;
  job.inside = 1;
  job.across = 4;
  job.node_of_rank = GENERATE(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 1});
  const Trace t = run_job(job);
  Reference ref = start_reference(job, initial_params());
  const size_t ranks = t.size();
  for (int64_t step = 0; step < job.steps; ++step) {
    reference_step(job, ref, step);
    INFO("nodes of ranks " << job.node_of_rank.size() << ", step " << step + 1);
    for (size_t k = 0; k < ranks; ++k) {
      const int node = job.node_of_rank[k];
      for (int j = 0; j < job.learners; ++j) CHECK(diff(t[k][step].replicas[j], ref.w[k][j]) < 1e-5);
      CHECK(diff(t[k][step].node, ref.zn[static_cast<size_t>(node)]) < 1e-5);
      CHECK(diff(t[k][step].central, ref.z) < 1e-5);
      // Every rank of a node holds its node's centre bit for bit, every rank the job's.
      const size_t first_of_node = static_cast<size_t>(
          std::find(job.node_of_rank.begin(), job.node_of_rank.end(), node) - job.node_of_rank.begin());
      CHECK(same_bits(t[k][step].node, t[first_of_node][step].node));
      CHECK(same_bits(t[k][step].central, t[0][step].central));
    }
    const bool across = (step + 1) % job.across == 0;
    // (At step 1 every centre moves towards the initial model, which all replicas were at.)
    if (across) CHECK(same_bits(t[ranks - 1][step].node, t[0][step].node));
    else if (step > 0) CHECK(diff(t[ranks - 1][step].node, t[0][step].node) > 1e-6);
  }
}

TEST_CASE("periods [1, 4] train another model than [1, 1] and [4, 4]", "[learners][periods]") {
  const Algorithm algorithm = GENERATE(Algorithm::sma, Algorithm::local_sgd);
  Job by_level;
  by_level.algorithm = algorithm;
  by_level.inside = 1;
  by_level.across = 4;
  Job every_step = by_level, every_4 = by_level;
  every_step.inside = every_step.across = 1;
  every_4.inside = 4;
  const auto a = run_job(by_level)[0].back().central;
  INFO(parallel::algorithm_name(algorithm));
  CHECK(diff(a, run_job(every_step)[0].back().central) > 1e-5);
  CHECK(diff(a, run_job(every_4)[0].back().central) > 1e-5);
}

// A resumed job ends with the whole job's bits: the centre, the node's model and every replica on
// every rank.
void check_same_end(const Trace& whole, const Trace& resumed) {
  REQUIRE(whole.size() == resumed.size());
  for (size_t k = 0; k < whole.size(); ++k) {
    INFO("rank " << k);
    CHECK(same_bits(whole[k].back().central, resumed[k].back().central));
    CHECK(same_bits(whole[k].back().node, resumed[k].back().node));
    for (size_t j = 0; j < whole[k].back().replicas.size(); ++j)
      CHECK(same_bits(whole[k].back().replicas[j], resumed[k].back().replicas[j]));
  }
}

// Options of a one-rank group of two learners of `algorithm` (one thread).
LearnerGroupOptions one_rank(Algorithm algorithm) {
  LearnerGroupOptions o;
  o.algorithm = algorithm;
  o.learners = 2;
  o.threads = 1;
  return o;
}

TEST_CASE("a checkpoint in the middle of an across period resumes bit for bit", "[learners][periods]") {
  Job job;
  job.algorithm = GENERATE(Algorithm::sma, Algorithm::local_sgd);
  job.inside = 1;
  job.across = 4;
  job.steps = 11;
  const Trace whole = run_job(job);
  job.resume_at = 6;  // two inside steps after the job's average of step 4
  const Trace resumed = run_job(job);
  INFO(parallel::algorithm_name(job.algorithm));
  check_same_end(whole, resumed);
}

TEST_CASE("sma by level: a checkpoint without the node's centre is refused naming it", "[learners][periods]") {
  auto backend = test::make_test_backend(1);
  mpi::OneRankAllreduce alone;
  LearnerGroupOptions o = one_rank(Algorithm::sma);
  o.period = 4;
  o.inside_period = 1;
  LearnerGroup g(*backend, test::make_tiny_graph, k_batch, k_batch, test::plain_sgd(), {}, o, alone);
  checkpoint::CheckpointData shared, own;
  g.save_shared(shared);
  g.save_own(own);
  REQUIRE(own.arrays.count("node_central/z") == 1);
  own.arrays.erase("node_central/z");
  own.origin = "step-6/rank-0";
  REQUIRE_THROWS_WITH(g.restore(shared, &own), Contains("step-6/rank-0") && Contains("node_central/z"));
}

TEST_CASE("parallel.periods: the config's checks name the key and the values", "[config][periods]") {
  auto load = [](std::vector<std::string> sets) { return config::load_config("", sets); };
  SECTION("across a multiple of inside") {
    REQUIRE_THROWS_WITH(load({"parallel.algorithm=sma", "parallel.periods=[3, 4]"}),
                        Contains("parallel.periods = [3, 4]") && Contains("multiple of inside"));
  }
  SECTION("two numbers, both > 0") {
    REQUIRE_THROWS_WITH(load({"parallel.algorithm=sma", "parallel.periods=[1, 2, 4]"}),
                        Contains("parallel.periods must be [inside, across]"));
    REQUIRE_THROWS_WITH(load({"parallel.algorithm=sma", "parallel.periods=[0, 4]"}), Contains("must be > 0"));
  }
  SECTION("a period that disagrees") {
    REQUIRE_THROWS_WITH(load({"parallel.algorithm=sma", "parallel.period=2", "parallel.periods=[1, 4]"}),
                        Contains("parallel.period = 2 disagree"));
  }
  SECTION("ssgd takes [1, 1] only") {
    REQUIRE_THROWS_WITH(load({"parallel.periods=[1, 4]"}), Contains("parallel.periods = [1, 4] applies to "
                                                                    "parallel.algorithm = sma or local-sgd"));
    CHECK(config::sync_periods(load({"parallel.periods=[1, 1]"}).parallel) == config::SyncPeriods{1, 1});
  }
  SECTION("period is short for [period, period]; periods sets period to its across") {
    CHECK(config::sync_periods(load({"parallel.algorithm=sma", "parallel.period=4"}).parallel) ==
          config::SyncPeriods{4, 4});
    const config::Config c = load({"parallel.algorithm=local-sgd", "parallel.periods=[2, 8]"});
    CHECK(config::sync_periods(c.parallel) == config::SyncPeriods{2, 8});
    CHECK(c.parallel.period == 8);
    CHECK(load({"parallel.algorithm=sma", "parallel.period=8", "parallel.periods=[2, 8]"}).parallel.period == 8);
    // A resolved config loads again (to_toml writes both keys).
    CHECK(config::parse_config(config::to_toml(c), "config.toml").parallel == c.parallel);
  }
  SECTION("a resume with other periods is refused") {
    const config::Config then = load({"parallel.algorithm=sma", "parallel.periods=[1, 4]"});
    const config::Config now = load({"parallel.algorithm=sma", "parallel.periods=[2, 4]"});
    std::vector<std::string> changed;
    CHECK_THAT(train::resume_incompatibility(now, then, changed), Contains("parallel.periods: [1, 4] -> [2, 4]"));
    CHECK(train::resume_incompatibility(then, then, changed).empty());
    // parallel.period alone is [period, period]: written to config.toml and read back, the
    // same periods spelt either way are no change.
    const config::Config alone = config::parse_config(
        config::to_toml(load({"parallel.algorithm=sma", "parallel.period=4"})), "config.toml");
    const config::Config spelt = load({"parallel.algorithm=sma", "parallel.periods=[4, 4]"});
    CHECK(train::resume_incompatibility(spelt, alone, changed).empty());
    CHECK(train::resume_incompatibility(alone, spelt, changed).empty());
    CHECK(changed.empty());
    CHECK_THAT(train::resume_incompatibility(load({"parallel.algorithm=sma", "parallel.periods=[2, 4]"}), alone, changed),
               Contains("parallel.periods: [4, 4] -> [2, 4]"));
  }
}

TEST_CASE("outer: ssgd inside each node, and every H steps an outer step across nodes as its equations say",
          "[learners][outer]") {
  Job job;
  job.algorithm = Algorithm::outer;
  job.steps = 9;
  job.node_of_rank = GENERATE(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 1});
  job.outer = GENERATE(optim::OuterOptions{.period = 3, .lr = 0.7, .momentum = 0.5, .nesterov = true, .start_step = 0},
                       optim::OuterOptions{.period = 4, .lr = 1.3, .momentum = 0.6, .nesterov = false, .start_step = 2});
  const Trace t = run_job(job);
  Reference ref = start_reference(job, initial_params());
  const size_t ranks = t.size();
  bool apart = false;
  for (int64_t step = 0; step < job.steps; ++step) {
    reference_step(job, ref, step);
    const bool outer = job.outer.outer_step_after(step);
    INFO("ranks " << ranks << ", H " << job.outer.period << ", step " << step + 1 << (outer ? " (outer)" : ""));
    for (size_t k = 0; k < ranks; ++k) {
      for (int j = 0; j < job.learners; ++j) CHECK(diff(t[k][step].replicas[j], ref.w[k][j]) < 1e-5);
      CHECK(diff(t[k][step].central, ref.z) < 1e-5);
      CHECK(same_bits(t[k][step].central, t[0][step].central));
      // Inside a node one model; across nodes as many as there are, until the outer step.
      const size_t first_of_node = job.node_of_rank[k] == 0 ? 0 : 2;
      CHECK(same_bits(t[k][step].replicas[1], t[first_of_node][step].replicas[0]));
      if (outer) CHECK(same_bits(t[k][step].replicas[0], t[0][step].central));
    }
    if (!outer) apart = apart || diff(t[ranks - 1][step].replicas[0], t[0][step].replicas[0]) > 1e-6;
  }
  CHECK(apart);  // the nodes did train apart between outer steps
}

TEST_CASE("outer with H = 1, outer lr 1 and momentum 0 is ssgd: bit for bit on one node, within rounding across nodes",
          "[learners][outer]") {
  Job outer;
  outer.algorithm = Algorithm::outer;
  outer.outer = optim::OuterOptions{.period = 1, .lr = 1.0, .momentum = 0.0, .nesterov = true, .start_step = 0};
  outer.steps = 6;
  Job ssgd = outer;
  ssgd.algorithm = Algorithm::ssgd;
  SECTION("one node: the node's sum is the job's, and the mean of identical replicas is each of them") {
    outer.node_of_rank = ssgd.node_of_rank = {0, 0};
    const Trace a = run_job(outer), b = run_job(ssgd);
    for (size_t k = 0; k < a.size(); ++k)
      for (int64_t step = 0; step < outer.steps; ++step) {
        INFO("rank " << k << " step " << step + 1);
        CHECK(same_bits(a[k][step].central, b[k][step].central));
        CHECK(same_bits(a[k][step].replicas[1], b[k][step].replicas[1]));
      }
    CHECK(diff(a[0].back().central, initial_params()) > 1e-3);
  }
  SECTION("two nodes: the mean of the nodes' steps is ssgd's step, rounded another way") {
    // ssgd: x - lr (g_0 + g_1) / 2, one rounding of the sum; outer: ((x - lr g_0) + (x - lr g_1)) / 2.
    outer.node_of_rank = ssgd.node_of_rank = {0, 1};
    const Trace a = run_job(outer), b = run_job(ssgd);
    const double d = diff(a[0].back().central, b[0].back().central);
    INFO("largest difference after " << outer.steps << " steps: " << d);
    CHECK(d < 1e-5);
    CHECK(diff(a[0].back().central, initial_params()) > 1e-3);
  }
}

TEST_CASE("outer: a checkpoint in the middle of an outer period resumes bit for bit", "[learners][outer]") {
  Job job;
  job.algorithm = Algorithm::outer;
  job.outer = optim::OuterOptions{.period = 4, .lr = 0.8, .momentum = 0.7, .nesterov = true, .start_step = 0};
  job.steps = 11;
  const Trace whole = run_job(job);
  job.resume_at = 6;  // two inner steps after the outer step of step 4
  const Trace resumed = run_job(job);
  check_same_end(whole, resumed);
  // The nodes' models at step 6 differ: the checkpoint had to hold each of them.
  CHECK(diff(whole[0][5].replicas[0], whole[3][5].replicas[0]) > 1e-6);
}

// Whether after step `step` every replica of every rank holds the centre (an outer step, not streamed).
bool at_centre(const Trace& t, int64_t step) {
  for (const auto& rank : t)
    for (const auto& w : rank[static_cast<size_t>(step)].replicas)
      if (!same_bits(w, rank[static_cast<size_t>(step)].central)) return false;
  return true;
}

TEST_CASE("outer with QSR: the rounds grow as the learning rate decays, and a checkpoint keeps the round",
          "[learners][outer]") {
  // lr = 0.3 / (1 + step), H = 2, qsr = 0.15: a round lasts max(2, floor((0.15 / lr)^2)) steps from
  // the rate of its first step: steps 1-2 (lr 0.3: 0.25 -> 2), 3-4 (lr 0.1: 2.25 -> 2), 5-10
  // (lr 0.06: 6.25 -> 6), then 11-40 (lr 0.3 / 11: 30.25 -> 30). The outer steps end steps 2, 4, 10.
  Job job;
  job.algorithm = Algorithm::outer;
  job.decay = true;
  job.steps = 13;
  job.outer = optim::OuterOptions{.period = 2, .lr = 0.8, .momentum = 0.5, .qsr = 0.15};
  const Trace t = run_job(job);
  Reference ref = start_reference(job, initial_params());
  const std::vector<int64_t> expected{2, 4, 10};
  for (int64_t step = 0; step < job.steps; ++step) {
    const bool outer = std::find(expected.begin(), expected.end(), step + 1) != expected.end();
    INFO("step " << step + 1 << (outer ? " (an outer step)" : ""));
    CHECK(at_centre(t, step) == outer);
    reference_step(job, ref, step, outer);
    CHECK(diff(t[0][static_cast<size_t>(step)].central, ref.z) < 1e-5);
    CHECK(diff(t.back()[static_cast<size_t>(step)].replicas[0], ref.w.back()[0]) < 1e-5);
  }
  SECTION("resumed inside the 6-step round, at step 7: the round's length comes from the checkpoint") {
    job.resume_at = 7;
    const Trace resumed = run_job(job);
    check_same_end(t, resumed);
  }
}

TEST_CASE("outer with QSR after a warm-up: rounds that start in the warm-up last H, the later ones QSR's",
          "[learners][outer]") {
  // The warm-up's rates are small, and QSR's rounds long where the rate is: from the first
  // step's rate (0.3 / 5) a round would last floor((0.95 / 0.06)^2) = 250 steps and the run would
  // never synchronise. Gu et al. keep the base period during the warm-up.
  optim::OuterOptions o{.period = 2, .lr = 1.0, .momentum = 0.0, .qsr = 0.95, .warmup_steps = 5};
  CHECK(o.round_length(0, 0.06) == 2);
  CHECK(o.round_length(4, 0.3) == 2);   // the warm-up's last step
  CHECK(o.round_length(5, 0.3) == 10);  // after it: floor((0.95 / 0.3)^2) = floor(10.03)
  CHECK(o.round_length(9, 0.03) == 1002);
  o.warmup_steps = 0;
  CHECK(o.round_length(0, 0.06) == 250);
  o.qsr = 0;
  CHECK(o.round_length(7, 0.01) == 2);  // without QSR every round lasts H

  // The group: lr 0.3 (s + 1) / 5 for steps s < 5, then 0.3. Rounds of 2 start at steps 0, 2
  // and 4 (in the warm-up), the next at step 6 (lr 0.3): 10 steps. Outer steps end steps 2, 4,
  // 6 and 16.
  Job job;
  job.algorithm = Algorithm::outer;
  job.warmup = 5;
  job.steps = 18;
  job.outer = optim::OuterOptions{.period = 2, .lr = 0.8, .momentum = 0.5, .qsr = 0.95, .warmup_steps = 5};
  const Trace t = run_job(job);
  Reference ref = start_reference(job, initial_params());
  const std::vector<int64_t> expected{2, 4, 6, 16};
  for (int64_t step = 0; step < job.steps; ++step) {
    const bool outer = std::find(expected.begin(), expected.end(), step + 1) != expected.end();
    INFO("step " << step + 1 << (outer ? " (an outer step)" : ""));
    CHECK(at_centre(t, step) == outer);
    reference_step(job, ref, step, outer);
    CHECK(diff(t[0][static_cast<size_t>(step)].central, ref.z) < 1e-5);
  }
  CHECK(diff(t[0].back().central, initial_params()) > 1e-3);  // the centre moved
}

// The job's models after `steps` steps of `job` in double, with the outer steps (non-streamed
// or streamed) after the steps of `outer_after` (1-based), and a pending streamed one applied.
Reference reference_outer_run(const Job& job, const std::vector<int64_t>& outer_after) {
  Reference ref = start_reference(job, initial_params());
  for (int64_t step = 0; step < job.steps; ++step)
    reference_step(job, ref, step, std::find(outer_after.begin(), outer_after.end(), step + 1) != outer_after.end());
  reference_apply_pending(job, ref);
  return ref;
}

TEST_CASE("outer: the run ends with an outer step that joins the steps since the last one", "[learners][outer]") {
  // H = 4 over 6 steps: an outer step after step 4, and complete() after step 6 is the outer step
  // an outer step after step 6 would be; the centre before it lacked steps 5 and 6.
  Job job;
  job.algorithm = Algorithm::outer;
  job.steps = 6;
  job.complete_at_end = true;
  job.node_of_rank = GENERATE(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 1});
  const bool streamed = GENERATE(false, true);
  job.outer = optim::OuterOptions{.period = 4, .lr = 0.8, .momentum = 0.5, .streaming = streamed};
  INFO((streamed ? "streamed" : "not streamed") << ", " << job.node_of_rank.size() << " ranks");
  const Trace t = run_job(job);
  const size_t before = static_cast<size_t>(job.steps) - 1, after = static_cast<size_t>(job.steps);
  const Reference last_at_4 = reference_outer_run(job, {4}), final = reference_outer_run(job, {4, 6});
  for (size_t k = 0; k < t.size(); ++k) {
    INFO("rank " << k);
    // Before: the centre of the outer step after step 4 (streamed: applied after step 5).
    CHECK(diff(t[k][before].central, last_at_4.z) < 1e-5);
    // After: the outer step after step 6, every replica restarted from it.
    CHECK(diff(t[k][after].central, final.z) < 1e-5);
    for (int j = 0; j < job.learners; ++j) CHECK(same_bits(t[k][after].replicas[j], t[k][after].central));
    CHECK(same_bits(t[k][after].central, t[0][after].central));
  }
  CHECK(diff(t[0][after].central, t[0][before].central) > 1e-6);  // steps 5 and 6 are in the final model
}

TEST_CASE("outer: a run that ends on an outer step ends with it: complete() changes nothing", "[learners][outer]") {
  Job job;
  job.algorithm = Algorithm::outer;
  job.steps = 8;
  job.complete_at_end = true;
  job.outer = optim::OuterOptions{.period = 4, .lr = 0.8, .momentum = 0.5, .nesterov = true, .start_step = 0};
  const Trace t = run_job(job);
  for (size_t k = 0; k < t.size(); ++k) {
    CHECK(same_bits(t[k][8].central, t[k][7].central));
    CHECK(same_bits(t[k][8].replicas[1], t[k][7].replicas[1]));
  }
}

TEST_CASE("local-sgd and sma: the run ends with the job's synchronisation of the steps since the last one",
          "[learners][periods]") {
  // period 4 over 6 steps: the central model of step 4 lacks steps 5 and 6 until complete().
  Job job;
  job.algorithm = GENERATE(Algorithm::local_sgd, Algorithm::sma);
  job.across = 4;
  job.steps = 6;
  job.complete_at_end = true;
  INFO(parallel::algorithm_name(job.algorithm));
  const Trace t = run_job(job);
  const size_t before = 5, after = 6;
  const size_t n = t[0][before].central.size();
  // The learners' sum after step 6, over the job (L = 8).
  Vec W(n, 0.0);
  for (const auto& rank : t)
    for (const auto& w : rank[before].replicas)
      for (size_t i = 0; i < n; ++i) W[i] += w[i];
  const double L = static_cast<double>(t.size()) * job.learners;
  Vec expected(n);
  if (job.algorithm == Algorithm::local_sgd) {
    for (size_t i = 0; i < n; ++i) expected[i] = W[i] / L;  // every replica and the centre: the mean
  } else {
    // z <- z + beta (W / L - z) + mu (z - z_prev), z the centre of step 4, z_prev the one before
    // it (the initial model, the centre until step 4); beta = min(alpha L, 1).
    const std::vector<float>& z = t[0][before].central;
    const std::vector<float>& zp = t[0][2].central;
    const double beta = std::min(k_alpha * L, 1.0);
    for (size_t i = 0; i < n; ++i) expected[i] = z[i] + beta * (W[i] / L - z[i]) + k_mu * (z[i] - zp[i]);
  }
  for (size_t k = 0; k < t.size(); ++k) {
    INFO("rank " << k);
    CHECK(diff(t[k][after].central, expected) < 1e-5);
    CHECK(same_bits(t[k][after].central, t[0][after].central));
    for (size_t j = 0; j < t[k][after].replicas.size(); ++j) {
      if (job.algorithm == Algorithm::local_sgd)
        CHECK(same_bits(t[k][after].replicas[j], t[k][after].central));
      else  // sma's learners are not pulled: no step follows
        CHECK(same_bits(t[k][after].replicas[j], t[k][before].replicas[j]));
    }
  }
  CHECK(diff(t[0][after].central, t[0][before].central) > 1e-6);
  // Ending on a synchronisation, there is nothing to join.
  job.steps = 8;
  const Trace on_sync = run_job(job);
  CHECK(same_bits(on_sync[0][8].central, on_sync[0][7].central));
}

TEST_CASE("outer, streamed: the sum runs under the next inner step, which each node keeps on the new centre",
          "[learners][outer]") {
  Job job;
  job.algorithm = Algorithm::outer;
  job.steps = 9;
  job.complete_at_end = true;
  job.node_of_rank = GENERATE(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 1});
  job.outer = GENERATE(optim::OuterOptions{.period = 3, .lr = 0.7, .momentum = 0.5, .streaming = true},
                       optim::OuterOptions{.period = 1, .lr = 1.0, .momentum = 0.0, .streaming = true},
                       optim::OuterOptions{
                           .period = 2, .lr = 1.2, .momentum = 0.6, .nesterov = false, .start_step = 3, .streaming = true});
  const Trace t = run_job(job);
  Reference ref = start_reference(job, initial_params());
  const size_t ranks = t.size();
  for (int64_t step = 0; step < job.steps; ++step) {
    reference_step(job, ref, step);
    INFO("ranks " << ranks << ", H " << job.outer.period << ", step " << step + 1);
    for (size_t k = 0; k < ranks; ++k) {
      for (int j = 0; j < job.learners; ++j) CHECK(diff(t[k][step].replicas[j], ref.w[k][j]) < 1e-5);
      CHECK(diff(t[k][step].central, ref.z) < 1e-5);
      CHECK(same_bits(t[k][step].central, t[0][step].central));
    }
    // Streamed, no step ends with the replicas at the centre: each keeps its node's last step.
    if (step > 0) CHECK_FALSE(at_centre(t, step));
  }
  // The last outer step was still pending; complete() applies it: every replica is the centre.
  REQUIRE(ref.pending == job.outer.outer_step_after(job.steps - 1));
  reference_apply_pending(job, ref);
  const auto end = static_cast<size_t>(job.steps);
  for (size_t k = 0; k < ranks; ++k) {
    CHECK(diff(t[k][end].central, ref.z) < 1e-5);
    CHECK(diff(t[k][end].replicas[0], ref.w[k][0]) < 1e-5);
  }
  CHECK(at_centre(t, job.steps));
}

TEST_CASE("outer, streamed: a checkpoint with the sum in flight resumes bit for bit", "[learners][outer]") {
  Job job;
  job.algorithm = Algorithm::outer;
  job.outer = optim::OuterOptions{.period = 4, .lr = 0.8, .momentum = 0.7, .streaming = true};
  job.steps = 11;
  const Trace whole = run_job(job);
  // After step 8 the sum of the outer step after step 8 is in flight; after step 6 none is.
  job.resume_at = GENERATE(8, 6);
  const Trace resumed = run_job(job);
  INFO("resumed after step " << job.resume_at);
  check_same_end(whole, resumed);
}

TEST_CASE("outer: a checkpoint with a streamed sum pending is refused by a run without streaming",
          "[learners][outer]") {
  auto backend = test::make_test_backend(1);
  mpi::OneRankAllreduce one;
  LearnerGroupOptions o = one_rank(Algorithm::outer);
  o.outer = optim::OuterOptions{.period = 2, .lr = 0.7, .momentum = 0.5, .streaming = true};
  auto make = [&] {
    return std::make_unique<LearnerGroup>(*backend, test::make_tiny_graph, k_batch, k_batch, test::plain_sgd(),
                                          std::vector<float>{}, o, one, nullptr);
  };
  auto group = make();
  for (int64_t step = 0; step < 2; ++step)
    group->step(test::tiny_step(0, o.learners, step, k_batch).inputs, step, 0.1f);
  checkpoint::CheckpointData shared, own;
  shared.origin = "ckpt-2.h5";
  group->save_shared(shared);
  group->save_own(own);
  CHECK(shared.integer("outer/pending") == 1);
  o.outer.streaming = false;
  auto unstreamed = make();
  REQUIRE_THROWS_WITH(unstreamed->restore(shared, &own),
                      Contains("ckpt-2.h5") && Contains("parallel.outer.streaming = false"));
}
TEST_CASE("parallel.outer: the config's checks name the keys", "[config][outer]") {
  auto load = [](std::vector<std::string> sets) { return config::load_config("", sets); };
  CHECK(load({"parallel.algorithm=outer", "parallel.outer.period=16", "parallel.outer.momentum=0.5"})
            .parallel.outer.period == 16);
  REQUIRE_THROWS_WITH(load({"parallel.outer.period=4"}),
                      Contains("parallel.outer.period applies to parallel.algorithm = outer, not ssgd"));
  REQUIRE_THROWS_WITH(load({"parallel.algorithm=outer", "parallel.outer.momentum=1"}),
                      Contains("parallel.outer.momentum must be in [0, 1)"));
  REQUIRE_THROWS_WITH(load({"parallel.algorithm=outer", "parallel.outer.lr=0"}),
                      Contains("parallel.outer.lr must be > 0"));
  REQUIRE_THROWS_WITH(load({"parallel.algorithm=outer", "parallel.periods=[1, 4]"}),
                      Contains("parallel.periods = [1, 4]") && Contains("parallel.outer.period"));
  REQUIRE_THROWS_WITH(load({"parallel.algorithm=outer", "parallel.period=4"}),
                      Contains("parallel.period applies to parallel.algorithm = sma or local-sgd, not outer"));
  REQUIRE_THROWS_WITH(load({"parallel.algorithm=outer", "parallel.autotune=true"}),
                      Contains("parallel.autotune") && Contains("outer"));
  REQUIRE_THROWS_WITH(load({"parallel.outer.streaming=true"}),
                      Contains("parallel.outer.streaming applies to parallel.algorithm = outer, not ssgd"));
  REQUIRE_THROWS_WITH(load({"parallel.algorithm=outer", "parallel.outer.qsr=-1"}),
                      Contains("parallel.outer.qsr must be >= 0"));
  REQUIRE_THROWS_WITH(load({"parallel.algorithm=outer", "parallel.outer.start_fraction=1"}),
                      Contains("parallel.outer.start_fraction must be in [0, 1)"));
  REQUIRE_THROWS_WITH(
      load({"parallel.algorithm=outer", "parallel.outer.start_fraction=0.1", "parallel.outer.start_step=5"}),
      Contains("parallel.outer.start_fraction") && Contains("parallel.outer.start_step = 5"));
  const optim::OuterOptions post_local =
      load({"parallel.algorithm=outer", "parallel.outer.start_fraction=0.25"}).parallel.outer;
  CHECK(post_local.start_at(1000) == 250);
  CHECK(load({"parallel.algorithm=outer", "parallel.outer.start_step=7"}).parallel.outer.start_at(1000) == 7);
}
