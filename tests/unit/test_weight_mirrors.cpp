// Weight mirrors (docs/design.md, "Weight mirrors"): the convolutions' own copies of their
// weights, written by the optimizer's fused update and used by the next forward without a
// copy. On the CPU backend the copy is the reference reduced-precision plan's rounded weights,
// so a stale mirror computes with the wrong weights here as on a GPU: the learner group in
// bf16 NHWC must train bit for bit as with mirrors off, whatever writes the weights between
// updates (ssgd's copies into the other learners, sma's pull, local SGD's average, a
// checkpoint restored, a learner added), and a write through Graph::params() after an update
// must make the next forward copy the weights again. These cases pin the reference path
// (test::ReferencePrecision), which keeps the copies on every CPU: where the CPU has bf16
// arithmetic, the default path is oneDNN's bf16 primitives, which reorder the f32 weights at
// every forward and keep no mirror (the last case checks that path, where there is one).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "mpi/sum.hpp"
#include "src/cpu/cpu_info.hpp"
#include "src/nn/graph.hpp"
#include "src/parallel/learners.hpp"
#include "src/optim/optimizer.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/test_backend.hpp"

using namespace squall;
using nn::DType;
using nn::Layout;
using nn::Shape;

namespace {

constexpr int64_t kChannels = 2, kSide = 6, kClasses = 3, kBatch = 4;

// Two convolutions (a 3x3 with batch norm, a 1x1 with a bias), pooled into a linear
// classifier: the mirrors of a filter with and without a bias.
std::unique_ptr<nn::Graph> conv_model(bool mirrors) {
  auto g = std::make_unique<nn::Graph>(Shape(1, kChannels, kSide, kSide));
  nn::Conv2dOptions a;
  a.out_channels = 8;
  a.kernel = 3;
  a.padding = 1;
  a.bias = false;
  int x = g->add("a", nn::conv2d(a), nn::Graph::k_input);
  x = g->add("a.bn", nn::batch_norm(), x);
  x = g->add("a.relu", nn::relu(), x);
  nn::Conv2dOptions b;
  b.out_channels = 8;
  b.kernel = 1;
  x = g->add("b", nn::conv2d(b), x);
  x = g->add("b.relu", nn::relu(), x);
  x = g->add("pool", nn::global_avg_pool(), x);
  g->add("fc", nn::linear(kClasses), x);
  g->set_weight_mirrors(mirrors);
  return g;
}

struct Batches {
  std::vector<std::vector<float>> images;
  std::vector<std::vector<int32_t>> labels;
  std::vector<parallel::LearnerBatch> inputs;
};

Batches batches(int learners, int64_t step) {
  Batches b;
  for (int j = 0; j < learners; ++j) {
    std::vector<float> x(static_cast<size_t>(kBatch * kChannels * kSide * kSide));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i + 1.7 * j + 0.91 * step));
    std::vector<int32_t> y(static_cast<size_t>(kBatch));
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i + static_cast<size_t>(j + step)) % kClasses);
    b.images.push_back(std::move(x));
    b.labels.push_back(std::move(y));
  }
  for (int j = 0; j < learners; ++j) b.inputs.push_back({b.images[j].data(), b.labels[j].data()});
  return b;
}

optim::OptimizerConfig momentum_sgd() {
  optim::OptimizerConfig o;
  o.name = optim::OptimizerKind::sgd;
  o.momentum = 0.9;
  o.weight_decay = 1e-4;
  return o;
}

