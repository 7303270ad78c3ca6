// Writes, for every zoo model (and one graph of the layers the zoo does not use), an ONNX
// export and squall's own logits for one random input, for check_onnx.py to compare against
// onnxruntime. usage: squall_onnx_probe DIR
//   DIR/<case>.onnx, DIR/<case>.input.f32, DIR/<case>.logits.f32 (raw little-endian float32)
//   DIR/manifest.json: [{"name", "input": [n,c,h,w], "logits": [...]}]
// Parameters are the seed's initial values with batch norm's scale and shift perturbed; the
// running statistics come from a few training-mode forwards over another random batch, so
// they differ from both the initial (0, 1) and the test batch's own statistics.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/cpu/cpu_backend.hpp"
#include "src/export/onnx_export.hpp"
#include "src/nn/graph.hpp"

namespace {

using namespace squall::nn;

struct Case {
  std::string name;
  std::unique_ptr<Graph> graph;
  Shape sample;
};

ModelSpec spec(const std::string& name, int64_t classes) {
  ModelSpec s;
  s.name = name;
  s.classes = classes;
  s.dropout = 0.25f;  // exported as the identity
  return s;
}

// Small sizes each model accepts. A zoo model missing here fails the test: add it.
std::unique_ptr<Graph> small_model(const std::string& name, Shape& sample) {
  if (name == "lenet5") {
    sample = Shape(1, 1, 28, 28);
    return make_model(spec(name, 10), sample);
  }
  if (name == "resnet20") {
    ModelSpec s = spec(name, 10);
    s.width = 8;
    sample = Shape(1, 3, 16, 16);
    return make_model(s, sample);
  }
  if (name == "unet") {
    ModelSpec s = spec(name, 3);
    s.width = 8;
    s.depth = 2;
    sample = Shape(1, 4, 16, 16);
    return make_model(s, sample);
  }
  if (name == "deeplabv3plus") {
    ModelSpec s = spec(name, 3);
    s.width = 8;
    s.depth = 3;
    s.aspp_rates = {2, 3};
    sample = Shape(1, 4, 16, 24);
    return make_model(s, sample);
  }
  if (name == "deeplabv3plus-resnet50") {
    sample = Shape(1, 3, 32, 32);
    return make_model(spec(name, 3), sample);
  }
  return nullptr;
}

// Layers no zoo model uses, or uses in other ways: average pooling with padding (excluded from
// the count), a bilinear resize that shrinks by a non-integer factor, flatten, a linear layer.
std::unique_ptr<Graph> other_layers(Shape& sample) {
  sample = Shape(1, 3, 12, 12);
  auto g = std::make_unique<Graph>(sample);
  Conv2dOptions c{6, 3, 2, 1, 1, true, Init::uniform_fan_in};
  int x = g->add("conv", conv2d(c), Graph::k_input);
  x = g->add("bn", batch_norm(1e-3f), x);
  x = g->add("pool", avg_pool(3, 1, 1), x);
  x = g->add("resize", upsample_bilinear(5, 7), x);
  x = g->add("flatten", flatten(), x);
  g->add("fc", linear(4), x);
  return g;
}

// A layer the exporter does not know: the export must refuse it, naming the node.
class Mystery final : public Layer {
 public:
  std::string type() const override { return "mystery"; }
  Shape setup(const std::vector<Shape>& inputs) override { return inputs.at(0); }
  void build(Backend&, const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&) override {}
  void forward(Stream&, const std::vector<Tensor>&, const Tensor&, const RunMode&) override {}
  void backward(Stream&, const std::vector<Tensor>&, const Tensor&, const Tensor&, const std::vector<Tensor>&) override {}
};

bool refuses_unknown_layer(const std::string& dir) {
  Graph g(Shape(1, 2, 4, 4));
  int x = g.add("head.relu", relu(), Graph::k_input);
  g.add("head.mystery", std::make_unique<Mystery>(), x);
  g.setup(1);
  const std::string out = dir + "/refused.onnx";
  try {
    squall::exporting::write_onnx(g, {}, {}, out, {});
  } catch (const squall::Error& e) {
    const std::string what = e.what();
    const bool named = what.find("'head.mystery'") != std::string::npos && what.find("mystery layer") != std::string::npos;
    std::ifstream f(out);
    if (named && !f) return true;
    std::cerr << "onnx probe: the refusal of an unknown layer " << (named ? "left a file" : "does not name it: ")
              << (named ? "" : what) << "\n";
    return false;
  }
  std::cerr << "onnx probe: a graph with an unknown layer was exported\n";
  return false;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::cerr << "usage: squall_onnx_probe DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t batch = 2;
  squall::cpu::CpuBackend be(2);
  auto stream = be.create_stream();
  std::vector<Case> cases;
  for (const std::string& name : model_names()) {
    Case c;
    c.name = name;
    c.graph = small_model(name, c.sample);
    if (!c.graph) {
      std::cerr << "onnx probe: no small configuration for zoo model " << name << " (add one to " << __FILE__ << ")\n";
      return 1;
    }
    cases.push_back(std::move(c));
  }
  {
    Case c;
    c.name = "other-layers";
    c.graph = other_layers(c.sample);
    cases.push_back(std::move(c));
  }

  nlohmann::json manifest = nlohmann::json::array();
  std::mt19937_64 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.7f, 1.3f);
  for (Case& c : cases) {
    Graph& g = *c.graph;
    g.build(be, batch, 7);
    // Batch norm's scale and shift away from 1 and 0.
    std::vector<float> params(g.param_arena_floats()), state(g.state_arena_floats());
    be.copy_to_host(*stream, params.data(), g.params(), params.size());
    size_t pi = 0;
    for (int i = 1; i < g.size(); ++i) {
      const Layer& l = *g.node_layer(i);
      const size_t np = l.param_specs().size();
      if (l.type() == "batch_norm") {
        const ParamInfo& w = g.param_info()[pi];
        const ParamInfo& b = g.param_info()[pi + 1];
        for (size_t k = 0; k < w.count; ++k) params[w.offset + k] = scale(rng);
        for (size_t k = 0; k < b.count; ++k) params[b.offset + k] = 0.1f * normal(rng);
      }
      pi += np;
    }
    be.copy_from_host(*stream, g.params(), params.data(), params.size());
    // Running statistics from training-mode forwards over another batch (momentum 0.1).
    const Shape in = g.input().shape;
    std::vector<float> x(static_cast<size_t>(in.numel()));
    RunMode mode;
    mode.train = true;
    mode.seed = 5;
    for (int s = 0; s < 4; ++s) {
      for (auto& v : x) v = 0.5f + 1.5f * normal(rng);
      be.copy_from_host(*stream, g.input().f32(), x.data(), x.size());
      mode.step = static_cast<uint64_t>(s);
      g.forward(*stream, mode);
    }
    // The test input, in inference mode.
    for (auto& v : x) v = normal(rng);
    be.copy_from_host(*stream, g.input().f32(), x.data(), x.size());
    mode.train = false;
    g.forward(*stream, mode);
    const Shape out = g.output_shape();
    std::vector<float> logits(static_cast<size_t>(out.numel()));
    be.copy_to_host(*stream, logits.data(), g.output().f32(), logits.size());
    be.copy_to_host(*stream, state.data(), g.state(), state.size());
    be.synchronize(*stream);

    squall::exporting::OnnxOptions o;
    o.graph_name = c.name;
    squall::exporting::write_onnx(g, params, state, dir + "/" + c.name + ".onnx", o);
    auto dump = [&](const std::string& file, const std::vector<float>& v) {
      std::ofstream f(dir + "/" + file, std::ios::binary);
      f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
      if (!f) throw squall::Error("cannot write " + dir + "/" + file);
    };
    dump(c.name + ".input.f32", x);
    dump(c.name + ".logits.f32", logits);
    auto dims = [](const Shape& s) {
      std::vector<int64_t> d;
      for (int i = 0; i < s.rank; ++i) d.push_back(s[i]);
      return d;
    };
    manifest.push_back({{"name", c.name}, {"input", dims(in)}, {"logits", dims(out)}});
    std::cout << "onnx probe: " << c.name << " exported (" << g.parameter_count() << " parameters)\n" << std::flush;
  }
  std::ofstream(dir + "/manifest.json") << manifest.dump(1) << "\n";
  if (!refuses_unknown_layer(dir)) return 1;
  std::cout << "onnx probe: an unknown layer is refused, naming its node\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "onnx probe: " << e.what() << "\n";
  return 1;
}
