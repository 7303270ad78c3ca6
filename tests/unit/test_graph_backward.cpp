// The residual add's backward (docs/design.md, "The residual add's backward"): an add's inputs
// take its gradient's memory as theirs instead of a copy, where plan_gradient_aliases
// (src/nn/gradient_aliases.hpp) finds it safe. Checked three ways: the plan on hand-made
// structures, including one where handing on would clobber a gradient still to be read;
// every zoo model's gradients against the graph that copies (Graph::set_gradient_aliasing
// false), bit for bit, at every type and layout; and ResNet-20's backward counted: no copy,
// one add per extra reader of a tensor.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/nn/gradient_aliases.hpp"
#include "src/nn/graph.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/zoo_cases.hpp"

using namespace squall;
using nn::DType;
using nn::Layout;
using nn::Shape;

namespace {

// A structure of nodes 0..n-1: the inputs of each (node 0 has none) and which pass through.
nn::BackwardStructure structure(std::vector<std::vector<int>> inputs, std::vector<bool> passes, int output) {
  nn::BackwardStructure s;
  s.inputs = std::move(inputs);
  s.passes_through = std::move(passes);
  s.output = output;
  return s;
}

}  // namespace

TEST_CASE("gradient aliases: a residual block's add hands its gradient to both inputs", "[models][aliases]") {
  // 1 = stem(0); 2 = a(1); 3 = b(2); 4 = add(3, 1); 5 = relu(4), the output. The shortcut 1
  // has a second reader, a (2), whose gradient is added into 4's memory after b (3) has read it.
  const auto s = structure({{}, {0}, {1}, {2}, {3, 1}, {4}}, {false, false, false, false, true, false}, 5);
  const auto alias = nn::plan_gradient_aliases(s);
  CHECK(alias[4] == std::vector<bool>{true, true});
  for (int j : {1, 2, 3, 5}) CHECK(alias[static_cast<size_t>(j)] == std::vector<bool>(s.inputs[static_cast<size_t>(j)].size(), false));
  CHECK(nn::gradient_aliases_safe(s, alias));
}

TEST_CASE("gradient aliases: an input read again before the other input's gradient is used keeps a copy",
          "[models][aliases]") {
  // 1 = s(0); 2 = x(1); 3 = c(1); 4 = add(x, s); 5 = add(4, c), the output. In reverse, c (3)
  // adds its part into s's gradient before x (2) has read its own: x and s may not share 4's
  // memory, so s gets a copy; 5's inputs and x do share.
  const auto s = structure({{}, {0}, {1}, {1}, {2, 1}, {4, 3}}, {false, false, false, false, true, true}, 5);
  const auto alias = nn::plan_gradient_aliases(s);
  CHECK(alias[5] == std::vector<bool>{true, true});
  CHECK(alias[4] == std::vector<bool>{true, false});
  CHECK(nn::gradient_aliases_safe(s, alias));
  auto unsafe = alias;
  unsafe[4][1] = true;
  CHECK_FALSE(nn::gradient_aliases_safe(s, unsafe));
  // Not a first writer, not a pass-through layer, the graph's input, an input read twice:
  // never handed on.
  auto not_first = alias;
  not_first[3][0] = true;  // c does not pass through
  CHECK_FALSE(nn::gradient_aliases_safe(s, not_first));
  const auto twice = structure({{}, {0}, {1, 1}}, {false, false, true}, 2);
  CHECK(nn::plan_gradient_aliases(twice)[2] == std::vector<bool>{false, false});
  const auto from_input = structure({{}, {0}, {1, 0}}, {false, false, true}, 2);
  CHECK(nn::plan_gradient_aliases(from_input)[2] == std::vector<bool>{true, false});
}

TEST_CASE("gradient aliases: a layer that overwrites its gradient shares it with no input still to read it",
          "[models][aliases]") {
  // 1 = x = conv0(0); 2 = c = conv1(1); 3 = relu(2), fused into c, whose backward masks their
  // one gradient in place before reading it; 4 = add(3, 1); 5 = the output, read from 4.
  auto s = structure({{}, {0}, {1}, {2}, {3, 1}, {4}}, {false, false, false, false, true, false}, 5);
  s.fused = {false, false, false, true, false, false};
  s.overwrites_gradient = {false, false, true, false, false, false};
  const auto alias = nn::plan_gradient_aliases(s);
  CHECK(alias[3] == std::vector<bool>{true});          // the fused ReLU's gradient is conv1's, always
  CHECK(alias[4] == std::vector<bool>{true, false});   // x keeps a copy: conv1's mask would reach it
  CHECK(nn::gradient_aliases_safe(s, alias));
  auto both = alias;
  both[4][1] = true;
  CHECK_FALSE(nn::gradient_aliases_safe(s, both));
  auto unfused = alias;
  unfused[3][0] = false;
  CHECK_FALSE(nn::gradient_aliases_safe(s, unfused));  // a fused node has no memory of its own
  // A fused layer that only reads its gradient (a batch norm's ReLU, masked as it is read): both share.
  auto reads = s;
  reads.overwrites_gradient.clear();
  CHECK(nn::plan_gradient_aliases(reads)[4] == std::vector<bool>{true, true});
  // In the other order of the add's inputs, x shares and the ReLU's gradient is the copy.
  auto swapped = structure({{}, {0}, {1}, {2}, {1, 3}, {4}}, {false, false, false, false, true, false}, 5);
  swapped.fused = s.fused;
  swapped.overwrites_gradient = s.overwrites_gradient;
  CHECK(nn::plan_gradient_aliases(swapped)[4] == std::vector<bool>{true, false});
}

