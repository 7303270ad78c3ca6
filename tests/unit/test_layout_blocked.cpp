// Channel-blocked activations on the CPU backend (docs/design.md, "Layout"): the permutation
// between NCHW and nChw8c / nChw16c, the convolution, pooling and batch-norm plans in blocked
// layouts (and a convolution between two layouts) against NCHW, how a graph resolves
// Layout::blocked per tensor, and every zoo model built blocked computing the NCHW model's
// logits and gradients. CPU only: the CUDA backend has no blocked layout.
#include <catch2/catch.hpp>

#include <cstring>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/zoo_cases.hpp"

using namespace squall;
using nn::Layout;

namespace {

nn::Backend& be() { return test::test_backend(); }

// [n][c][hw] to [n][c / block][hw][block] (to_blocked) or back, on the host: the reference.
std::vector<float> host_block(const std::vector<float>& x, int64_t n, int64_t c, int64_t hw, int64_t block,
                              bool to_blocked) {
  std::vector<float> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) {
        const auto plain = static_cast<size_t>((i * c + ch) * hw + p);
        const auto blocked = static_cast<size_t>(((i * (c / block) + ch / block) * hw + p) * block + ch % block);
        if (to_blocked)
          y[blocked] = x[plain];
        else
          y[plain] = x[blocked];
      }
  return y;
}

// x (NCHW, shape s) in layout l.
std::vector<float> to_layout(const std::vector<float>& x, const nn::Shape& s, Layout l) {
  const int64_t b = nn::channel_block(l);
  return b == 0 ? x : host_block(x, s.n(), s.c(), s.h() * s.w(), b, true);
}
std::vector<float> from_layout(const std::vector<float>& x, const nn::Shape& s, Layout l) {
  const int64_t b = nn::channel_block(l);
  return b == 0 ? x : host_block(x, s.n(), s.c(), s.h() * s.w(), b, false);
}

nn::Buffer upload(nn::Stream& s, const std::vector<float>& host) {
  nn::Buffer b = be().allocate(std::max<size_t>(host.size(), 1));
  be().copy_from_host(s, b.data(), host.data(), host.size());
  return b;
}

double rel(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  return test::relative_l2(got, want);
}

bool cpu_backend() { return be().name() == "cpu"; }

}  // namespace

TEST_CASE("layout blocked: NCHW to nChw8c and nChw16c and back moves every element where it belongs",
          "[layout][blocked]") {
  if (!cpu_backend()) return;
  auto s = be().create_stream();
  const int64_t n = 2, c = 32, h = 3, w = 5;
  const auto x = test::random_floats(static_cast<size_t>(n * c * h * w), 1);
  for (const Layout l : {Layout::nchw8c, Layout::nchw16c}) {
    INFO(nn::layout_name(l));
    const nn::Buffer a = upload(*s, x);
    nn::Buffer b = be().allocate(x.size()), back = be().allocate(x.size());
    be().permute_layout(*s, nn::DType::f32, a.raw(), Layout::nchw, b.raw(), l, n, c, h, w);
    be().permute_layout(*s, nn::DType::f32, b.raw(), l, back.raw(), Layout::nchw, n, c, h, w);
    CHECK(test::download(be(), b.data(), x.size()) == host_block(x, n, c, h * w, nn::channel_block(l), true));
    CHECK(test::download(be(), back.data(), x.size()) == x);
    // The graph's input: f32 NCHW into f32 blocked in the one call that also converts types.
    nn::Buffer p = be().allocate(x.size());
    be().permute_convert(*s, a.raw(), nn::DType::f32, Layout::nchw, p.raw(), nn::DType::f32, l, n, c, h, w);
    CHECK(test::download(be(), p.data(), x.size()) == test::download(be(), b.data(), x.size()));
  }
  nn::Buffer a = be().allocate(64), b = be().allocate(64);
  // Channels that do not fill whole blocks, a blocked <-> NHWC permutation, and the request
  // Layout::blocked (not a memory order) are refused, not computed wrongly (asynchronous CPU
  // streams report it at the synchronisation).
  const auto permute = [&](Layout from, Layout to, int64_t c, int64_t h, int64_t w) {
    be().permute_layout(*s, nn::DType::f32, a.raw(), from, b.raw(), to, 1, c, h, w);
    be().synchronize(*s);
  };
  CHECK_THROWS_AS(permute(Layout::nchw, Layout::nchw8c, 4, 4, 4), Error);
  CHECK_THROWS_AS(permute(Layout::nhwc, Layout::nchw8c, 8, 2, 4), Error);
  CHECK_THROWS_AS(permute(Layout::nchw, Layout::blocked, 8, 2, 4), Error);
}

