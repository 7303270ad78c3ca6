// One host wait per step (docs/design.md, "The learner group"): on one rank, whatever the
// algorithm and the learners, the host waits for the device once a step, where the losses
// and the finite check are read; everything else is ordered by events. The count is the
// group's own, and each wait is on the timeline as "host_wait".
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "src/cpu/cpu_async_backend.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using train::Algorithm;
using train::LearnerGroup;
using train::LearnerGroupOptions;

namespace {

// The test backend, counting every time the host waits for a stream or an event: the
// group's own count is checked against it.
class CountingBackend final : public cpu::AsyncCpuBackend {
 public:
  CountingBackend()
      : cpu::AsyncCpuBackend(std::make_unique<cpu::CpuBackend>(2), test::testing_async_cpu_streams(),
                             jitter_from_environment()) {}
  void synchronize(nn::Stream& s) override {
    ++waits;
    cpu::AsyncCpuBackend::synchronize(s);
  }
  void synchronize(nn::Event& e) override {
    ++waits;
    cpu::AsyncCpuBackend::synchronize(e);
  }
  std::atomic<int64_t> waits{0};
};

}  // namespace

TEST_CASE("a step of one rank waits for the device once, for every algorithm", "[learners][host-waits]") {
  CountingBackend backend;
  mpi::OneRankAllreduce alone;
  const auto algorithm = GENERATE(Algorithm::ssgd, Algorithm::sma, Algorithm::local_sgd);
  const int L = GENERATE(1, 3);
  LearnerGroupOptions o;
  o.algorithm = algorithm;
  o.learners = L;
  o.period = 2;
  o.start_step = 2;  // local-sgd: two ssgd steps first
  o.skip_nonfinite = true;
  LearnerGroup group(backend, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, o, alone);
  // With a timeline, each learner also waits for its own stream twice, to time its forward
  // and backward parts: those waits are the timeline's, not the step's.
  const bool timeline = GENERATE(false, true);
  int timeline_waits = 0;
  if (timeline)
    group.set_phase_hook([&](const char* phase, int learner, double t0, double t1) {
    if (std::string(phase) == "host_wait") {
      ++timeline_waits;
      CHECK(learner == -1);
      CHECK(t1 >= t0);
    }
  });
  const int64_t steps = 6;
  for (int64_t step = 0; step < steps; ++step) {
    // The batches in pinned memory, as the trainer's loader gives them to asynchronous
    // streams: a copy from pageable memory would make the host wait for it.
    const test::TinyStep in = test::tiny_step(0, L, step, 4);
    std::vector<nn::Buffer> pinned;
    std::vector<train::LearnerBatch> inputs;
    for (const auto& d : in.data) {
      pinned.push_back(backend.allocate_host(d.images.size(), nn::DType::f32));
      std::copy(d.images.begin(), d.images.end(), pinned.back().data());
      pinned.push_back(backend.allocate_host(d.labels.size(), nn::DType::i32));
      std::copy(d.labels.begin(), d.labels.end(), pinned.back().as<int32_t>());
      inputs.push_back({pinned[pinned.size() - 2].data(), pinned.back().as<int32_t>()});
    }
    INFO(train::algorithm_name(algorithm) << ", " << L << " learner(s), step " << step << (timeline ? ", timeline" : ""));
    const int64_t before = backend.waits;
    const std::vector<float> losses = group.step(inputs, step, 0.1f);
    // Every synchronize() of the step, counted by the backend.
    CHECK(backend.waits - before == 1 + (timeline ? 2 * L : 0));
    REQUIRE(losses.size() == static_cast<size_t>(L));
    for (float loss : losses) CHECK(std::isfinite(loss));
    CHECK(group.host_waits() == step + 1);
  }
  CHECK(timeline_waits == (timeline ? steps : 0));
  CHECK(group.skipped_steps() == 0);
}