namespace {

nn::Backend& be() { return test::test_backend(); }

// One forward and backward of `g` on a fixed batch, with a loss gradient that depends on the
// logits (so that every path carries a different value): the parameters' gradients, as bytes.
std::vector<unsigned char> gradients(nn::Graph& g, nn::Stream& s) {
  const auto x = test::random_floats(static_cast<size_t>(g.input().numel()), 11);
  be().copy_from_host(s, g.input().f32(), x.data(), x.size());
  g.forward(s, nn::RunMode{});
  be().copy_bytes(s, g.output_grad().data, g.output().data, g.output().bytes());
  g.backward(s);
  return test::bytes_on_host(be(), s, g.grads(), g.param_arena_floats() * sizeof(float));
}

}  // namespace

namespace {

// Forward and backward of the model at every type and layout, aliasing on and off: the
// parameters' gradients must be the same bytes.
void check_against_copying_graph(const test::ZooCase& c) {
  auto s = be().create_stream();
  for (const DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Layout l : {Layout::nchw, Layout::nhwc}) {
      INFO(c.name << " " << nn::dtype_name(t) << " " << nn::layout_name(l));
      std::vector<std::vector<unsigned char>> grads;
      for (const bool alias : {true, false}) {
        auto g = test::make_zoo_model(c, t, l);
        g->set_gradient_aliasing(alias);
        g->build(be(), 2, 7);
        grads.push_back(gradients(*g, *s));
      }
      REQUIRE(grads[0].size() == grads[1].size());
      CHECK(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size()) == 0);
    }
}

}  // namespace

TEST_CASE("gradient aliases: every zoo model's gradients are the copying graph's, bit for bit", "[models][aliases]") {
  for (const test::ZooCase& c : test::small_zoo()) check_against_copying_graph(c);
}

// Slow (twelve builds of 40 million parameters) but mostly one thread drawing them: beside the
// other tests rather than alone.
TEST_CASE("gradient aliases: DeepLabv3+ on ResNet-50's gradients are the copying graph's, bit for bit",
          "[models][aliases][slow][beside]") {
  check_against_copying_graph({"deeplabv3plus-resnet50", Shape(1, 2, 16, 16), 0});
}

TEST_CASE("gradient aliases: the fallback to a copy gives the copying graph's gradients", "[models][aliases]") {
  // The structure of the second case above as layers: s and c are ReLUs of a linear layer's
  // output, so that a wrong gradient reaches the weights.
  auto s = be().create_stream();
  std::vector<std::vector<unsigned char>> grads;
  for (const bool alias : {true, false}) {
    nn::Graph g(Shape(1, 6, 1, 1));
    const int fc = g.add("fc", nn::linear(5), nn::Graph::k_input);
    const int sx = g.add("s", nn::relu(), fc);
    const int x = g.add("x", nn::linear(5), sx);
    const int c = g.add("c", nn::linear(5), sx);
    const int a = g.add("a", nn::add(), {x, sx});
    g.add("out", nn::add(), {a, c});
    g.set_gradient_aliasing(alias);
    g.build(be(), 3, 5);
    grads.push_back(gradients(g, *s));
  }
  CHECK(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size()) == 0);
  nn::Graph g(Shape(1, 2, 1, 1));
  g.build(be(), 1, 1);
  CHECK_THROWS_AS(g.set_gradient_aliasing(false), Error);  // after build: refused
}