TEST_CASE("layout blocked: convolution, pooling and batch-norm plans in blocked layouts compute what NCHW computes",
          "[layout][blocked]") {
  if (!cpu_backend()) return;
  auto s = be().create_stream();
  const double tol = 1e-5;
  struct ConvCase {
    const char* what;
    int64_t c, k;
    Layout in, out;
    bool transposed;
  };
  const ConvCase conv_cases[] = {
      {"nchw8c to nchw8c", 16, 8, Layout::nchw8c, Layout::nchw8c, false},
      {"nchw16c to nchw16c", 16, 32, Layout::nchw16c, Layout::nchw16c, false},
      {"nchw8c to nchw (the logits' 3 channels)", 16, 3, Layout::nchw8c, Layout::nchw, false},
      {"nchw (one input channel) to nchw8c", 1, 16, Layout::nchw, Layout::nchw8c, false},
      {"transposed, nchw8c to nchw8c", 16, 8, Layout::nchw8c, Layout::nchw8c, true},
  };
  for (const ConvCase& cc : conv_cases) {
    INFO("convolution " << cc.what);
    nn::ConvDesc d;
    d.n = 2, d.c = cc.c, d.h = 9, d.w = 8, d.k = cc.k, d.r = 3, d.s = 3, d.pad_h = 1, d.pad_w = 1;
    d.transposed = cc.transposed;
    if (cc.transposed) d.stride_h = d.stride_w = 2, d.out_pad_h = d.out_pad_w = 1;
    const nn::Shape in(d.n, d.c, d.h, d.w), out = d.output();
    const auto xs = test::random_floats(static_cast<size_t>(in.numel()), 2);
    const auto dys = test::random_floats(static_cast<size_t>(out.numel()), 3);
    const auto wv = test::random_floats(static_cast<size_t>(d.weight().numel()), 4, 0.2f);
    const auto bias = test::random_floats(static_cast<size_t>(cc.k), 5, 0.1f);
    const nn::Buffer wb = upload(*s, wv), bb = upload(*s, bias);
    auto run = [&](Layout li, Layout lo) {
      nn::ConvDesc dd = d;
      dd.layout = li;
      if (lo != li) dd.out_layout = lo;
      auto plan = be().make_conv(dd);
      const nn::Buffer x = upload(*s, to_layout(xs, in, li)), dy = upload(*s, to_layout(dys, out, lo));
      nn::Buffer y = be().allocate(dys.size()), dx = be().allocate(xs.size()), dw = be().allocate(wv.size()),
                 db = be().allocate(bias.size());
      plan->forward(*s, x.raw(), wb.data(), bb.data(), y.raw());
      plan->backward_weights(*s, x.raw(), dy.raw(), dw.data(), db.data());
      plan->backward_data(*s, dy.raw(), wb.data(), dx.raw());
      return std::vector<std::vector<float>>{from_layout(test::download(be(), y.data(), dys.size()), out, lo),
                                             from_layout(test::download(be(), dx.data(), xs.size()), in, li),
                                             test::download(be(), dw.data(), wv.size()),
                                             test::download(be(), db.data(), bias.size())};
    };
    const auto want = run(Layout::nchw, Layout::nchw), got = run(cc.in, cc.out);
    const char* names[] = {"y", "dx", "dw", "db"};
    for (size_t i = 0; i < want.size(); ++i) {
      INFO(names[i]);
      CHECK(rel(got[i], want[i]) < tol);
    }
  }

  for (const Layout l : {Layout::nchw8c, Layout::nchw16c}) {
    INFO(nn::layout_name(l));
    for (const nn::PoolKind kind : {nn::PoolKind::max, nn::PoolKind::average}) {
      INFO((kind == nn::PoolKind::max ? "max pooling" : "average pooling"));
      nn::PoolDesc d;
      d.n = 2, d.c = 16, d.h = 8, d.w = 7, d.r = d.s = 3, d.stride_h = d.stride_w = 2, d.pad_h = d.pad_w = 1;
      d.kind = kind;
      const nn::Shape in(d.n, d.c, d.h, d.w), out = d.output();
      const auto xs = test::random_floats(static_cast<size_t>(in.numel()), 6);
      const auto dys = test::random_floats(static_cast<size_t>(out.numel()), 7);
      auto run = [&](Layout ll) {
        nn::PoolDesc dd = d;
        dd.layout = ll;
        auto plan = be().make_pool(dd);
        const nn::Buffer x = upload(*s, to_layout(xs, in, ll)), dy = upload(*s, to_layout(dys, out, ll));
        nn::Buffer y = be().allocate(dys.size()), dx = be().allocate(xs.size());
        plan->forward(*s, x.raw(), y.raw(), true);
        plan->backward(*s, dy.raw(), dx.raw());
        return std::vector<std::vector<float>>{from_layout(test::download(be(), y.data(), dys.size()), out, ll),
                                               from_layout(test::download(be(), dx.data(), xs.size()), in, ll)};
      };
      const auto want = run(Layout::nchw), got = run(l);
      CHECK(rel(got[0], want[0]) < tol);
      CHECK(rel(got[1], want[1]) < tol);
    }

    nn::BatchNormDesc d;
    d.n = 3, d.c = 32, d.h = 5, d.w = 6;
    const nn::Shape in(d.n, d.c, d.h, d.w);
    const auto xs = test::random_floats(static_cast<size_t>(in.numel()), 8);
    const auto dys = test::random_floats(xs.size(), 9);
    const auto gammas = test::random_floats(32, 10), betas = test::random_floats(32, 11);
    auto run_bn = [&](Layout ll) {
      nn::BatchNormDesc dd = d;
      dd.layout = ll;
      auto plan = be().make_batch_norm(dd);
      const nn::Buffer gamma = upload(*s, gammas), beta = upload(*s, betas);
      nn::Buffer rm = be().allocate(32), rv = be().allocate(32), dg = be().allocate(32), dbeta = be().allocate(32);
      be().fill(*s, rm.data(), 32, 0.25f);
      be().fill(*s, rv.data(), 32, 2.0f);
      const nn::Buffer x = upload(*s, to_layout(xs, in, ll)), dy = upload(*s, to_layout(dys, in, ll));
      nn::Buffer y = be().allocate(xs.size()), dx = be().allocate(xs.size()), y_eval = be().allocate(xs.size());
      plan->forward(*s, x.raw(), gamma.data(), beta.data(), rm.data(), rv.data(), y.raw(), true);
      plan->backward(*s, x.raw(), dy.raw(), gamma.data(), dx.raw(), dg.data(), dbeta.data());
      plan->forward(*s, x.raw(), gamma.data(), beta.data(), rm.data(), rv.data(), y_eval.raw(), false);
      return std::vector<std::vector<float>>{
          from_layout(test::download(be(), y.data(), xs.size()), in, ll),
          from_layout(test::download(be(), dx.data(), xs.size()), in, ll),
          test::download(be(), dg.data(), 32),
          test::download(be(), dbeta.data(), 32),
          test::download(be(), rm.data(), 32),
          test::download(be(), rv.data(), 32),
          from_layout(test::download(be(), y_eval.data(), xs.size()), in, ll)};
    };
    const auto want = run_bn(Layout::nchw), got = run_bn(l);
    const char* names[] = {"y", "dx", "dgamma", "dbeta", "running mean", "running variance", "y in eval"};
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("batch norm " << names[i]);
      CHECK(rel(got[i], want[i]) < tol);
    }
    nn::BatchNormDesc odd = d;
    odd.c = 12;  // not whole blocks
    odd.layout = l;
    CHECK_THROWS_AS(be().make_batch_norm(odd), Error);
  }
}

