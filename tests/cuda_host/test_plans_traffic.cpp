// cuda-host: what one training step of ResNet-20 and DeepLabv3+ in bf16 NHWC enqueues on the
// CUDA backend, counted: the step runs on a RecordingBackend (the CPU backend, tallying each
// call as the CUDA backend would launch it, tests/cuda_host/plans_recording_backend.hpp), and
// the table lists squall's own kernels and copies by kind, launches and bytes, with cuDNN's
// and cuBLAS's calls as a count. A step is the learner's: the batch in, forward, loss,
// backward, the gradients' sum of squares, the fused SGD update that also writes the
// convolutions' weight mirrors (as src/parallel/learner.cpp wires it). The reference paths
// (no gradient hand-through, no mirrors) are counted beside it: each must cost more.
#include <catch2/catch.hpp>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "src/nn/graph.hpp"
#include "tests/cuda_host/plans_recording_backend.hpp"

namespace squall {
namespace {

using nn::DType;
using nn::Layout;
using nn::Shape;

struct StepCase {
  nn::ModelSpec spec;
  Shape sample;
  int64_t batch;
};

nn::ModelSpec spec_of(const std::string& name, int64_t classes) {
  nn::ModelSpec s;
  s.name = name;
  s.classes = classes;
  return s;
}

// The second of two steps (the first sizes everything), tallied. reference: the graph's
// reference paths (gradients copied, weights copied by every forward).
test::TrafficTable step_traffic(const StepCase& c, bool reference) {
  test::RecordingBackend backend;
  auto g = nn::make_model(c.spec, c.sample);
  g->set_dtype(DType::bf16);
  g->set_layout(Layout::nhwc);
  g->set_gradient_aliasing(!reference);
  g->set_weight_mirrors(!reference);
  g->build(backend, c.batch, 1);
  auto stream = backend.create_stream();
  const Shape out = g->output_shape();
  const int64_t hw = out.rank == 4 ? out.h() * out.w() : 1;
  std::vector<float> x(static_cast<size_t>(g->input().numel()));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  std::vector<int32_t> labels(static_cast<size_t>(out.n() * hw));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % static_cast<size_t>(out.c()));
  nn::Buffer label_owner;
  int32_t* dev_labels = backend.allocate_labels(labels.size(), label_owner);
  backend.copy_labels_from_host(*stream, dev_labels, labels.data(), labels.size());
  nn::Buffer velocity = backend.allocate(g->param_arena_floats()), loss = backend.allocate(1), norm = backend.allocate(1);
  backend.fill(*stream, velocity.data(), g->param_arena_floats(), 0.0f);
  const std::vector<nn::WeightMirror> mirrors = g->weight_mirrors();
  CHECK(mirrors.empty() == reference);
  // A mirror for each convolution whose CUDA plan keeps a copy of its weights (bf16, NHWC: all
  // of them here), as the plans themselves report it: the count the tally below relies on.
  size_t copying = 0, mirrored = 0;
  for (const nn::ConvDesc& d : backend.convs()) copying += d.dtype != DType::f32 || d.layout == Layout::nhwc;
  for (const nn::WeightMirror& m : mirrors) mirrored += m.data != nullptr;
  if (!reference) CHECK(mirrored == copying);
  CHECK(copying == backend.convs().size());
  std::vector<nn::TensorRef> refs;
  for (size_t i = 0; i < g->param_info().size(); ++i) {
    const nn::ParamInfo& p = g->param_info()[i];
    refs.push_back({g->params() + p.offset, g->grads() + p.offset, p.count, true,
                    mirrors.empty() ? nn::WeightMirror{} : mirrors[i]});
  }
  auto set = backend.make_tensor_set(refs);
  nn::RunMode mode;
  for (int step = 0; step < 2; ++step) {
    if (step == 1) backend.clear_traffic();
    mode.step = static_cast<uint64_t>(step);
    backend.copy_from_host(*stream, g->input().f32(), x.data(), x.size());
    g->forward(*stream, mode);
    backend.softmax_cross_entropy(*stream, g->dtype(), g->output().data, dev_labels, nullptr, out.n(), out.c(), hw,
                                  g->output_grad().data, loss.data(), nullptr);
    g->backward(*stream);
    backend.sum_squares(*stream, g->grads(), g->param_arena_floats(), norm.data());
    nn::SgdArgs a;
    a.lr = 0.01f;
    a.momentum = 0.9f;
    backend.sgd_update(*stream, *set, velocity.data(), a);
    g->mark_mirrors_current();
  }
  backend.synchronize(*stream);
  return backend.traffic();
}

// squall's own launches and bytes (the library's calls left out).
test::Traffic own(const test::TrafficTable& t) {
  test::Traffic total;
  for (const auto& [kind, v] : t) {
    if (kind == "cuDNN/cuBLAS calls") continue;
    total.launches += v.launches;
    total.bytes += v.bytes;
  }
  return total;
}

// Both tables side by side, by kind.
void print(const std::string& title, const test::TrafficTable& now, const test::TrafficTable& ref) {
  std::printf("%s\n| kind | launches | MB | reference launches | reference MB |\n|---|---|---|---|---|\n",
              title.c_str());
  test::TrafficTable kinds = ref;
  for (const auto& [kind, v] : now) kinds[kind];
  for (const auto& [kind, v] : kinds) {
    const test::Traffic a = now.count(kind) ? now.at(kind) : test::Traffic{};
    const test::Traffic b = ref.count(kind) ? ref.at(kind) : test::Traffic{};
    std::printf("| %s | %zu | %.3f | %zu | %.3f |\n", kind.c_str(), a.launches, a.bytes / 1e6, b.launches, b.bytes / 1e6);
  }
  const test::Traffic a = own(now), b = own(ref);
  std::printf("| squall's kernels and copies | %zu | %.3f | %zu | %.3f |\n\n", a.launches, a.bytes / 1e6, b.launches,
              b.bytes / 1e6);
}

TEST_CASE("traffic: a bf16 NHWC training step of ResNet-20 and DeepLabv3+, counted", "[plans][traffic][isa]") {
  const StepCase cases[] = {{spec_of("resnet20", 10), Shape(1, 1, 28, 28), 32},
                            {spec_of("deeplabv3plus", 3), Shape(1, 16, 96, 144), 2}};
  for (const StepCase& c : cases) {
    INFO(c.spec.name);
    const test::TrafficTable now = step_traffic(c, false), ref = step_traffic(c, true);
    print(c.spec.name + " " + c.sample.str() + " batch " + std::to_string(c.batch) + ", bf16 NHWC, one step", now, ref);
    REQUIRE(now.count("cuDNN/cuBLAS calls") == 1);
    CHECK(now.at("cuDNN/cuBLAS calls").launches == ref.at("cuDNN/cuBLAS calls").launches);
    // The weight copies are the update's, the gradients are handed through: fewer launches
    // and fewer bytes for squall's own kernels.
    CHECK(now.count("conv weights to the plan's copy") == 0);
    CHECK(own(now).launches < own(ref).launches);
    CHECK(own(now).bytes < own(ref).bytes);
  }
}

}  // namespace
}  // namespace squall
