// The input path of a device backend (tests/support/device_probe.hpp: the CPU backend acting
// as one): each learner's batch is staged in backend memory on a copy stream of its own, and
// the batches of the next step, when the caller has them, are copied while this step
// computes; the next step then takes them without copying again. The training is the same,
// bit for bit, as with plain host copies.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>

#include "src/nn/backend.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/device_probe.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using parallel::Algorithm;
using parallel::LearnerGroup;
using parallel::LearnerGroupOptions;

namespace {

LearnerGroupOptions options(Algorithm a) {
  LearnerGroupOptions o;
  o.algorithm = a;
  o.learners = 2;
  o.threads = 2;
  return o;
}

std::vector<float> params_of(LearnerGroup& g) { return test::on_host(g.central_params(), g.param_arena_floats()); }

}  // namespace

TEST_CASE("the next step's batches are staged during this step, and the training is unchanged",
          "[learners][staging]") {
  const Algorithm algorithm = GENERATE(Algorithm::ssgd, Algorithm::sma);
  mpi::OneRankAllreduce alone;
  test::DeviceProbe probe;
  LearnerGroup staged(probe, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(algorithm), alone);
  auto cpu = test::make_test_backend(1);
  LearnerGroup plain(*cpu, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(algorithm), alone);

  const int steps = 5;
  std::vector<test::TinyStep> data;
  for (int64_t k = 0; k < steps; ++k) data.push_back(test::tiny_step(0, 2, k, 4));
  for (int64_t k = 0; k < steps; ++k) {
    const auto& in = data[static_cast<size_t>(k)].inputs;
    const bool has_next = k + 1 < steps;
    const size_t copies_before = probe.host_copies.size();
    staged.step(in, k, 0.1f, has_next ? &data[static_cast<size_t>(k + 1)].inputs : nullptr);
    plain.step(in, k, 0.1f);
    INFO("step " << k);
    // This step's batches were copied during the step before (none at the first step), and
    // the next step's during this one: images and labels of each learner, on copy streams.
    std::set<const void*> sources;
    std::set<const nn::Stream*> streams;
    for (size_t c = copies_before; c < probe.host_copies.size(); ++c) {
      sources.insert(probe.host_copies[c].src);
      streams.insert(probe.host_copies[c].stream);
    }
    for (int j = 0; j < 2; ++j) {
      const auto& mine = in[static_cast<size_t>(j)];
      CHECK(sources.count(mine.images) == (k == 0 ? 1u : 0u));
      if (has_next) {
        const auto& next = data[static_cast<size_t>(k + 1)].inputs[static_cast<size_t>(j)];
        CHECK(sources.count(next.images) == 1);
        CHECK(sources.count(next.labels) == 1);
      }
    }
    if (k == 0 || has_next) CHECK(streams.size() == 2);  // one copy stream per learner
    else CHECK(streams.empty());                         // the last step's batches came before
  }
  REQUIRE(probe.losses == 2 * steps);
  const auto a = params_of(staged), b = params_of(plain);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("batches other than the staged ones are copied anew", "[learners][staging]") {
  mpi::OneRankAllreduce alone;
  test::DeviceProbe probe;
  LearnerGroup staged(probe, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(Algorithm::ssgd), alone);
  auto cpu = test::make_test_backend(1);
  LearnerGroup plain(*cpu, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(Algorithm::ssgd), alone);
  const test::TinyStep first = test::tiny_step(0, 2, 0, 4);
  const test::TinyStep announced = test::tiny_step(0, 2, 7, 4);
  const test::TinyStep given = test::tiny_step(0, 2, 1, 4);
  staged.step(first.inputs, 0, 0.1f, &announced.inputs);
  plain.step(first.inputs, 0, 0.1f);
  // The caller changed its mind: step 1 trains on `given`, not on what was staged.
  staged.step(given.inputs, 1, 0.1f);
  plain.step(given.inputs, 1, 0.1f);
  const auto a = params_of(staged), b = params_of(plain);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  const std::vector<parallel::LearnerBatch> one{first.inputs.front()};
  CHECK_THROWS_WITH(staged.step(given.inputs, 2, 0.1f, &one), Catch::Contains("1 next batches for 2 learners"));
}

TEST_CASE("batches in allocate_host memory, copied while the passes run, train as plain ones do",
          "[learners][staging]") {
  // The loader's buffers come from allocate_host (pinned on CUDA), so the copy streams copy
  // them asynchronously: a pass that did not wait for its batch would read the one before
  // (on asynchronous CPU streams, SQUALL_TEST_CPU_STREAMS=async, as on a GPU).
  mpi::OneRankAllreduce alone;
  test::DeviceProbe probe;
  LearnerGroup staged(probe, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(Algorithm::ssgd), alone);
  auto cpu = test::make_test_backend(1);
  LearnerGroup plain(*cpu, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, options(Algorithm::ssgd), alone);

  const int steps = 6;
  std::vector<test::TinyStep> data;
  std::vector<nn::Buffer> pinned;  // held until the last pass has run, as the trainer holds its batches
  std::vector<std::vector<parallel::LearnerBatch>> inputs(steps);
  for (int64_t k = 0; k < steps; ++k) {
    data.push_back(test::tiny_step(0, 2, k, 4));
    for (const auto& d : data.back().data) {
      nn::Buffer images = probe.allocate_host(d.images.size(), nn::DType::f32);
      nn::Buffer labels = probe.allocate_host(d.labels.size(), nn::DType::i32);
      std::memcpy(images.raw(), d.images.data(), d.images.size() * sizeof(float));
      std::memcpy(labels.raw(), d.labels.data(), d.labels.size() * sizeof(int32_t));
      inputs[static_cast<size_t>(k)].push_back({images.data(), labels.as<int32_t>()});
      pinned.push_back(images);
      pinned.push_back(labels);
    }
  }
  for (int64_t k = 0; k < steps; ++k) {
    const auto* next = k + 1 < steps ? &inputs[static_cast<size_t>(k + 1)] : nullptr;
    staged.step(inputs[static_cast<size_t>(k)], k, 0.1f, next);
    plain.step(data[static_cast<size_t>(k)].inputs, k, 0.1f);
  }
  const auto a = params_of(staged), b = params_of(plain);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
