// When the learner group captures a learner's pass (parallel.cuda_graphs), on a CPU backend
// that pretends to capture (tests/support/device_probe.hpp): it records every begin_capture
// with whether that stream has run a pass eagerly before, and refuses the loss of a captured
// pass with nn::CaptureError, as the CUDA backend refuses an allocation, a workspace growth
// or a handle inside a capture. (The tiny model has no BatchNorm: the forward that runs on
// the CPU inside the refused capture writes only activations, which the eager pass rewrites.)
// What the CUDA backend does inside a real capture is checked by tests/gpu/test_capture_gpu.cpp.
#include <catch2/catch.hpp>

#include <cstring>

#include "io/checkpoint/checkpoint_file.hpp"
#include "src/core/error.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/device_probe.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using parallel::Algorithm;
using parallel::LearnerGroup;
using parallel::LearnerGroupOptions;

namespace {

using CaptureProbe = test::DeviceProbe;

LearnerGroupOptions options(int learners, bool graphs) {
  LearnerGroupOptions o;
  o.algorithm = Algorithm::ssgd;
  o.learners = learners;
  o.graphs = graphs;
  o.threads = 2;
  return o;
}

std::vector<float> params_of(LearnerGroup& g) { return test::on_host(g.central_params(), g.param_arena_floats()); }

void run_steps(LearnerGroup& g, int64_t from, int64_t to) {
  for (int64_t step = from; step < to; ++step) {
    const test::TinyStep batches = test::tiny_step(0, g.learners(), step, 4);
    g.step(batches.inputs, step, 0.1f);
  }
}

}  // namespace

TEST_CASE("a refused capture falls back to eager passes, after each learner's first eager pass",
          "[learners][capture]") {
  mpi::OneRankAllreduce alone;
  CaptureProbe probe(CaptureProbe::Refusal::capture_error);
  LearnerGroup group(probe, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(2, true), alone);
  CaptureProbe plain(CaptureProbe::Refusal::capture_error);
  LearnerGroup eager(plain, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(2, false), alone);

  run_steps(group, 0, 4);
  run_steps(eager, 0, 4);
  // One attempt per learner, at its second pass; refused, abandoned, never tried again.
  REQUIRE(probe.begun_after_eager.size() == 2);
  for (bool b : probe.begun_after_eager) CHECK(b);
  CHECK(probe.abandoned == 2);
  CHECK(probe.ended == 0);
  CHECK(group.captured_learners() == 0);
  CHECK(plain.begun_after_eager.empty());
  // The eager fallback is the same training, bit for bit.
  const auto a = params_of(group), b = params_of(eager);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);

  // A learner the auto-tuner adds at step 4 runs eagerly first too.
  group.add_learner();
  run_steps(group, 4, 6);
  REQUIRE(probe.begun_after_eager.size() == 3);
  CHECK(probe.begun_after_eager.back());
}

TEST_CASE("a group restored from a checkpoint does not capture its first pass", "[learners][capture]") {
  mpi::OneRankAllreduce alone;
  CaptureProbe first(CaptureProbe::Refusal::capture_error);
  LearnerGroup before(first, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(2, false), alone);
  run_steps(before, 0, 5);
  checkpoint::CheckpointData shared;
  shared.origin = "test checkpoint";
  before.save_shared(shared);

  CaptureProbe probe(CaptureProbe::Refusal::capture_error);
  LearnerGroup resumed(probe, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(2, true), alone);
  resumed.restore(shared, nullptr);
  run_steps(resumed, 5, 6);  // its first step is step 5: eager, no capture yet
  CHECK(probe.begun_after_eager.empty());
  run_steps(resumed, 6, 7);
  REQUIRE(probe.begun_after_eager.size() == 2);
  for (bool b : probe.begun_after_eager) CHECK(b);
}

TEST_CASE("an error other than a refusal inside a capture abandons it and goes on up", "[learners][capture]") {
  mpi::OneRankAllreduce alone;
  CaptureProbe probe(CaptureProbe::Refusal::other_error);
  LearnerGroup group(probe, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(1, true), alone);
  run_steps(group, 0, 1);
  const test::TinyStep batches = test::tiny_step(0, 1, 1, 4);
  CHECK_THROWS_WITH(group.step(batches.inputs, 1, 0.1f), Catch::Contains("a real failure inside a capture"));
  CHECK(probe.abandoned == 1);
}
