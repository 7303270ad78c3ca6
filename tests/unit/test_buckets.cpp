// ssgd's gradient buckets on the nonblocking allreduce (mpi/sum.hpp): a bucket is handed over as soon as
// every learner's backward pass has finished its tensors, without waiting for the buckets
// before it, and nothing reads a bucket before its sum has completed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "src/nn/backend.hpp"
#include "src/parallel/buckets.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using parallel::LearnerGroup;
using parallel::LearnerGroupOptions;

namespace {

// A job of two identical ranks, played by one: a sum doubles the buffer, but only when it
// completes, and a sum completes only in wait() or after `test_calls` calls of test() on it.
// So a group that starts bucket 2 only after bucket 1 is complete, or that reads a bucket
// before its sum has completed, is caught.
class LazyTwinAllreduce final : public mpi::Allreduce {
 public:
  explicit LazyTwinAllreduce(int test_calls) : m_test_calls(test_calls) {}

  using mpi::Allreduce::start;
  Ticket start(void* data, size_t count, mpi::DType type, std::string_view, void*) override {
    REQUIRE(type == mpi::DType::f32);
    m_pending[++m_started] = {static_cast<float*>(data), count, 0};
    m_max_open = std::max(m_max_open, static_cast<int>(m_pending.size()));
    return m_started;
  }
  bool test(Ticket t) override {
    auto it = m_pending.find(t);
    if (it == m_pending.end()) return true;
    if (++it->second.tests < m_test_calls) return false;
    complete(it);
    return true;
  }
  void wait(Ticket t) override {
    auto it = m_pending.find(t);
    if (it != m_pending.end()) complete(it);
  }
  int ranks() const override { return 2; }
  bool takes(mpi::DType type) const override { return type == mpi::DType::f32; }
  std::string mode() const override { return "lazy twin"; }
  int max_open() const { return m_max_open; }
  Ticket started() const { return m_started; }

 private:
  struct Pending {
    float* data;
    size_t count;
    int tests;
  };
  void complete(std::map<Ticket, Pending>::iterator it) {
    for (size_t i = 0; i < it->second.count; ++i) it->second.data[i] *= 2;
    m_pending.erase(it);
  }
  int m_test_calls;
  Ticket m_started = 0;
  std::map<Ticket, Pending> m_pending;
  int m_max_open = 0;
};

}  // namespace

TEST_CASE("ssgd hands over every gradient bucket before the first completes, and waits before reading",
          "[learners][buckets]") {
  // A bucket completes on test() only after many polls (or in wait): with one bucket per tensor
  // (weight, bias) both are in flight at once, plus the BatchNorm-state part.
  const int test_calls = GENERATE(1000000, 3);
  auto backend = test::make_test_backend(2);
  LazyTwinAllreduce twin(test_calls);
  mpi::OneRankAllreduce alone;
  const int L = 2;
  const int64_t b = 3;
  optim::OptimizerConfig sgd = test::plain_sgd();
  sgd.momentum = 0.9;
  LearnerGroupOptions o;
  o.learners = L;
  o.ranks = 2;  // the twin's job
  o.bucket_floats = 1;  // one bucket per parameter tensor
  LearnerGroup group(*backend, test::make_tiny_graph, b, b, sgd, {}, o, twin);
  REQUIRE(group.buckets() == 2);
  // The same learners on one rank: the twin's doubled sum divided by twice the learners is
  // this rank's average, so the two groups must stay equal.
  LearnerGroupOptions one = o;
  one.ranks = 1;
  LearnerGroup reference(*backend, test::make_tiny_graph, b, b, sgd, {}, one, alone);
  for (int64_t step = 0; step < 5; ++step) {
    const test::TinyStep in = test::tiny_step(0, L, step, b);
    group.step(in.inputs, step, 0.2f);
    reference.step(in.inputs, step, 0.2f);
    INFO("step " << step << ", completes after " << test_calls << " tests");
    CHECK(test::max_diff(group.central_params(), reference.central_params(), test::k_tiny_arena) < 1e-6);
    CHECK(test::max_diff(group.replica_params(1), reference.central_params(), test::k_tiny_arena) < 1e-6);
  }
  CHECK(twin.started() == 5 * 3);  // per step: 2 buckets and the state part
  // The buckets are handed over when their events say so: no step blocks on the device more
  // than once (the host allreduce then reads the check where the sum left it).
  CHECK(group.host_waits() <= 5);
  if (test_calls > 1000) {
    CHECK(twin.max_open() == 3);
    CHECK(group.max_buckets_in_flight() == 3);
  }
}

