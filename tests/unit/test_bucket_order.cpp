// ssgd hands its gradient buckets to the allreduce strictly in bucket order, whatever order
// the host sees their events complete in (src/parallel/gradient_buckets.cpp): every rank must
// start the same sums in the same order, and one that started bucket 2 where another started
// bucket 1 would add the wrong buckets together without any error.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "src/parallel/learners.hpp"
#include "tests/support/out_of_order_backend.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using parallel::LearnerGroup;
using parallel::LearnerGroupOptions;

namespace {

// A job of two identical ranks, played by one, on host memory: every sum doubles its buffer
// when it starts, and the name of every sum is logged in the order the sums were started.
class RecordingTwinAllreduce final : public mpi::Allreduce {
 public:
  using mpi::Allreduce::start;
  Ticket start(void* data, size_t count, mpi::DType type, std::string_view what, void*) override {
    REQUIRE(type == mpi::DType::f32);
    auto* x = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) x[i] *= 2;
    started.emplace_back(what);
    return static_cast<Ticket>(started.size());
  }
  bool test(Ticket) override { return true; }
  void wait(Ticket) override {}
  int ranks() const override { return 2; }
  bool takes(mpi::DType type) const override { return type == mpi::DType::f32; }
  std::string mode() const override { return "recording twin"; }

  std::vector<std::string> started;
};

}  // namespace

TEST_CASE("ssgd starts its bucket sums in bucket order when the events look complete out of order",
          "[learners][buckets]") {
  test::OutOfOrderBackend backend(2);
  RecordingTwinAllreduce twin;
  const int L = 2;
  const int64_t b = 3;
  LearnerGroupOptions o;
  o.learners = L;
  o.ranks = 2;          // the twin's job
  o.bucket_floats = 1;  // one bucket per tensor: the bias, then the weight
  LearnerGroup group(backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o, twin);  // the first stream
  REQUIRE(group.buckets() == 2);
  // The same learners on one rank, on a backend of their own: the twin's doubled sum divided
  // by twice the learners is this rank's mean.
  auto plain = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  LearnerGroupOptions one = o;
  one.ranks = 1;
  LearnerGroup reference(*plain, test::make_tiny_graph, b, b, test::plain_sgd(), {}, one, alone);

  const int64_t steps = 6;
  std::vector<std::string> want;
  for (int64_t step = 0; step < steps; ++step) {
    const test::TinyStep in = test::tiny_step(0, L, step, b);
    group.step(in.inputs, step, 0.2f);
    reference.step(in.inputs, step, 0.2f);
    const std::string name = "gradients step " + std::to_string(step + 1);
    want.insert(want.end(), {name + " bucket 1", name + " bucket 2", name + " state"});
    INFO("step " << step);
    CHECK(test::max_diff(group.central_params(), reference.central_params(), test::k_tiny_arena) < 1e-6);
  }
  CHECK(twin.started == want);
  // The adversary had its chance: some bucket's event was said not to be complete while a
  // later one on the group stream was (two buckets' sums waited to be handed over at once).
  CHECK(backend.held_on_stream(0) > 0);
}
