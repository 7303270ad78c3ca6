// Inference fusion (docs/design.md, "Inference"): a forward-only graph whose convolutions take
// the batch norm (folded into their weights) and the ReLU after them computes what the same
// graph computes layer by layer, for every zoo model, in NCHW and blocked layouts, with batch
// norms whose running statistics and affine parameters are far from their initial values.
#include <catch2/catch.hpp>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/zoo_cases.hpp"

using namespace squall;
using nn::Layout;

namespace {

nn::Backend& be() { return test::test_backend(); }

// Parameters and state drawn at random; running variances positive (they are variances).
void randomise(nn::Graph& g, nn::Stream& s, uint32_t seed) {
  std::vector<float> p = test::random_floats(g.param_arena_floats(), seed, 0.5f);
  be().copy_from_host(s, g.params(), p.data(), p.size());
  std::vector<float> st = test::random_floats(g.state_arena_floats(), seed + 1, 0.5f);
  for (const nn::ParamInfo& info : g.state_info())
    if (info.name.size() >= 11 && info.name.compare(info.name.size() - 11, 11, "running_var") == 0)
      for (size_t k = 0; k < info.count; ++k) st[info.offset + k] = 0.2f + std::abs(st[info.offset + k]) * 2.0f;
  be().copy_from_host(s, g.state(), st.data(), st.size());
  be().synchronize(s);
}

}  // namespace

TEST_CASE("fusion: forward-only graphs with convolutions taking batch norm and ReLU compute the layer-by-layer logits",
          "[fusion][isa]") {
  if (!be().fuses(nn::DType::f32)) return;  // the CUDA backend fuses nothing yet
  auto s = be().create_stream();
  const int64_t batch = 3;
  std::vector<test::ZooCase> cases = test::small_zoo();
  cases.push_back({"unet", nn::Shape(1, 16, 16, 24), 16});
  for (const auto& c : cases) {
    for (const Layout l : {Layout::nchw, Layout::blocked}) {
      INFO("model " << c.name << " width " << c.width << " in " << nn::layout_name(l));
      const auto x = test::random_floats(static_cast<size_t>(batch * c.sample.numel()), 3);
      std::vector<std::vector<float>> logits;
      std::vector<int> fused;
      for (const bool fuse : {false, true}) {
        auto g = test::make_zoo_model(c, nn::DType::f32, l);
        g->set_forward_only(true);
        g->set_fusion(fuse);
        g->build(be(), batch, 7);
        randomise(*g, *s, 11);
        be().copy_from_host(*s, g->input().f32(), x.data(), x.size());
        nn::RunMode eval;
        eval.train = false;
        g->forward(*s, eval);
        logits.push_back(test::download(be(), g->output().f32(), static_cast<size_t>(g->output().numel())));
        fused.push_back(g->fused_nodes());
      }
      CHECK(fused[0] == 0);
      CHECK(fused[1] > 0);  // every zoo model has a convolution followed by a ReLU or a batch norm
      CHECK(test::relative_l2(logits[1], logits[0]) < 1e-5);
    }
  }
}

TEST_CASE("fusion: training graphs fuse each ReLU into the batch norm or convolution before it and compute the "
          "layer-by-layer logits and gradients",
          "[fusion][isa]") {
  if (!be().fuses(nn::DType::f32)) return;
  auto s = be().create_stream();
  const int64_t batch = 3;
  std::vector<test::ZooCase> cases = test::small_zoo();
  cases.push_back({"unet", nn::Shape(1, 16, 16, 24), 16});
  for (const auto& c : cases) {
    for (const Layout l : {Layout::nchw, Layout::nhwc, Layout::blocked}) {
      INFO("model " << c.name << " width " << c.width << " in " << nn::layout_name(l));
      const auto x = test::random_floats(static_cast<size_t>(batch * c.sample.numel()), 5);
      std::vector<std::vector<unsigned char>> eval_logits, train_logits, grads, state;
      std::vector<int> fused;
      for (const bool fuse : {false, true}) {
        auto g = test::make_zoo_model(c, nn::DType::f32, l);
        g->set_fusion(fuse);
        g->build(be(), batch, 9);
        randomise(*g, *s, 13);
        fused.push_back(g->fused_nodes());
        nn::RunMode eval;
        eval.train = false;
        be().copy_from_host(*s, g->input().f32(), x.data(), x.size());
        g->forward(*s, eval);
        eval_logits.push_back(test::bytes_on_host(be(), *s, g->output().data, g->output().bytes()));
        be().copy_from_host(*s, g->input().f32(), x.data(), x.size());
        g->forward(*s, nn::RunMode{});
        train_logits.push_back(test::bytes_on_host(be(), *s, g->output().data, g->output().bytes()));
        be().copy_bytes(*s, g->output_grad().data, g->output().data, g->output().bytes());
        g->backward(*s);
        grads.push_back(test::bytes_on_host(be(), *s, g->grads(), g->param_arena_floats() * sizeof(float)));
        state.push_back(test::bytes_on_host(be(), *s, g->state(), g->state_arena_floats() * sizeof(float)));
      }
      CHECK(fused[0] == 0);
      CHECK(fused[1] > 0);  // LeNet-5's convolutions take their ReLUs, the others' batch norms do
      // The same arithmetic in fewer passes: the same bits.
      const auto same = [](const auto& a, const auto& b) { return a == b; };  // no listing of a million bytes
      CHECK(same(eval_logits[1], eval_logits[0]));
      CHECK(same(train_logits[1], train_logits[0]));
      CHECK(same(grads[1], grads[0]));
      CHECK(same(state[1], state[0]));
    }
  }
}

TEST_CASE("fusion: a training graph fuses only ReLUs, into batch norms and convolutions, and a plan refuses a folded "
          "batch norm with backward",
          "[fusion]") {
  if (!be().fuses(nn::DType::f32)) return;
  auto g = test::make_zoo_model(test::small_zoo()[1], nn::DType::f32, Layout::nchw);
  g->build(be(), 2, 1);
  CHECK(g->fused_nodes() > 0);
  for (const auto& c : test::small_zoo()) {
    INFO("model " << c.name);
    auto m = test::make_zoo_model(c, nn::DType::f32, Layout::nchw);
    m->build(be(), 2, 1);
    // Every ReLU whose input is a batch norm's or a convolution's, and only those: a training
    // graph takes no batch norm into a convolution.
    int relus_after = 0;
    for (int id = 1; id < m->size(); ++id) {
      const std::vector<int>& in = m->node_inputs(id);
      if (m->node_layer(id)->type() != "relu" || in.size() != 1 || in[0] <= 0) continue;
      const std::string before = m->node_layer(in[0])->type();
      relus_after += before == "batch_norm" || before == "conv2d" || before == "conv_transpose2d";
    }
    CHECK(m->fused_nodes() == relus_after);
  }
  nn::ConvDesc d;
  d.n = 1, d.c = 2, d.h = 4, d.w = 4, d.k = 2, d.r = d.s = 3, d.pad_h = d.pad_w = 1;
  d.fold_batch_norm = true;
  CHECK_THROWS_AS(be().make_conv(d), Error);  // backward is on by default
  d.backward = false;
  auto plan = be().make_conv(d);
  nn::Buffer x = be().allocate(32), w = be().allocate(36), b = be().allocate(2), y = be().allocate(32);
  auto s = be().create_stream();
  // Forward before the norm's tensors are bound: a clear error, not a read through null.
  CHECK_THROWS_AS((plan->forward(*s, x.raw(), w.data(), b.data(), y.raw()), be().synchronize(*s)), Error);
}