TEST_CASE("layout blocked: every zoo model built blocked computes the NCHW model's logits and gradients",
          "[layout][blocked][isa]") {
  if (!cpu_backend()) return;
  auto s = be().create_stream();
  const int64_t batch = 2;
  std::vector<test::ZooCase> cases = test::small_zoo();
  cases.push_back({"unet", nn::Shape(1, 16, 16, 24), 16});  // the climate U-Net's channels: all but the logits blocked
  for (const auto& c : cases) {
    for (const Layout l : {Layout::nchw8c, Layout::nchw16c, Layout::blocked}) {
      INFO("model " << c.name << " width " << c.width << " in " << nn::layout_name(l));
      const auto x = test::random_floats(static_cast<size_t>(batch * c.sample.numel()), 10);
      std::vector<std::vector<float>> logits, grads;
      int blocked_nodes = 0;
      for (const Layout run : {Layout::nchw, l}) {
        auto g = test::make_zoo_model(c, nn::DType::f32, run);
        g->build(be(), batch, 42);
        // No layer that needs one layout sees two.
        for (int id = 1; id < g->size(); ++id) {
          const nn::Layer* layer = g->node_layer(id);
          if (layer->mixes_layouts() || g->node_shape(id).rank != 4) continue;
          for (int i : g->node_inputs(id))
            if (g->node_shape(i).rank == 4) CHECK(g->node_layout(i) == g->node_layout(id));
        }
        for (int id = 0; id < g->size(); ++id) {
          const int64_t block = nn::channel_block(g->node_layout(id));
          if (block == 0) continue;
          ++blocked_nodes;
          CHECK(g->node_shape(id).c() % block == 0);
        }
        be().copy_from_host(*s, g->input().f32(), x.data(), x.size());
        g->forward(*s, nn::RunMode{});
        const size_t count = static_cast<size_t>(g->output().numel());
        logits.push_back(test::download(be(), g->output().f32(), count));
        be().copy_bytes(*s, g->output_grad().data, g->output().data, g->output().bytes());
        g->backward(*s);
        grads.push_back(test::download(be(), g->grads(), g->param_arena_floats()));
      }
      // Every model has tensors of 16 or more channels somewhere; a resolution that left them
      // all NCHW would not be tested by the comparison below. Layout::blocked resolves to
      // NCHW only on a CPU where oneDNN wants no blocks.
      if (l != Layout::blocked || be().capabilities().blocked_layout_for(nn::DType::f32) != Layout::nchw) CHECK(blocked_nodes > 0);
      CHECK(rel(logits[1], logits[0]) < 1e-4);
      CHECK(rel(grads[1], grads[0]) < 1e-4);
    }
  }
}

TEST_CASE("layout blocked: the backend names the block its convolutions compute in, and reduced precision stays NCHW",
          "[layout][blocked]") {
  if (!cpu_backend()) return;
  const Layout l = be().capabilities().blocked_layout_for(nn::DType::f32);
  CHECK((l == Layout::nchw8c || l == Layout::nchw16c || l == Layout::nchw));
  CHECK(be().capabilities().blocked_layout_for(nn::DType::bf16) == Layout::nchw);
  // A bf16 graph asked for blocked activations keeps them NCHW, and still builds and runs.
  auto g = test::make_zoo_model(test::small_zoo()[2], nn::DType::bf16, Layout::blocked);
  g->build(be(), 2, 1);
  for (int id = 0; id < g->size(); ++id) CHECK(g->node_layout(id) == Layout::nchw);
  nn::ConvDesc d;
  d.layout = Layout::blocked;  // a request, not a memory order: refused by the plan
  CHECK_THROWS_AS(be().make_conv(d), Error);
}