std::vector<float> host(nn::Backend& be, const float* p, size_t n) { return test::download(be, p, n); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The parameters whose plan keeps a copy.
size_t mirrored(const nn::Graph& g) {
  size_t n = 0;
  for (const nn::WeightMirror& m : g.weight_mirrors()) n += m.data != nullptr ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("weight mirrors: ssgd, sma and local SGD in bf16 NHWC train bit for bit as without them",
          "[learners][mirrors][cpu-only]") {
  const auto algorithm = GENERATE(parallel::Algorithm::ssgd, parallel::Algorithm::sma, parallel::Algorithm::local_sgd);
  const int L = GENERATE(1, 3);
  INFO(parallel::algorithm_name(algorithm) << ", " << L << " learners");
  auto backend = test::make_test_backend(2);
  const test::ReferencePrecision reference(*backend);
  mpi::OneRankAllreduce alone;
  parallel::LearnerGroupOptions o;
  o.algorithm = algorithm;
  o.learners = L;
  o.period = 2;
  o.start_step = 2;  // local SGD: two ssgd steps first
  o.precision = DType::bf16;
  o.layout = Layout::nhwc;
  parallel::LearnerGroup on(*backend, [] { return conv_model(true); }, kBatch, kBatch, momentum_sgd(), {}, o, alone);
  parallel::LearnerGroup off(*backend, [] { return conv_model(false); }, kBatch, kBatch, momentum_sgd(), {}, o, alone);
  REQUIRE(on.replica_graph(0).weight_mirrors_enabled());
  REQUIRE_FALSE(off.replica_graph(0).weight_mirrors_enabled());
  REQUIRE(mirrored(on.replica_graph(0)) == 2);  // the two filters' (else this test would check nothing)
  int current = 0;  // steps after which the next forward takes the mirrors as they are
  for (int64_t step = 0; step < 7; ++step) {
    const Batches in = batches(L, step);
    on.step(in.inputs, step, 0.05f);
    off.step(in.inputs, step, 0.05f);
    current += on.replica_graph(0).mirrors_current() ? 1 : 0;
    CHECK_FALSE(off.replica_graph(0).mirrors_current());
  }
  // Learner 0's optimizer writes its mirrors under every algorithm, and ssgd's other learners
  // copy its weights through read_params(), which leaves them current: the mirrors were used
  // (else this test would check nothing).
  CHECK(current >= 3);
  const size_t P = on.param_arena_floats();
  for (int j = 0; j < L; ++j) {
    INFO("learner " << j);
    CHECK(same_bits(host(*backend, on.replica_params(j), P), host(*backend, off.replica_params(j), P)));
  }
  CHECK(same_bits(host(*backend, on.central_params(), P), host(*backend, off.central_params(), P)));
}

TEST_CASE("weight mirrors: a restored checkpoint and an added learner train as without mirrors",
          "[learners][mirrors][cpu-only]") {
  const auto algorithm = GENERATE(parallel::Algorithm::ssgd, parallel::Algorithm::sma);
  INFO(parallel::algorithm_name(algorithm));
  auto backend = test::make_test_backend(2);
  const test::ReferencePrecision reference(*backend);
  mpi::OneRankAllreduce alone;
  parallel::LearnerGroupOptions o;
  o.algorithm = algorithm;
  o.learners = 1;
  o.period = 1;
  o.precision = DType::bf16;
  o.layout = Layout::nhwc;
  std::vector<std::vector<float>> ends;
  for (const bool mirrors : {true, false}) {
    parallel::LearnerGroup g(*backend, [mirrors] { return conv_model(mirrors); }, kBatch, kBatch, momentum_sgd(), {}, o,
                          alone);
    REQUIRE(mirrored(g.replica_graph(0)) == (mirrors ? 2 : 0));
    checkpoint::CheckpointData shared, own;
    for (int64_t step = 0; step < 3; ++step) g.step(batches(1, step).inputs, step, 0.05f);
    g.save_shared(shared);
    if (g.replicas_differ()) g.save_own(own);
    for (int64_t step = 3; step < 5; ++step) g.step(batches(1, step).inputs, step, 0.05f);
    // Back to step 3's weights: the mirrors now hold step 5's.
    g.restore(shared, g.replicas_differ() ? &own : nullptr);
    for (int64_t step = 3; step < 5; ++step) g.step(batches(1, step).inputs, step, 0.05f);
    g.add_learner();
    for (int64_t step = 5; step < 8; ++step) g.step(batches(2, step).inputs, step, 0.05f);
    ends.push_back(host(*backend, g.replica_params(0), g.param_arena_floats()));
    ends.push_back(host(*backend, g.replica_params(1), g.param_arena_floats()));
  }
  CHECK(same_bits(ends[0], ends[2]));
  CHECK(same_bits(ends[1], ends[3]));
}

namespace {

// An update, then writes through params(), on two graphs in bf16 NHWC, mirrors on and off, on
// whatever path the backend takes at bf16 now: the logits must agree as long as nothing lies
// about the mirrors, and (where the plans keep copies) a mirror wrongly marked current must
// show as other logits.
void check_writes_through_params(nn::Backend& be) {
  auto s = be.create_stream();
  // The copies the plans keep, by the backend's own account of its bf16 path: one per filter
  // on the reference path (its rounded weights); none on oneDNN's native bf16 path, which
  // reorders the f32 weights at every forward.
  const size_t filters = be.capabilities().native_precision(DType::bf16) ? 0 : 2;
  INFO("bf16 " << (be.capabilities().native_precision(DType::bf16) ? "native" : "reference") << ", " << filters << " mirrors");
  std::vector<std::unique_ptr<nn::Graph>> graphs;
  std::vector<std::unique_ptr<optim::Optimizer>> optimizers;
  for (const bool mirrors : {true, false}) {
    auto g = conv_model(mirrors);
    g->set_dtype(DType::bf16);
    g->set_layout(Layout::nhwc);
    g->build(be, kBatch, 9);
    // As a learner wires it (src/parallel/learner.cpp).
    const std::vector<nn::WeightMirror> m = g->weight_mirrors();
    CHECK(m.empty() != mirrors);
    std::vector<optim::ParamGroup> groups;
    for (size_t i = 0; i < g->param_info().size(); ++i) {
      const nn::ParamInfo& p = g->param_info()[i];
      groups.push_back({g->params() + p.offset, g->grads() + p.offset, p.count, true, p.name,
                        m.empty() ? nn::WeightMirror{} : m[i]});
    }
    // The bias, batch norm and linear layer have none.
    CHECK(mirrored(*g) == (mirrors ? filters : 0));
    nn::Graph* raw = g.get();
    optimizers.push_back(
        optim::make_optimizer(momentum_sgd(), be, std::move(groups), [raw] { raw->mark_mirrors_current(); }));
    graphs.push_back(std::move(g));
  }
  const Batches in = batches(1, 0);
  const auto pass = [&](nn::Graph& g) {
    be.copy_from_host(*s, g.input().f32(), in.images[0].data(), in.images[0].size());
    g.forward(*s, nn::RunMode{});
    be.copy_bytes(*s, g.output_grad().data, g.output().data, g.output().bytes());
    g.backward(*s);
    be.synchronize(*s);
  };
  const auto logits = [&](nn::Graph& g) {
    std::vector<unsigned char> out(g.output().bytes());
    be.synchronize_all();
    be.copy_bytes_to_host(*s, out.data(), g.output().data, out.size());
    be.synchronize(*s);
    return out;
  };
  for (size_t k = 0; k < 2; ++k) {
    pass(*graphs[k]);
    optimizers[k]->step(be, *s, 0.1f);
  }
  REQUIRE(graphs[0]->mirrors_current());
  CHECK_FALSE(graphs[1]->mirrors_current());
  // The next forward uses the mirror as it is: the same logits as the copying graph.
  for (auto& g : graphs) g->forward(*s, nn::RunMode{});
  CHECK(logits(*graphs[0]) == logits(*graphs[1]));
  // New weights through params(), as a restore or an average writes them.
  const size_t P = graphs[0]->param_arena_floats();
  std::vector<float> w = host(be, graphs[1]->params(), P);
  for (float& v : w) v = -0.5f * v + 0.01f;
  for (auto& g : graphs) {
    be.copy_from_host(*s, g->params(), w.data(), P);
    be.synchronize(*s);
  }
  CHECK_FALSE(graphs[0]->mirrors_current());
  for (auto& g : graphs) g->forward(*s, nn::RunMode{});
  CHECK(logits(*graphs[0]) == logits(*graphs[1]));
  // Trusting the mirror now would compute with the weights it was last written from, not the
  // new ones: the marking is what keeps the logits right (and the test able to tell). Without
  // copies, there is nothing to trust: the same logits.
  for (float& v : w) v = 0.5f * v - 0.02f;
  for (auto& g : graphs) {
    be.copy_from_host(*s, g->params(), w.data(), P);
    be.synchronize(*s);
  }
  graphs[0]->mark_mirrors_current();
  for (auto& g : graphs) g->forward(*s, nn::RunMode{});
  if (filters > 0) CHECK(logits(*graphs[0]) != logits(*graphs[1]));
  else CHECK(logits(*graphs[0]) == logits(*graphs[1]));
  CHECK_THROWS_AS(graphs[0]->set_weight_mirrors(false), Error);  // after build: refused
}

}  // namespace

TEST_CASE("weight mirrors: a write through params() after an update makes the next forward copy the weights",
          "[models][mirrors][cpu-only][isa]") {
  nn::Backend& be = test::test_backend();
  const test::ReferencePrecision reference(be);
  check_writes_through_params(be);
}

TEST_CASE("weight mirrors: oneDNN's native bf16 convolutions keep no copy, and a write through params() reaches "
          "them",
          "[models][mirrors][cpu-only][needs-hardware][isa]") {
  nn::Backend& be = test::test_backend();
  if (!be.capabilities().native_precision(DType::bf16))
    SQUALL_SKIP("oneDNN runs " << cpu::dnn_isa() << " on " << cpu::cpu_model_name()
                               << ": no bf16 arithmetic, so no native bf16 path (the case above is the reference's)");
  check_writes_through_params(be);
}
