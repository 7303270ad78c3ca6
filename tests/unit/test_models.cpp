// The model zoo: sizes against independent references, shapes from a CI-sized tile to the
// DeepCAM size, clear errors, and that each model can learn (the loss of a fixed batch
// falls under SGD).
#include <catch2/catch.hpp>

#include <random>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "tests/support/test_backend.hpp"

using namespace squall::nn;

namespace {

ModelSpec spec_of(std::string name, int64_t classes) {
  ModelSpec s;
  s.name = std::move(name);
  s.classes = classes;
  return s;
}

// Trains on one fixed random batch and returns the first and last losses.
std::pair<float, float> fit_one_batch(Graph& g, Backend& be, int steps, float lr, int64_t classes) {
  auto stream = be.create_stream();
  const Shape in = g.input().shape, out = g.output_shape();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(in.numel()));
  for (auto& v : x) v = normal(rng);
  const int64_t hw = out.rank == 4 ? out.h() * out.w() : 1;
  // Classification: a label per sample. Segmentation: 8x8 blocks of one class (a model that
  // predicts at 1/4 resolution and upsamples can represent them; pixel noise it cannot).
  std::vector<int32_t> labels(static_cast<size_t>(out.n() * hw));
  for (int64_t i = 0; i < out.n(); ++i)
    for (int64_t p = 0; p < hw; ++p) {
      const int64_t y = out.rank == 4 ? p / out.w() : 0, x_ = out.rank == 4 ? p % out.w() : 0;
      labels[static_cast<size_t>(i * hw + p)] = static_cast<int32_t>((i * 7 + y / 8 * 3 + x_ / 8) % classes);
    }
  Buffer owner;
  int32_t* dev_labels = be.allocate_labels(labels.size(), owner);
  be.copy_labels_from_host(*stream, dev_labels, labels.data(), labels.size());
  Buffer velocity = be.allocate(g.param_arena_floats());
  be.fill(*stream, velocity.data(), g.param_arena_floats(), 0.0f);
  Buffer loss_dev = be.allocate(1);
  // The whole parameter arena as one tensor of a fused update.
  const std::unique_ptr<TensorSet> params =
      be.make_tensor_set({TensorRef{g.params(), g.grads(), static_cast<size_t>(g.param_arena_floats()), true}});
  SgdArgs sgd;
  sgd.lr = lr, sgd.momentum = 0.9f;
  float first = 0, last = 0;
  RunMode mode;
  for (int s = 0; s < steps; ++s) {
    be.copy_from_host(*stream, g.input().f32(), x.data(), x.size());
    mode.step = static_cast<uint64_t>(s);
    g.forward(*stream, mode);
    float loss = 0;
    be.softmax_cross_entropy(*stream, g.dtype(), g.output().data, dev_labels, nullptr, out.n(), out.c(), hw,
                             g.output_grad().data, loss_dev.data(), nullptr);
    be.copy_to_host(*stream, &loss, loss_dev.data(), 1);
    be.synchronize(*stream);
    if (s == 0) first = loss;
    last = loss;
    g.backward(*stream);
    be.sgd_update(*stream, *params, velocity.data(), sgd);
  }
  be.synchronize(*stream);
  return {first, last};
}

}  // namespace

TEST_CASE("lenet5 and resnet20 have PyTorch's parameter counts", "[models]") {
  // References: the same architectures in PyTorch (bench/torch_train.py), counted by
  // sum(p.numel() for p in model.parameters()) and the BatchNorm running buffers.
  auto lenet = make_model(spec_of("lenet5", 10), Shape(1, 1, 28, 28));
  lenet->setup(2);
  CHECK(lenet->parameter_count() == 61706);
  CHECK(lenet->output_shape() == Shape(2, 10));

  auto resnet = make_model(spec_of("resnet20", 10), Shape(1, 1, 28, 28));
  resnet->setup(2);
  CHECK(resnet->parameter_count() == 272186);
  CHECK(resnet->state_value_count() == 1568);
  CHECK(resnet->output_shape() == Shape(2, 10));
  auto resnet32 = make_model(spec_of("resnet20", 100), Shape(1, 3, 32, 32));
  resnet32->setup(1);
  CHECK(resnet32->output_shape() == Shape(1, 100));
}

TEST_CASE("segmentation models give per-pixel logits from a tile to the DeepCAM size", "[models]") {
  for (const char* name : {"unet", "deeplabv3plus"}) {
    INFO(name);
    ModelSpec spec;
    spec.name = name;
    spec.classes = 3;
    auto tile = make_model(spec, Shape(1, 16, 32, 48));
    tile->setup(2);
    CHECK(tile->output_shape() == Shape(2, 3, 32, 48));

    // The DeepCAM input, channels first: shapes only, nothing allocated.
    spec.width = 32;
    spec.depth = name == std::string("unet") ? 5 : 4;
    auto full = make_model(spec, Shape(1, 16, 768, 1152));
    full->setup(1);
    CHECK(full->output_shape() == Shape(1, 3, 768, 1152));
    CHECK(full->parameter_count() > 1000000);
  }
  ModelSpec wide;
  wide.name = "deeplabv3plus";
  wide.classes = 3;
  wide.aspp_rates = {2, 4, 6, 8};
  auto g = make_model(wide, Shape(1, 4, 16, 24));
  g->setup(1);
  CHECK(g->output_shape() == Shape(1, 3, 16, 24));
}

TEST_CASE("models that cannot take an input say why", "[models]") {
  REQUIRE_THROWS_WITH(make_model(spec_of("lenet5", 10), Shape(1, 1, 32, 32)), Catch::Contains("lenet5") && Catch::Contains("28x28"));
  ModelSpec unet = spec_of("unet", 3);
  unet.depth = 3;
  REQUIRE_THROWS_WITH(make_model(unet, Shape(1, 4, 36, 40)), Catch::Contains("unet") && Catch::Contains("divisible"));
  REQUIRE_THROWS_WITH(make_model(spec_of("vgg16", 10), Shape(1, 1, 28, 28)), Catch::Contains("unknown model 'vgg16'"));
  REQUIRE_THROWS_AS(make_model(spec_of("resnet20", 1), Shape(1, 1, 28, 28)), squall::Error);
}

TEST_CASE("every model learns a fixed batch", "[models][slow]") {
  auto be = squall::test::make_test_backend(0);
  struct Case { ModelSpec spec; Shape in; int64_t batch; float lr; };
  ModelSpec lenet = spec_of("lenet5", 10), resnet = spec_of("resnet20", 10), unet = spec_of("unet", 3),
            deeplab = spec_of("deeplabv3plus", 3);
  unet.width = 8;
  unet.depth = 2;
  deeplab.width = 8;
  deeplab.depth = 3;
  deeplab.aspp_rates = {2, 3};
  for (const Case& c : {Case{lenet, Shape(1, 1, 28, 28), 8, 0.03f}, Case{resnet, Shape(1, 1, 28, 28), 8, 0.05f},
                        Case{unet, Shape(1, 4, 16, 16), 2, 0.05f}, Case{deeplab, Shape(1, 4, 16, 24), 2, 0.02f}}) {
    INFO(c.spec.name);
    auto g = make_model(c.spec, c.in);
    g->build(*be, c.batch, 11);
    const auto [first, last] = fit_one_batch(*g, *be, 30, c.lr, c.spec.classes);
    INFO("loss " << first << " -> " << last);
    CHECK(std::isfinite(last));
    CHECK(last < 0.5f * first);
  }
}
