// One host wait per step (docs/design.md, "The learner group"): on one rank, whatever the
// algorithm and the learners, the host waits for the device once a step, where the losses
// and the finite check are read; everything else is ordered by events. The count is the
// group's own, and each wait is on the timeline as "host_wait".
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "src/train/learners.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using train::Algorithm;
using train::LearnerGroup;
using train::LearnerGroupOptions;

TEST_CASE("a step of one rank waits for the device once, for every algorithm", "[learners][host-waits]") {
  auto backend = test::make_test_backend(2);
  train::SingleRankReducer alone;
  const auto algorithm = GENERATE(Algorithm::ssgd, Algorithm::sma, Algorithm::local_sgd);
  const int L = GENERATE(1, 3);
  LearnerGroupOptions o;
  o.algorithm = algorithm;
  o.learners = L;
  o.period = 2;
  o.start_step = 2;  // local-sgd: two ssgd steps first
  o.skip_nonfinite = true;
  LearnerGroup group(*backend, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, o, alone);
  int timeline_waits = 0;
  group.set_phase_hook([&](const char* phase, int learner, double t0, double t1) {
    if (std::string(phase) == "host_wait") {
      ++timeline_waits;
      CHECK(learner == -1);
      CHECK(t1 >= t0);
    }
  });
  const int64_t steps = 6;
  for (int64_t step = 0; step < steps; ++step) {
    const test::TinyStep in = test::tiny_step(0, L, step, 4);
    const std::vector<float> losses = group.step(in.inputs, step, 0.1f);
    INFO(train::algorithm_name(algorithm) << ", " << L << " learner(s), step " << step);
    REQUIRE(losses.size() == static_cast<size_t>(L));
    for (float loss : losses) CHECK(std::isfinite(loss));
    CHECK(group.host_waits() == step + 1);
  }
  CHECK(timeline_waits == steps);
  CHECK(group.skipped_steps() == 0);
}
