// Every layer's forward and backward against PyTorch on the same inputs and weights
// (references from gen_layers.py), and the softmax cross-entropy loss and its gradient.
// Dropout in training mode draws its own random mask, so only its eval mode is compared
// here; its mask semantics are checked in tests/unit/test_layer_gradients.cpp.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/layer.hpp"
#include "tests/support/peer.hpp"

using namespace squall::nn;
using squall::test::closeness;
using squall::test::load_peer_cases;
using squall::test::PeerCase;
using squall::test::PeerTensor;

namespace {

Shape shape_of(const PeerTensor& t) {
  const auto& s = t.shape;
  if (s.size() == 1) return Shape(s[0]);
  if (s.size() == 2) return Shape(s[0], s[1]);
  return Shape(s[0], s[1], s[2], s[3]);
}

std::unique_ptr<Layer> make_layer(const PeerCase& c) {
  const auto& p = c.params;
  const std::string kind = p.at("layer");
  if (kind == "conv2d") {
    Conv2dOptions o;
    o.out_channels = p.at("out_channels");
    o.kernel = p.at("kernel");
    o.stride = p.at("stride");
    o.padding = p.at("padding");
    o.dilation = p.at("dilation");
    o.bias = p.at("bias");
    return conv2d(o);
  }
  if (kind == "conv_transpose2d") {
    ConvTranspose2dOptions o;
    o.out_channels = p.at("out_channels");
    o.kernel = p.at("kernel");
    o.stride = p.at("stride");
    o.padding = p.at("padding");
    o.output_padding = p.at("output_padding");
    return conv_transpose2d(o);
  }
  if (kind == "linear") return linear(p.at("out_features"));
  if (kind == "batch_norm") return batch_norm(1e-5f, 0.1f);
  if (kind == "relu") return relu();
  if (kind == "max_pool") return max_pool(p.at("kernel"), p.at("stride"), p.at("padding"));
  if (kind == "avg_pool") return avg_pool(p.at("kernel"), p.at("stride"), p.at("padding"));
  if (kind == "global_avg_pool") return global_avg_pool();
  if (kind == "upsample_bilinear") return upsample_bilinear(p.at("out_h"), p.at("out_w"));
  if (kind == "dropout") return dropout(p.at("p").get<float>());
  if (kind == "add") return add();
  if (kind == "concat") return concat();
  if (kind == "flatten") return flatten();
  FAIL("unknown layer kind " << kind);
  return nullptr;
}

// Device (backend) copy of a host vector, kept alive by its Buffer.
struct DeviceTensor {
  Buffer buf;
  Tensor t;
};

DeviceTensor upload(Backend& be, Stream& s, const Shape& shape, const float* host) {
  DeviceTensor d;
  d.buf = be.allocate(static_cast<size_t>(std::max<int64_t>(shape.numel(), 1)));
  d.t = d.buf.view(shape);
  if (host) be.copy_from_host(s, d.t.f32(), host, static_cast<size_t>(shape.numel()));
  return d;
}

std::vector<float> download(Backend& be, Stream& s, const Tensor& t) {
  std::vector<float> h(static_cast<size_t>(t.numel()));
  be.copy_to_host(s, h.data(), t.f32(), h.size());
  be.synchronize(s);
  return h;
}

void check_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  INFO(what << ": " << got.size() << " vs " << want.size() << " elements");
  REQUIRE(got.size() == want.size());
  CHECK(closeness(got, want, 1e-4, 1e-3) <= 1.0);
}

}  // namespace

