// NHWC activations (docs/design.md, "Layout"): the permutation between the memory orders,
// the convolution, pooling and batch-norm plans in NHWC against NCHW, and whole models built
// in NHWC computing the NCHW model's logits and gradients, at f32 and bf16, on the backend
// under test.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "tests/support/test_backend.hpp"

using namespace squall;
using nn::DType;
using nn::Layout;

namespace {

nn::Backend& be() { return test::test_backend(); }

// [n, c, h, w] from one memory order to the other, on the host (the reference permutation).
std::vector<float> host_permute(const std::vector<float>& x, int64_t n, int64_t c, int64_t h, int64_t w, bool to_nhwc) {
  std::vector<float> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < h * w; ++p) {
        const auto nchw = static_cast<size_t>((i * c + ch) * h * w + p), nhwc = static_cast<size_t>((i * h * w + p) * c + ch);
        if (to_nhwc)
          y[nhwc] = x[nchw];
        else
          y[nchw] = x[nhwc];
      }
  return y;
}
std::vector<float> host_to_nhwc(const std::vector<float>& x, int64_t n, int64_t c, int64_t h, int64_t w) {
  return host_permute(x, n, c, h, w, true);
}
std::vector<float> host_to_nchw(const std::vector<float>& x, int64_t n, int64_t c, int64_t h, int64_t w) {
  return host_permute(x, n, c, h, w, false);
}

// Backend memory of type t holding host (rounded to t), and back to the host as f32.
nn::Buffer upload(nn::Stream& s, const std::vector<float>& host, DType t) {
  nn::Buffer f = be().allocate(std::max<size_t>(host.size(), 1));
  be().copy_from_host(s, f.data(), host.data(), host.size());
  nn::Buffer out = be().allocate(std::max<size_t>(host.size(), 1), t);
  be().convert(s, f.raw(), DType::f32, out.raw(), t, host.size());
  be().synchronize(s);
  return out;
}

std::vector<float> read(nn::Stream& s, const void* p, DType t, size_t n) {
  be().synchronize_all();
  nn::Buffer f = be().allocate(std::max<size_t>(n, 1));
  be().convert(s, p, t, f.raw(), DType::f32, n);
  std::vector<float> host(n);
  be().copy_to_host(s, host.data(), f.data(), n);
  be().synchronize(s);
  return host;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  return test::relative_l2(got, want);
}

// Tolerance for results that differ only in the order of f32 sums (and, at bf16, in where
// a rounding falls): a few roundings of the type.
double tolerance(DType t) { return (t == DType::bf16 ? 8 * std::ldexp(1.0, -8) : 1e-5) * test::slack(); }

}  // namespace

TEST_CASE("layout: permuting NCHW to NHWC and back moves every element where it belongs", "[layout]") {
  auto s = be().create_stream();
  const int64_t n = 2, c = 5, h = 3, w = 7;
  const auto x = test::random_floats(static_cast<size_t>(n * c * h * w), 1);
  for (const DType t : {DType::f32, DType::bf16}) {
    INFO("type " << nn::dtype_name(t));
    const nn::Buffer a = upload(*s, x, t);
    nn::Buffer b = be().allocate(x.size(), t), back = be().allocate(x.size(), t);
    be().permute_layout(*s, t, a.raw(), Layout::nchw, b.raw(), Layout::nhwc, n, c, h, w);
    be().permute_layout(*s, t, b.raw(), Layout::nhwc, back.raw(), Layout::nchw, n, c, h, w);
    const auto rounded = read(*s, a.raw(), t, x.size());
    CHECK(read(*s, b.raw(), t, x.size()) == host_to_nhwc(rounded, n, c, h, w));
    CHECK(read(*s, back.raw(), t, x.size()) == rounded);
  }
  nn::Buffer i32 = be().allocate(4, DType::i32), i32b = be().allocate(4, DType::i32);
  be().permute_layout(*s, DType::i32, i32.raw(), Layout::nchw, i32b.raw(), Layout::nhwc, 1, 2, 1, 2);  // 4 bytes: fine
  CHECK_THROWS_AS((be().permute_layout(*s, DType::f32, i32.raw(), Layout::nchw, i32b.raw(), Layout::nhwc, -1, 2, 1, 2),
                   be().synchronize(*s)),  // asynchronous CPU streams report it here
                  Error);
}

