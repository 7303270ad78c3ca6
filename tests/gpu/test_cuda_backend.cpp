// The CUDA backend as a whole, against the CPU backend in the same process: a device, the
// memory pool, and LeNet-5 learners on streams taking the same steps as on the CPU.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/train/learners.hpp"
#include "tests/support/test_backend.hpp"

namespace nn = squall::nn;
namespace train = squall::train;

namespace {

struct Batches {
  std::vector<std::vector<float>> images;
  std::vector<std::vector<int32_t>> labels;
  std::vector<train::LearnerBatch> inputs;
};

Batches lenet_batches(int learners, int64_t batch, int64_t step) {
  Batches b;
  std::mt19937 rng(static_cast<uint32_t>(100 + step));
  std::normal_distribution<float> normal;
  for (int j = 0; j < learners; ++j) {
    b.images.emplace_back(static_cast<size_t>(batch * 28 * 28));
    for (auto& v : b.images.back()) v = normal(rng);
    b.labels.emplace_back(static_cast<size_t>(batch));
    for (auto& l : b.labels.back()) l = static_cast<int32_t>(rng() % 10);
  }
  for (int j = 0; j < learners; ++j) b.inputs.push_back({b.images[j].data(), b.labels[j].data()});
  return b;
}

std::vector<float> central(nn::Backend& be, train::LearnerGroup& g) {
  return squall::test::download(be, g.central_params(), g.param_count());
}

}  // namespace

TEST_CASE("the CUDA backend names its device", "[cuda]") {
  auto be = nn::make_cuda_backend(0);
  const nn::DeviceInfo d = be->device();
  CHECK(d.backend == "cuda");
  CHECK(d.index == 0);
  CHECK(!d.name.empty());
  CHECK(d.memory_bytes > (size_t{1} << 30));
  CHECK_FALSE(be->host_accessible());
  CHECK_THROWS_WITH(nn::make_cuda_backend(nn::cuda_device_count()), Catch::Contains("no GPU"));
}

TEST_CASE("LeNet-5 learners on CUDA streams take the CPU's steps (sgd, sma)", "[cuda]") {
  auto cpu = nn::make_cpu_backend(0);
  auto gpu = nn::make_cuda_backend(0);
  nn::ModelSpec spec;
  spec.name = "lenet5";
  auto make = [spec] { return nn::make_model(spec, nn::Shape(1, 1, 28, 28)); };
  train::OptimizerConfig sgd;
  sgd.name = "sgd";
  sgd.momentum = 0.9;
  sgd.weight_decay = 5e-4;
  for (auto algorithm : {train::Algorithm::ssgd, train::Algorithm::sma}) {
    INFO(train::algorithm_name(algorithm));
    train::LearnerGroupOptions o;
    o.algorithm = algorithm;
    o.learners = 3;
    o.seed = 7;
    o.alpha = 0.1;
    if (algorithm == train::Algorithm::sma) sgd.momentum = 0;  // SMA refuses optimizer momentum
    train::SingleRankReducer alone_cpu, alone_gpu;
    const int64_t batch = 16;
    train::LearnerGroup on_cpu(*cpu, make, batch, batch, sgd, {}, o, alone_cpu);
    train::LearnerGroup on_gpu(*gpu, make, batch, batch, sgd, {}, o, alone_gpu);
    const auto initial = central(*cpu, on_cpu);
    REQUIRE(initial == central(*gpu, on_gpu));  // the same initial model
    for (int64_t step = 0; step < 4; ++step) {
      const Batches b = lenet_batches(o.learners, batch, step);
      const auto lc = on_cpu.step(b.inputs, step, 0.05f);
      const auto lg = on_gpu.step(b.inputs, step, 0.05f);
      for (size_t j = 0; j < lc.size(); ++j) CHECK(lg[j] == Approx(lc[j]).epsilon(1e-4));
    }
    const auto wc = central(*cpu, on_cpu), wg = central(*gpu, on_gpu);
    double worst = 0, moved = 0;
    for (size_t i = 0; i < wc.size(); ++i) {
      worst = std::max(worst, std::abs(double(wc[i]) - wg[i]) / (1e-2 + std::abs(wc[i])));
      moved = std::max(moved, std::abs(double(wc[i]) - initial[i]));
    }
    INFO("largest relative difference " << worst << ", largest move " << moved);
    CHECK(worst < 1e-3);
    CHECK(moved > 1e-3);  // it trained
  }
}

TEST_CASE("after the first step the CUDA backend allocates no device memory", "[cuda]") {
  auto gpu = nn::make_cuda_backend(0);
  nn::ModelSpec spec;
  spec.name = "resnet20";
  auto make = [spec] { return nn::make_model(spec, nn::Shape(1, 1, 28, 28)); };
  train::OptimizerConfig opt;
  opt.name = "lamb";
  train::LearnerGroupOptions o;
  o.learners = 4;
  train::SingleRankReducer alone;
  train::LearnerGroup group(*gpu, make, 32, 32, opt, {}, o, alone);
  const Batches b = lenet_batches(o.learners, 32, 0);
  group.step(b.inputs, 0, 0.01f);
  size_t free_after_first = 0, total = 0, free_now = 0;
  REQUIRE(cudaMemGetInfo(&free_after_first, &total) == cudaSuccess);
  for (int64_t step = 1; step < 6; ++step) group.step(b.inputs, step, 0.01f);
  REQUIRE(cudaMemGetInfo(&free_now, &total) == cudaSuccess);
  CHECK(free_now == free_after_first);
}