// A convolution that takes the ReLU after it (a training graph's fusion, docs/design.md,
// "Inference") masks that ReLU's output gradient in place before its own backward reads it.
// When the ReLU's output is one input of a residual add and the convolution's input the other,
// x = conv0(in); a = add(relu(conv1(x)), x), handing the add's gradient through to both
// would put x's gradient in the memory conv1 masks: x's shortcut part would reach conv0
// masked. The planner must keep a copy for one of them; in either order of the add's inputs,
// the gradients are the unfused graph's.
TEST_CASE("gradient aliases: a convolution's fused ReLU mask does not reach a shortcut sharing its gradient",
          "[models][aliases][fusion]") {
  if (!be().capabilities().fuses(DType::f32)) return;  // the CUDA backend fuses nothing yet
  auto s = be().create_stream();
  for (const bool relu_first : {true, false}) {
    INFO((relu_first ? "add(relu(conv1(x)), x)" : "add(x, relu(conv1(x)))"));
    std::vector<std::vector<float>> grads;
    std::vector<int> fused;
    std::vector<nn::ParamInfo> params;
    for (const bool fuse : {true, false}) {
      nn::Graph g(Shape(1, 3, 6, 6));
      nn::Conv2dOptions o;
      o.out_channels = 4;
      o.kernel = 3;
      o.padding = 1;
      const int x = g.add("conv0", nn::conv2d(o), nn::Graph::k_input);
      const int c = g.add("conv1", nn::conv2d(o), x);
      const int r = g.add("conv1.relu", nn::relu(), c);
      const int a = g.add("add", nn::add(), relu_first ? std::vector<int>{r, x} : std::vector<int>{x, r});
      const int p = g.add("pool", nn::global_avg_pool(), a);
      g.add("fc", nn::linear(3), p);
      g.set_fusion(fuse);
      g.build(be(), 2, 5);
      fused.push_back(g.fused_nodes());
      params = g.param_info();
      const auto bytes = gradients(g, *s);
      std::vector<float> f(bytes.size() / sizeof(float));
      std::memcpy(f.data(), bytes.data(), bytes.size());
      grads.push_back(std::move(f));
    }
    REQUIRE(fused[0] == 1);  // the ReLU went into conv1 (else this checks nothing)
    REQUIRE(fused[1] == 0);
    // Per tensor. The post-op forward and the plain one are two oneDNN primitives, free to
    // run different kernels: a sum order apart at most. A clobbered shortcut is an O(1) error
    // in conv0's gradients.
    for (const nn::ParamInfo& info : params) {
      INFO(info.name);
      const auto at = [&](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(info.offset),
                                  v.begin() + static_cast<std::ptrdiff_t>(info.offset + info.count));
      };
      CHECK(test::relative_l2(at(grads[0]), at(grads[1])) < 1e-5);
    }
  }
}

namespace {

// The CPU backend, counting the copies and adds it is asked for while `counting` is set.
class CopyCounter final : public cpu::CpuBackend {
 public:
  CopyCounter() : cpu::CpuBackend(2) {}
  void copy_bytes(nn::Stream& s, void* dst, const void* src, size_t bytes) override {
    if (counting) {
      ++copies;
      copied += bytes;
    }
    cpu::CpuBackend::copy_bytes(s, dst, src, bytes);
  }
  void add(nn::Stream& s, DType t, const void* a, const void* b, void* y, size_t n) override {
    if (counting) ++adds;
    cpu::CpuBackend::add(s, t, a, b, y, n);
  }
  bool counting = false;
  size_t copies = 0, copied = 0, adds = 0;
};

}  // namespace

TEST_CASE("gradient aliases: ResNet-20's backward copies no gradient and adds once per extra reader",
          "[models][aliases][cpu-only]") {
  for (const DType t : {DType::f32, DType::bf16}) {
    INFO(nn::dtype_name(t));
    size_t copies[2] = {0, 0}, copied[2] = {0, 0}, adds[2] = {0, 0};
    size_t residual_adds = 0, extra_readers = 0, add_bytes = 0;
    for (const bool alias : {true, false}) {
      CopyCounter backend;
      auto stream = backend.create_stream();
      nn::ModelSpec spec;
      spec.name = "resnet20";
      auto g = nn::make_model(spec, Shape(1, 3, 16, 16));
      g->set_dtype(t);
      g->set_gradient_aliasing(alias);
      g->build(backend, 2, 3);
      // From the structure: the residual adds, and every reader of a tensor after its first.
      std::vector<int> readers(static_cast<size_t>(g->size()), 0);
      residual_adds = extra_readers = add_bytes = 0;
      for (int i = 1; i < g->size(); ++i) {
        if (g->node_layer(i)->type() == "add") {
          ++residual_adds;
          add_bytes += static_cast<size_t>(g->node_shape(i).numel()) * nn::dtype_size(t);
        }
        for (int j : g->node_inputs(i)) ++readers[static_cast<size_t>(j)];
      }
      for (int i = 1; i < g->size(); ++i) extra_readers += readers[static_cast<size_t>(i)] > 1 ? readers[static_cast<size_t>(i)] - 1 : 0;
      const std::vector<float> x(static_cast<size_t>(g->input().numel()), 0.5f);
      backend.copy_from_host(*stream, g->input().f32(), x.data(), x.size());
      g->forward(*stream, nn::RunMode{});
      backend.copy_bytes(*stream, g->output_grad().data, g->output().data, g->output().bytes());
      backend.counting = true;
      g->backward(*stream);
      backend.counting = false;
      copies[alias ? 0 : 1] = backend.copies;
      copied[alias ? 0 : 1] = backend.copied;
      adds[alias ? 0 : 1] = backend.adds;
    }
    REQUIRE(residual_adds == 9);  // 3 stages of 3 basic blocks
    CHECK(copies[0] == 0);
    CHECK(copied[0] == 0);
    CHECK(adds[0] == extra_readers);
    // The copying graph: each add copies its gradient into both inputs.
    CHECK(copies[1] == 2 * residual_adds);
    CHECK(copied[1] == 2 * add_bytes);
    CHECK(adds[1] == extra_readers);
  }
}
