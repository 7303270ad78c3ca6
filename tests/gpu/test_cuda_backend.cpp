// The CUDA backend as a whole, against the CPU backend in the same process: a device, the
// memory pool, and LeNet-5 learners on streams taking the same steps as on the CPU.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "src/backends/backends.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/test_backend.hpp"

namespace nn = squall::nn;
namespace mpi = squall::mpi;
namespace optim = squall::optim;
namespace parallel = squall::parallel;

namespace {

struct Batches {
  std::vector<std::vector<float>> images;
  std::vector<std::vector<int32_t>> labels;
  std::vector<parallel::LearnerBatch> inputs;
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

std::vector<float> central(nn::Backend& be, parallel::LearnerGroup& g) {
  return squall::test::download(be, g.central_params(), g.param_arena_floats());
}

}  // namespace

TEST_CASE("the CUDA backend names its device", "[cuda]") {
  auto be = squall::backends::make_cuda_backend(0);
  const nn::DeviceInfo d = be->info();
  CHECK(d.backend == "cuda");
  CHECK(d.index == 0);
  CHECK(!d.name.empty());
  CHECK(d.memory_bytes > (size_t{1} << 30));
  CHECK_FALSE(be->capabilities().host_accessible);
  CHECK_THROWS_WITH(squall::backends::make_cuda_backend(squall::backends::cuda_device_count()), Catch::Contains("no GPU"));
}

TEST_CASE("LeNet-5 learners on CUDA streams take the CPU's steps (sgd, sma)", "[cuda]") {
  auto cpu = std::make_unique<squall::cpu::CpuBackend>(0);
  auto gpu = squall::backends::make_cuda_backend(0);
  nn::ModelSpec spec;
  spec.name = "lenet5";
  auto make = [spec] { return nn::make_model(spec, nn::Shape(1, 1, 28, 28)); };
  optim::OptimizerConfig sgd;
  sgd.name = optim::OptimizerKind::sgd;
  sgd.momentum = 0.9;
  sgd.weight_decay = 5e-4;
  for (auto algorithm : {parallel::Algorithm::ssgd, parallel::Algorithm::sma}) {
    INFO(parallel::algorithm_name(algorithm));
    parallel::LearnerGroupOptions o;
    o.algorithm = algorithm;
    o.learners = 3;
    o.seed = 7;
    o.alpha = 0.1;
    if (algorithm == parallel::Algorithm::sma) sgd.momentum = 0;  // SMA refuses optimizer momentum
    mpi::OneRankAllreduce alone_cpu, alone_gpu;
    const int64_t batch = 16;
    parallel::LearnerGroup on_cpu(*cpu, make, batch, batch, sgd, {}, o, alone_cpu);
    parallel::LearnerGroup on_gpu(*gpu, make, batch, batch, sgd, {}, o, alone_gpu);
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
  auto gpu = squall::backends::make_cuda_backend(0);
  nn::ModelSpec spec;
  spec.name = "resnet20";
  auto make = [spec] { return nn::make_model(spec, nn::Shape(1, 1, 28, 28)); };
  optim::OptimizerConfig opt;
  opt.name = optim::OptimizerKind::lamb;
  parallel::LearnerGroupOptions o;
  o.learners = 4;
  mpi::OneRankAllreduce alone;
  parallel::LearnerGroup group(*gpu, make, 32, 32, opt, {}, o, alone);
  const Batches b = lenet_batches(o.learners, 32, 0);
  group.step(b.inputs, 0, 0.01f);
  size_t free_after_first = 0, total = 0, free_now = 0;
  REQUIRE(cudaMemGetInfo(&free_after_first, &total) == cudaSuccess);
  for (int64_t step = 1; step < 6; ++step) group.step(b.inputs, step, 0.01f);
  REQUIRE(cudaMemGetInfo(&free_now, &total) == cudaSuccess);
  CHECK(free_now == free_after_first);
}

namespace {

// n values of type t on backend `be` holding `host` (rounded to t there), and back as f32.
nn::Buffer upload_typed(nn::Backend& be, nn::Stream& s, const std::vector<float>& host, nn::DType t) {
  nn::Buffer f = be.allocate(host.size()), out = be.allocate(host.size(), t);
  be.copy_from_host(s, f.data(), host.data(), host.size());
  be.convert(s, f.raw(), nn::DType::f32, out.raw(), t, host.size());
  be.synchronize(s);
  return out;
}

std::vector<float> download_typed(nn::Backend& be, nn::Stream& s, const void* p, nn::DType t, size_t n) {
  nn::Buffer f = be.allocate(n);
  be.convert(s, p, t, f.raw(), nn::DType::f32, n);
  std::vector<float> host(n);
  be.copy_to_host(s, host.data(), f.data(), n);
  be.synchronize(s);
  return host;
}

}  // namespace

TEST_CASE("at bf16 and f16 the CUDA backend computes the CPU reference's results", "[cuda]") {
  auto cpu = std::make_unique<squall::cpu::CpuBackend>(0);
  auto gpu = squall::backends::make_cuda_backend(0);
  auto cs = cpu->create_stream();
  auto gs = gpu->create_stream();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const size_t n = 2 * 3 * 12 * 12;
  std::vector<float> a(n), b(n);
  for (auto& v : a) v = normal(rng);
  for (auto& v : b) v = normal(rng);
  for (const nn::DType t : {nn::DType::bf16, nn::DType::f16}) {
    INFO("type " << nn::dtype_name(t));
    // Element-wise: one f32 operation rounded once, on both: equal bit for bit.
    auto elementwise = [&](nn::Backend& be, nn::Stream& s) {
      nn::Buffer x = upload_typed(be, s, a, t), y = upload_typed(be, s, b, t);
      nn::Buffer sum = be.allocate(n, t), prod = be.allocate(n, t), relu = be.allocate(n, t),
                 drop = be.allocate(n, t), mask = be.allocate(n, t), up = be.allocate(4 * n, t);
      be.add(s, t, x.raw(), y.raw(), sum.raw(), n);
      be.multiply(s, t, x.raw(), y.raw(), prod.raw(), n);
      be.relu_forward(s, t, x.raw(), relu.raw(), n);
      be.dropout_forward(s, t, x.raw(), drop.raw(), mask.raw(), n, 0.3f, 11, 5);
      be.bilinear_forward(s, t, x.raw(), up.raw(), 6, 12, 12, 24, 24);
      std::vector<std::vector<float>> out;
      for (const nn::Buffer* r : {&sum, &prod, &relu, &drop, &mask})
        out.push_back(download_typed(be, s, r->raw(), t, n));
      out.push_back(download_typed(be, s, up.raw(), t, 4 * n));
      return out;
    };
    const auto on_cpu = elementwise(*cpu, *cs), on_gpu = elementwise(*gpu, *gs);
    const char* names[] = {"add", "multiply", "relu", "dropout", "dropout mask", "bilinear"};
    for (size_t i = 0; i < on_cpu.size(); ++i) {
      INFO(names[i]);
      CHECK(on_gpu[i] == on_cpu[i]);
    }

    // A convolution with bias, forward and both backward passes: the same up to the order
    // of the f32 sums (and a rounding of t).
    nn::ConvDesc d;
    d.n = 2, d.c = 3, d.h = 12, d.w = 12, d.k = 5, d.r = d.s = 3, d.pad_h = d.pad_w = 1;
    d.dtype = t;
    const size_t y_count = static_cast<size_t>(d.output().numel()), w_count = static_cast<size_t>(d.weight().numel());
    std::vector<float> w(w_count), bias(5), dy(y_count);
    for (auto& v : w) v = 0.2f * normal(rng);
    for (auto& v : bias) v = 0.1f * normal(rng);
    for (auto& v : dy) v = normal(rng);
    auto conv = [&](nn::Backend& be, nn::Stream& s) {
      auto plan = be.make_conv(d);
      nn::Buffer x = upload_typed(be, s, a, t), g = upload_typed(be, s, dy, t);
      nn::Buffer wb = be.allocate(w_count), bb = be.allocate(5), dw = be.allocate(w_count), db = be.allocate(5);
      be.copy_from_host(s, wb.data(), w.data(), w_count);
      be.copy_from_host(s, bb.data(), bias.data(), 5);
      nn::Buffer y = be.allocate(y_count, t), dx = be.allocate(n, t);
      plan->forward(s, x.raw(), wb.data(), bb.data(), y.raw());
      plan->backward_weights(s, x.raw(), g.raw(), dw.data(), db.data());
      plan->backward_data(s, g.raw(), wb.data(), dx.raw());
      std::vector<std::vector<float>> out{download_typed(be, s, y.raw(), t, y_count),
                                          download_typed(be, s, dx.raw(), t, n)};
      out.push_back(squall::test::download(be, dw.data(), w_count));
      out.push_back(squall::test::download(be, db.data(), 5));
      return out;
    };
    const auto conv_cpu = conv(*cpu, *cs), conv_gpu = conv(*gpu, *gs);
    const double tol = t == nn::DType::bf16 ? 8 * std::ldexp(1.0, -8) : 8 * std::ldexp(1.0, -11);
    const char* conv_names[] = {"y", "dx", "dw", "db"};
    for (size_t i = 0; i < conv_cpu.size(); ++i) {
      INFO("convolution " << conv_names[i]);
      CHECK(squall::test::relative_l2(conv_gpu[i], conv_cpu[i]) < tol);
    }
  }
}