TEST_CASE("bucket_floats sets the bucket boundaries at whole tensors, last layers first", "[learners][buckets]") {
  auto backend = test::make_test_backend(1);
  LazyTwinAllreduce twin(1);
  LearnerGroupOptions o;
  o.learners = 1;
  o.ranks = 2;
  // weight 12 floats at 0, bias 3 at the next 256-byte boundary (float 64): the bias's range
  // runs to the arena's end (64 floats with its padding), so a bucket of at most that many
  // floats cuts before the bias, and more keeps both together.
  const size_t bias_range = test::k_tiny_arena - test::k_tiny_bias;
  for (const auto& [floats, buckets] : std::vector<std::pair<size_t, size_t>>{
           {1, 2}, {3, 2}, {bias_range, 2}, {bias_range + 1, 1}, {1000, 1}}) {
    o.bucket_floats = floats;
    LearnerGroup group(*backend, test::make_tiny_graph, 2, 2, test::plain_sgd(), {}, o, twin);
    INFO("bucket_floats " << floats);
    CHECK(group.buckets() == buckets);
  }
}

TEST_CASE("plan_buckets: whole tensors from the end of the arena, each at least the size asked for",
          "[buckets]") {
  using Buckets = std::vector<std::pair<size_t, size_t>>;
  // Tensors at 0, 10, 30, 35, 100 in an arena of 200 floats.
  const std::vector<size_t> offsets{0, 10, 30, 35, 100};
  CHECK(parallel::plan_buckets(offsets, 200, 50) == Buckets{{100, 200}, {35, 100}, {0, 35}});
  CHECK(parallel::plan_buckets(offsets, 200, 1) == Buckets{{100, 200}, {35, 100}, {30, 35}, {10, 30}, {0, 10}});
  CHECK(parallel::plan_buckets(offsets, 200, 1000) == Buckets{{0, 200}});
  CHECK(parallel::plan_buckets({}, 0, 8).empty());
  // Tensors of no floats make no bucket of their own.
  CHECK(parallel::plan_buckets({0, 4, 4, 9}, 9, 1) == Buckets{{4, 9}, {0, 4}});
  CHECK_THROWS_WITH(parallel::plan_buckets({0, 20, 10}, 30, 4), Catch::Contains("tensor 2 starts at float 10"));
  CHECK_THROWS_WITH(parallel::plan_buckets({0, 40}, 30, 4), Catch::Contains("out of order in an arena of 30"));

  // Any layout: the buckets tile [0, total) without gaps, in descending order, each starts at
  // a tensor and each but the last holds at least bucket_floats.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> offs{0};
    const int tensors = 1 + static_cast<int>(rng() % 40);
    for (int t = 1; t < tensors; ++t) offs.push_back(offs.back() + rng() % 300);
    const size_t total = offs.back() + 1 + rng() % 300;
    const size_t want = 1 + rng() % 500;
    const Buckets b = parallel::plan_buckets(offs, total, want);
    INFO("trial " << trial);
    REQUIRE(!b.empty());
    CHECK(b.front().second == total);
    CHECK(b.back().first == 0);
    for (size_t k = 0; k < b.size(); ++k) {
      CHECK(std::find(offs.begin(), offs.end(), b[k].first) != offs.end());
      if (k + 1 < b.size()) {
        CHECK(b[k + 1].second == b[k].first);
        CHECK(b[k].second - b[k].first >= want);
      }
    }
  }
}