TEST_CASE("layers match PyTorch forward and backward", "[peer][layers]") {
  const auto cases = load_peer_cases(std::string(SQUALL_PEER_DIR) + "/layers");
  REQUIRE(cases.size() >= 20);
  auto be = std::make_unique<squall::cpu::CpuBackend>(2);
  auto stream = be->create_stream();
  int compared = 0;
  for (const auto& c : cases) {
    if (c.params.at("layer") == "softmax_cross_entropy") continue;
    SECTION(c.name) {
      auto layer = make_layer(c);
      const bool train = c.params.value("train", true) && c.params.at("layer") != "dropout";
      // inputs: x, x1, x2, ... in order
      std::vector<std::string> input_keys{"x"};
      for (int i = 1; c.tensors.count("x" + std::to_string(i)); ++i) input_keys.push_back("x" + std::to_string(i));
      std::vector<Shape> in_shapes;
      std::vector<DeviceTensor> inputs, dinputs;
      for (const auto& k : input_keys) {
        in_shapes.push_back(shape_of(c.at(k)));
        inputs.push_back(upload(*be, *stream, in_shapes.back(), c.at(k).data.data()));
        dinputs.push_back(upload(*be, *stream, in_shapes.back(), nullptr));
      }
      const Shape out_shape = layer->setup(in_shapes);
      REQUIRE(out_shape == shape_of(c.at("y")));

      std::vector<DeviceTensor> params, grads, state;
      std::vector<Tensor> pv, gv, sv;
      for (const auto& spec : layer->param_specs()) {
        const auto& ref = c.at(spec.name);
        REQUIRE(shape_of(ref).numel() == spec.shape.numel());
        params.push_back(upload(*be, *stream, spec.shape, ref.data.data()));
        grads.push_back(upload(*be, *stream, spec.shape, nullptr));
        pv.push_back(params.back().t);
        gv.push_back(grads.back().t);
      }
      for (const auto& spec : layer->state_specs()) {
        state.push_back(upload(*be, *stream, spec.shape, c.at(spec.name).data.data()));
        sv.push_back(state.back().t);
      }
      layer->build(*be, pv, gv, sv);

      auto y = upload(*be, *stream, out_shape, nullptr);
      std::vector<Tensor> in_views, din_views;
      for (auto& d : inputs) in_views.push_back(d.t);
      for (auto& d : dinputs) din_views.push_back(d.t);
      RunMode mode;
      mode.train = train;
      layer->forward(*stream, in_views, y.t, mode);
      check_close(c.name + " forward", download(*be, *stream, y.t), c.at("y").data);

      // Batch norm's backward is defined for training mode (batch statistics) only.
      if (!train && c.params.at("layer") == "batch_norm") continue;
      auto dy = upload(*be, *stream, out_shape, c.at("dy").data.data());
      layer->backward(*stream, in_views, y.t, dy.t, din_views);
      for (size_t i = 0; i < input_keys.size(); ++i)
        check_close(c.name + " d" + input_keys[i], download(*be, *stream, dinputs[i].t), c.at("d" + input_keys[i]).data);
      const auto specs = layer->param_specs();
      for (size_t i = 0; i < specs.size(); ++i)
        check_close(c.name + " d" + specs[i].name, download(*be, *stream, grads[i].t), c.at("d" + specs[i].name).data);
      if (c.name == "batch_norm_train") {
        check_close("running_mean", download(*be, *stream, state[0].t), c.at("running_mean_after").data);
        check_close("running_var", download(*be, *stream, state[1].t), c.at("running_var_after").data);
      }
    }
    ++compared;
  }
  CHECK(compared >= 20);
}

TEST_CASE("softmax cross-entropy matches PyTorch (class weights, ignored labels, per pixel)", "[peer][loss]") {
  const auto cases = load_peer_cases(std::string(SQUALL_PEER_DIR) + "/layers");
  auto be = std::make_unique<squall::cpu::CpuBackend>(2);
  auto stream = be->create_stream();
  int compared = 0;
  for (const auto& c : cases) {
    if (c.params.at("layer") != "softmax_cross_entropy") continue;
    INFO(c.name);
    const Shape s = shape_of(c.at("logits"));
    const int64_t hw = s.rank == 4 ? s.h() * s.w() : 1;
    auto logits = upload(*be, *stream, s, c.at("logits").data.data());
    auto dlogits = upload(*be, *stream, s, nullptr);
    std::vector<int32_t> labels;
    for (float v : c.at("labels").data) labels.push_back(static_cast<int32_t>(v));
    Buffer label_owner;
    int32_t* dev_labels = be->allocate_labels(labels.size(), label_owner);
    be->copy_labels_from_host(*stream, dev_labels, labels.data(), labels.size());
    DeviceTensor weights;
    const float* w = nullptr;
    if (c.tensors.count("class_weights")) {
      weights = upload(*be, *stream, Shape(s.c()), c.at("class_weights").data.data());
      w = weights.t.f32();
    }
    float loss = 0;
    squall::nn::softmax_cross_entropy(*be, *stream, logits.t.f32(), dev_labels, w, s.n(), s.c(), hw, dlogits.t.f32(), &loss);
    be->synchronize(*stream);
    CHECK(loss == Approx(c.at("loss").data[0]).epsilon(1e-4));
    check_close(c.name + " dlogits", download(*be, *stream, dlogits.t), c.at("dlogits").data);
    ++compared;
  }
  CHECK(compared == 2);
}