TEST_CASE("layout: convolution, pooling and batch-norm plans in NHWC compute what they compute in NCHW",
          "[layout]") {
  auto s = be().create_stream();
  for (const DType t : {DType::f32, DType::bf16}) {
    INFO("type " << nn::dtype_name(t));
    const double tol = tolerance(t);
    for (const bool transposed : {false, true}) {
      INFO((transposed ? "transposed convolution" : "convolution"));
      nn::ConvDesc d;
      d.n = 2, d.c = 3, d.h = 9, d.w = 8, d.k = 4, d.r = 3, d.s = 3, d.pad_h = 1, d.pad_w = 1;
      d.transposed = transposed;
      if (transposed) d.stride_h = d.stride_w = 2, d.out_pad_h = d.out_pad_w = 1;
      else d.dil_h = 2, d.pad_h = 2;
      d.dtype = t;
      const nn::Shape out = d.output();
      const auto xs = test::random_floats(static_cast<size_t>(d.n * d.c * d.h * d.w), 2);
      const auto dys = test::random_floats(static_cast<size_t>(out.numel()), 3);
      const auto w = test::random_floats(static_cast<size_t>(d.weight().numel()), 4, 0.2f);
      const auto bias = test::random_floats(4, 5, 0.1f);
      nn::Buffer wb = be().allocate(w.size()), bb = be().allocate(4), dw = be().allocate(w.size()), db = be().allocate(4);
      be().copy_from_host(*s, wb.data(), w.data(), w.size());
      be().copy_from_host(*s, bb.data(), bias.data(), 4);
      struct Result {
        std::vector<float> y, dx, dw, db;
      };
      auto run = [&](Layout l) {
        nn::ConvDesc dd = d;
        dd.layout = l;
        auto plan = be().make_conv(dd);
        const bool nhwc = l == Layout::nhwc;
        const nn::Buffer x = upload(*s, nhwc ? host_to_nhwc(xs, d.n, d.c, d.h, d.w) : xs, t);
        const nn::Buffer dy = upload(*s, nhwc ? host_to_nhwc(dys, out.n(), out.c(), out.h(), out.w()) : dys, t);
        nn::Buffer y = be().allocate(dys.size(), t), dx = be().allocate(xs.size(), t);
        plan->forward(*s, x.raw(), wb.data(), bb.data(), y.raw());
        plan->backward_weights(*s, x.raw(), dy.raw(), dw.data(), db.data());
        plan->backward_data(*s, dy.raw(), wb.data(), dx.raw());
        Result r{read(*s, y.raw(), t, dys.size()), read(*s, dx.raw(), t, xs.size()),
                 test::download(be(), dw.data(), w.size()), test::download(be(), db.data(), 4)};
        if (nhwc) {
          r.y = host_to_nchw(r.y, out.n(), out.c(), out.h(), out.w());
          r.dx = host_to_nchw(r.dx, d.n, d.c, d.h, d.w);
        }
        return r;
      };
      const Result a = run(Layout::nchw), b = run(Layout::nhwc);
      CHECK(rel_error(b.y, a.y) < tol);
      CHECK(rel_error(b.dx, a.dx) < tol);
      CHECK(rel_error(b.dw, a.dw) < tol);  // weights and their gradient are [k, c, r, s] in both
      CHECK(rel_error(b.db, a.db) < tol);
    }

    for (const nn::PoolKind kind : {nn::PoolKind::max, nn::PoolKind::average}) {
      INFO((kind == nn::PoolKind::max ? "max pooling" : "average pooling"));
      nn::PoolDesc d;
      d.n = 2, d.c = 3, d.h = 8, d.w = 7, d.r = d.s = 3, d.stride_h = d.stride_w = 2, d.pad_h = d.pad_w = 1;
      d.kind = kind;
      d.dtype = t;
      const nn::Shape out = d.output();
      const auto xs = test::random_floats(static_cast<size_t>(d.n * d.c * d.h * d.w), 6);
      const auto dys = test::random_floats(static_cast<size_t>(out.numel()), 7);
      auto run = [&](Layout l, std::vector<float>& y, std::vector<float>& dx) {
        nn::PoolDesc dd = d;
        dd.layout = l;
        auto plan = be().make_pool(dd);
        const bool nhwc = l == Layout::nhwc;
        const nn::Buffer x = upload(*s, nhwc ? host_to_nhwc(xs, d.n, d.c, d.h, d.w) : xs, t);
        const nn::Buffer dy = upload(*s, nhwc ? host_to_nhwc(dys, out.n(), out.c(), out.h(), out.w()) : dys, t);
        nn::Buffer yb = be().allocate(dys.size(), t), dxb = be().allocate(xs.size(), t);
        plan->forward(*s, x.raw(), yb.raw(), true);
        plan->backward(*s, dy.raw(), dxb.raw());
        y = read(*s, yb.raw(), t, dys.size());
        dx = read(*s, dxb.raw(), t, xs.size());
        if (nhwc) {
          y = host_to_nchw(y, out.n(), out.c(), out.h(), out.w());
          dx = host_to_nchw(dx, d.n, d.c, d.h, d.w);
        }
      };
      std::vector<float> y1, dx1, y2, dx2;
      run(Layout::nchw, y1, dx1);
      run(Layout::nhwc, y2, dx2);
      CHECK(rel_error(y2, y1) < tol);
      CHECK(rel_error(dx2, dx1) < tol);
    }

    nn::BatchNormDesc d;
    d.n = 3, d.c = 4, d.h = 5, d.w = 6;
    d.dtype = t;
    const auto xs = test::random_floats(static_cast<size_t>(d.n * d.c * d.h * d.w), 8);
    const auto dys = test::random_floats(xs.size(), 9);
    nn::Buffer gamma = be().allocate(4), beta = be().allocate(4), rm = be().allocate(4), rv = be().allocate(4),
               dg = be().allocate(4), dbeta = be().allocate(4);
    auto run_bn = [&](Layout l) {
      nn::BatchNormDesc dd = d;
      dd.layout = l;
      auto plan = be().make_batch_norm(dd);
      be().fill(*s, gamma.data(), 4, 1.5f);
      be().fill(*s, beta.data(), 4, -0.5f);
      be().fill(*s, rm.data(), 4, 0.0f);
      be().fill(*s, rv.data(), 4, 1.0f);
      const bool nhwc = l == Layout::nhwc;
      const nn::Buffer x = upload(*s, nhwc ? host_to_nhwc(xs, d.n, d.c, d.h, d.w) : xs, t);
      const nn::Buffer dy = upload(*s, nhwc ? host_to_nhwc(dys, d.n, d.c, d.h, d.w) : dys, t);
      nn::Buffer y = be().allocate(xs.size(), t), dx = be().allocate(xs.size(), t);
      plan->forward(*s, x.raw(), gamma.data(), beta.data(), rm.data(), rv.data(), y.raw(), true);
      plan->backward(*s, x.raw(), dy.raw(), gamma.data(), dx.raw(), dg.data(), dbeta.data());
      std::vector<std::vector<float>> r{read(*s, y.raw(), t, xs.size()), read(*s, dx.raw(), t, xs.size()),
                                        test::download(be(), dg.data(), 4), test::download(be(), rv.data(), 4)};
      if (nhwc) {
        r[0] = host_to_nchw(r[0], d.n, d.c, d.h, d.w);
        r[1] = host_to_nchw(r[1], d.n, d.c, d.h, d.w);
      }
      return r;
    };
    const auto bn1 = run_bn(Layout::nchw), bn2 = run_bn(Layout::nhwc);
    const char* names[] = {"batch norm y", "batch norm dx", "batch norm dgamma", "batch norm running variance"};
    for (size_t i = 0; i < bn1.size(); ++i) {
      INFO(names[i]);
      CHECK(rel_error(bn2[i], bn1[i]) < tol);
    }
  }
}

