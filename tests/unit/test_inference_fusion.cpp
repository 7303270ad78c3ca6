// Inference fusion (docs/design.md, "Inference"): a forward-only graph whose convolutions take
// the batch norm (folded into their weights) and the ReLU after them computes what the same
// graph computes layer by layer, for every zoo model, in NCHW and blocked layouts, with batch
// norms whose running statistics and affine parameters are far from their initial values.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "tests/support/skip.hpp"
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
  if (!be().capabilities().fuses(nn::DType::f32)) SQUALL_SKIP("this backend fuses nothing");  // the CUDA backend, yet
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
  if (!be().capabilities().fuses(nn::DType::f32)) SQUALL_SKIP("this backend fuses nothing");
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
      // The same arithmetic in fewer passes. A ReLU is exact, and a batch norm's fused ReLU runs
      // in the batch norm's own kernel, so what can differ is only the convolution: a primitive
      // with a ReLU post-op is another primitive to oneDNN, which may pick another kernel (another
      // summation order) for it on some ISA. So a tolerance of float rounding over the depth of
      // these models, not bit equality (which holds where oneDNN picks one kernel for both, as on
      // AVX2 and AVX-512 with oneDNN 2.6: measured 0).
      const auto floats = [](const std::vector<unsigned char>& b) {
        std::vector<float> f(b.size() / sizeof(float));
        std::memcpy(f.data(), b.data(), f.size() * sizeof(float));
        return f;
      };
      REQUIRE(grads[1].size() == grads[0].size());
      REQUIRE(state[1].size() == state[0].size());
      CHECK(test::relative_l2(floats(eval_logits[1]), floats(eval_logits[0])) < 1e-5);
      CHECK(test::relative_l2(floats(train_logits[1]), floats(train_logits[0])) < 1e-5);
      CHECK(test::relative_l2(floats(grads[1]), floats(grads[0])) < 1e-5);
      CHECK(test::relative_l2(floats(state[1]), floats(state[0])) < 1e-5);
    }
  }
}

TEST_CASE("fusion: a training graph fuses only ReLUs, into batch norms and convolutions, and a plan refuses a folded "
          "batch norm with backward",
          "[fusion]") {
  if (!be().capabilities().fuses(nn::DType::f32)) SQUALL_SKIP("this backend fuses nothing");
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

// oneDNN 2.6, free to choose, runs an AVX-512 machine's forward_inference convolutions in NHWC
// (its brgemm kernels), so that a plan in nChw16c reordered its input and its output at every
// forward, which cost more than the kernel. A forward-only CPU plan asks for its activations'
// own blocked layouts instead (the layout training's forward already gets): this checks that
// none is staged, on whatever ISA oneDNN finds here, and that the values are those of the same
// plan in NCHW (another kernel, so another summation order: a relative tolerance).
TEST_CASE("fusion: a forward-only CPU convolution computes in its activations' blocked layout, reordering none of them",
          "[fusion][layout]") {
  cpu::CpuBackend cpu(2);  // this backend's plans, whatever backend the other cases test
  const Layout blocked = cpu.capabilities().blocked_layout_for(nn::DType::f32);
  if (blocked == Layout::nchw) SQUALL_SKIP("oneDNN computes in no blocked layout on this CPU");
  const int64_t b = nn::channel_block(blocked);
  auto s = cpu.create_stream();
  struct Case {
    const char* what;
    int64_t c, k, kernel, stride;
    bool transposed, fold, relu, nchw_out;
  };
  const Case cases[] = {
      {"3x3 with a batch norm folded in and a ReLU", 2 * b, 2 * b, 3, 1, false, true, true, false},
      {"3x3 widening, with a ReLU", b, 2 * b, 3, 1, false, false, true, false},
      {"1x1 to 3 channels in NCHW (the logits)", b, 3, 1, 1, false, false, false, true},
      {"transposed 2x2, stride 2, its own bias and ReLU", 2 * b, b, 2, 2, true, false, true, false},
  };
  for (const Case& cc : cases) {
    INFO(cc.what << " in " << nn::layout_name(blocked));
    nn::ConvDesc d;
    d.n = 2, d.c = cc.c, d.h = 12, d.w = 10, d.k = cc.k, d.r = d.s = cc.kernel;
    d.stride_h = d.stride_w = cc.stride;
    d.pad_h = d.pad_w = cc.kernel == 3 ? 1 : 0;
    d.transposed = cc.transposed;
    d.backward = false;
    d.fold_batch_norm = cc.fold;
    d.relu = cc.relu;
    const nn::Shape in(d.n, d.c, d.h, d.w), out = d.output();
    const auto x = test::random_floats(static_cast<size_t>(in.numel()), 21);
    const auto w = test::random_floats(static_cast<size_t>(d.weight().numel()), 22, 0.2f);
    const auto bias = test::random_floats(static_cast<size_t>(d.k), 23, 0.1f);
    std::vector<float> bn = test::random_floats(static_cast<size_t>(4 * d.k), 24, 0.5f);  // gamma, beta, mean, var
    for (int64_t o = 0; o < d.k; ++o) bn[static_cast<size_t>(3 * d.k + o)] = 0.3f + std::abs(bn[static_cast<size_t>(3 * d.k + o)]);
    auto run = [&](Layout l, std::string* implementation) {
      nn::ConvDesc dd = d;
      dd.layout = l;
      if (cc.nchw_out && l != Layout::nchw) dd.out_layout = Layout::nchw;
      auto plan = cpu.make_conv(dd);
      const cpu::ConvForwardInfo info = cpu::conv_forward_info(*plan);
      if (implementation) *implementation = info.implementation;
      if (l != Layout::nchw) {
        CHECK_FALSE(info.stages_x);
        if (!cc.nchw_out) CHECK_FALSE(info.stages_y);
        CHECK(info.implementation.rfind("ref", 0) != 0);  // one of oneDNN's vectorised kernels
      }
      if (cc.fold) plan->bind_batch_norm(bn.data(), bn.data() + d.k, bn.data() + 2 * d.k, bn.data() + 3 * d.k);
      nn::Buffer xb = cpu.allocate(x.size()), xl = cpu.allocate(x.size());
      cpu.copy_from_host(*s, xb.data(), x.data(), x.size());
      cpu.permute_layout(*s, nn::DType::f32, xb.raw(), Layout::nchw, xl.raw(), l, d.n, d.c, d.h, d.w);
      nn::Buffer y = cpu.allocate(static_cast<size_t>(out.numel())), yn = cpu.allocate(static_cast<size_t>(out.numel()));
      plan->forward(*s, xl.raw(), w.data(), bias.data(), y.raw());
      cpu.permute_layout(*s, nn::DType::f32, y.raw(), dd.y_layout(), yn.raw(), Layout::nchw, out.n(), out.c(), out.h(),
                         out.w());
      return test::download(cpu, yn.data(), static_cast<size_t>(out.numel()));
    };
    std::string implementation;
    const auto got = run(blocked, &implementation), want = run(Layout::nchw, nullptr);
    INFO("oneDNN's " << implementation);
    CHECK(test::relative_l2(got, want) < 1e-5);
  }
}