TEST_CASE("layout: models built in NHWC compute the NCHW model's logits and gradients", "[layout]") {
  auto s = be().create_stream();
  struct Case {
    nn::ModelSpec spec;
    nn::Shape sample;
  };
  std::vector<Case> cases;
  {
    nn::ModelSpec lenet;
    lenet.name = "lenet5";  // conv, pooling, flatten into linear layers
    cases.push_back({lenet, nn::Shape(1, 1, 28, 28)});
    nn::ModelSpec deeplab;  // conv, batch norm, concat, global pooling, bilinear, 4-D logits
    deeplab.name = "deeplabv3plus";
    deeplab.classes = 3;
    deeplab.width = 4;
    cases.push_back({deeplab, nn::Shape(1, 4, 32, 48)});
  }
  const int64_t batch = 2;
  for (const auto& c : cases) {
    INFO("model " << c.spec.name);
    for (const DType t : {DType::f32, DType::bf16}) {
      INFO("type " << nn::dtype_name(t));
      const auto x = test::random_floats(static_cast<size_t>(batch * c.sample.numel()), 10);
      std::vector<std::vector<float>> logits, grads;
      for (const Layout l : {Layout::nchw, Layout::nhwc}) {
        auto g = nn::make_model(c.spec, c.sample);
        g->set_dtype(t);
        g->set_layout(l);
        g->build(be(), batch, 42);
        CHECK(g->input().dtype == DType::f32);
        be().copy_from_host(*s, g->input().f32(), x.data(), x.size());
        g->forward(*s, nn::RunMode{});
        const size_t count = static_cast<size_t>(g->output().numel());
        logits.push_back(read(*s, g->output().data, t, count));
        // A gradient that depends on the position: d(loss)/d(logits) = the logits themselves.
        be().copy_bytes(*s, g->output_grad().data, g->output().data, g->output().bytes());
        g->backward(*s);
        grads.push_back(test::download(be(), g->grads(), g->param_arena_floats()));
      }
      const double tol = t == DType::bf16 ? 0.05 : 1e-4 * test::slack();  // bf16: roundings through a deep model
      CHECK(rel_error(logits[1], logits[0]) < tol);
      CHECK(rel_error(grads[1], grads[0]) < tol);
    }
  }
  auto g = nn::make_model(cases[0].spec, cases[0].sample);
  g->build(be(), 1, 1);
  CHECK_THROWS_AS(g->set_layout(Layout::nhwc), Error);  // after build: refused
}
