// Mixed precision (docs/design.md, "Precision"): bf16/f16 activations against the f32
// path on the backend under test, f16's range, the loss scale, a whole model at bf16, and
// fp16 dynamic loss scaling in the learner group (skipped steps, the scale's rule, and
// updates equal to fp32's on the steps that were taken).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "src/core/error.hpp"
#ifndef SQUALL_TEST_GPU
#include "src/cpu/cpu_info.hpp"
#include "tests/support/skip.hpp"
#endif
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using nn::DType;

namespace {

nn::Backend& be() { return test::test_backend(); }

// Unit roundoff of a type: half the distance from 1 to the next value.
double unit_roundoff(DType t) { return t == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

// Backend memory of type t holding `host` rounded to t, and reading it back as f32.
struct Typed {
  nn::Buffer buf;
  DType t = DType::f32;
  size_t n = 0;
};

Typed upload(const std::vector<float>& host, DType t) {
  auto s = be().create_stream();
  nn::Buffer f = be().allocate(std::max<size_t>(host.size(), 1));
  be().copy_from_host(*s, f.data(), host.data(), host.size());
  Typed out{be().allocate(std::max<size_t>(host.size(), 1), t), t, host.size()};
  be().convert(*s, f.raw(), DType::f32, out.buf.raw(), t, host.size());
  be().synchronize(*s);
  return out;
}

Typed empty(size_t n, DType t) { return Typed{be().allocate(std::max<size_t>(n, 1), t), t, n}; }

std::vector<float> read(const Typed& x) {
  auto s = be().create_stream();
  be().synchronize_all();
  nn::Buffer f = be().allocate(std::max<size_t>(x.n, 1));
  be().convert(*s, x.buf.raw(), x.t, f.raw(), DType::f32, x.n);
  std::vector<float> host(x.n);
  be().copy_to_host(*s, host.data(), f.data(), x.n);
  be().synchronize(*s);
  return host;
}

// Values rounded to t (through the backend's conversion).
std::vector<float> rounded(const std::vector<float>& v, DType t) { return read(upload(v, t)); }

// got (of type t) is want (exact, from f32 on t-rounded inputs) rounded to t: within one
// rounding of want, plus the f32 path's own error.
void check_rounded(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, DType t) {
  INFO(what << " at " << nn::dtype_name(t));
  REQUIRE(got.size() == want.size());
  const double u = unit_roundoff(t);
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::abs(double(got[i]) - want[i]) > u * std::abs(want[i]) * 1.01 + 1e-6 * test::slack()) ++bad;
  CHECK(bad == 0);
}

const DType k_types[] = {DType::bf16, DType::f16};

}  // namespace

TEST_CASE("reduced precision: element-wise calls give the f32 result rounded to the type", "[precision]") {
  auto s = be().create_stream();
  for (const DType t : k_types) {
    const size_t n = 1000;
    const auto a = rounded(test::random_floats(n, 1), t), b = rounded(test::random_floats(n, 2), t);
    const Typed ta = upload(a, t), tb = upload(b, t);
    Typed y = empty(n, t);

    be().add(*s, t, ta.buf.raw(), tb.buf.raw(), y.buf.raw(), n);
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    check_rounded("add", read(y), want, t);

    be().multiply(*s, t, ta.buf.raw(), tb.buf.raw(), y.buf.raw(), n);
    for (size_t i = 0; i < n; ++i) want[i] = a[i] * b[i];
    check_rounded("multiply", read(y), want, t);

    be().relu_forward(*s, t, ta.buf.raw(), y.buf.raw(), n);
    for (size_t i = 0; i < n; ++i) want[i] = a[i] > 0 ? a[i] : 0.0f;
    CHECK(read(y) == want);  // exact: no rounding to do

    // Global average pooling over 10 planes of 100 and its backward.
    Typed pooled = empty(10, t), back = empty(n, t);
    be().global_avg_pool_forward(*s, t, ta.buf.raw(), pooled.buf.raw(), 10, 100);
    std::vector<float> mean(10, 0.0f);
    for (size_t i = 0; i < n; ++i) mean[i / 100] += a[i] / 100.0f;
    check_rounded("global_avg_pool", read(pooled), mean, t);
    be().global_avg_pool_backward(*s, t, pooled.buf.raw(), back.buf.raw(), 10, 100);
    const auto pooled_back = read(pooled);
    for (size_t i = 0; i < n; ++i) want[i] = pooled_back[i / 100] / 100.0f;
    check_rounded("global_avg_pool backward", read(back), want, t);

    // A copy moves elements of the type: rows of 7 out of rows of 10, from offset 3.
    Typed c = empty(70, t);
    be().copy_strided(*s, t, c.buf.raw(), 7, 0, ta.buf.raw(), 10, 3, 10, 7);
    const auto copied = read(c);
    for (size_t r = 0; r < 10; ++r)
      for (size_t j = 0; j < 7; ++j) CHECK(copied[r * 7 + j] == a[r * 10 + 3 + j]);
  }
}

TEST_CASE("reduced precision: f16 overflows to infinity where a GPU's would: bf16 has f32's range", "[precision]") {
  auto s = be().create_stream();
  const std::vector<float> big(4, 40000.0f);
  for (const DType t : k_types) {
    const Typed a = upload(big, t);
    Typed y = empty(4, t);
    be().add(*s, t, a.buf.raw(), a.buf.raw(), y.buf.raw(), 4);
    const auto got = read(y);
    if (t == DType::f16) CHECK(std::isinf(got[0]));
    else CHECK(got[0] == Approx(80000.0f).epsilon(unit_roundoff(t)));
  }
}

TEST_CASE("reduced precision: the loss gradient carries the loss scale, the loss does not", "[precision]") {
  auto s = be().create_stream();
  const int64_t n = 8, classes = 5;
  const auto logits = rounded(test::random_floats(static_cast<size_t>(n * classes), 3, 2.0f), DType::f16);
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 3) % classes);
  nn::Buffer label_owner;
  int32_t* dev_labels = be().allocate_labels(labels.size(), label_owner);
  be().copy_labels_from_host(*s, dev_labels, labels.data(), labels.size());
  const Typed x = upload(logits, DType::f16);
  nn::Buffer loss = be().allocate(2), scale = be().allocate(1);
  const float scale_host = 1024.0f;
  be().copy_from_host(*s, scale.data(), &scale_host, 1);
  Typed g1 = empty(logits.size(), DType::f16), g2 = empty(logits.size(), DType::f16);
  be().softmax_cross_entropy(*s, DType::f16, x.buf.raw(), dev_labels, nullptr, n, classes, 1, g1.buf.raw(),
                             loss.data(), nullptr);
  be().softmax_cross_entropy(*s, DType::f16, x.buf.raw(), dev_labels, nullptr, n, classes, 1, g2.buf.raw(),
                             loss.data() + 1, scale.data());
  const auto l = test::download(be(), loss.data(), 2);
  const auto d1 = read(g1), d2 = read(g2);
  CHECK(l[0] == l[1]);
  CHECK(l[0] > 0.1f);
  // The f32 loss on the same (f16-rounded) logits.
  Typed x32 = upload(logits, DType::f32);
  Typed g32 = empty(logits.size(), DType::f32);
  be().softmax_cross_entropy(*s, DType::f32, x32.buf.raw(), dev_labels, nullptr, n, classes, 1, g32.buf.raw(),
                             loss.data(), nullptr);
  const auto l32 = test::download(be(), loss.data(), 1);
  CHECK(l[0] == Approx(l32[0]).epsilon(1e-5 * test::slack()));
  const auto d32 = read(g32);
  check_rounded("dlogits", d1, d32, DType::f16);
  std::vector<float> scaled(d32.size());
  for (size_t i = 0; i < d32.size(); ++i) scaled[i] = d32[i] * scale_host;
  check_rounded("scaled dlogits", d2, scaled, DType::f16);
}

TEST_CASE("reduced precision: convolution, linear, pooling and batch norm plans", "[precision][isa]") {
  // The reference path on the CPU, whatever its ISA (on a CPU with bf16 arithmetic the bf16
  // convolutions would otherwise run on oneDNN's bf16 primitives, whose weight gradients are
  // f32: the next case checks those); the CUDA backend's own on a GPU.
  const test::ReferencePrecision reference(be());
  auto s = be().create_stream();
  for (const DType t : k_types) {
    INFO("type " << nn::dtype_name(t));
    const double tol = 8 * unit_roundoff(t) * test::slack();
    // Convolution, ordinary and transposed: f32 weights, activations of t; against the f32
    // plan on the same rounded activations. dw comes back in f32 but holds values of t (a
    // reduced-type gradient, as cuDNN's from the plan's reduced-type copy of the weights).
    for (const bool transposed : {false, true}) {
      INFO((transposed ? "transposed convolution" : "convolution"));
      nn::ConvDesc d;
      d.n = 2, d.c = 3, d.h = 9, d.w = 9, d.k = 4, d.r = d.s = 3, d.pad_h = d.pad_w = 1;
      d.transposed = transposed;
      if (transposed) d.stride_h = d.stride_w = 2, d.out_pad_h = d.out_pad_w = 1;
      const auto x_count = static_cast<size_t>(d.n * d.c * d.h * d.w);
      const auto y_count = static_cast<size_t>(d.output().numel());
      const auto w_count = static_cast<size_t>(d.weight().numel());
      const auto xs = rounded(test::random_floats(x_count, 4), t);
      const auto w = test::random_floats(w_count, 5, 0.2f), bias = test::random_floats(4, 6, 0.1f);
      const auto dys = rounded(test::random_floats(y_count, 7), t);
      nn::Buffer wb = be().allocate(w_count), bb = be().allocate(4), dw = be().allocate(w_count),
                 db = be().allocate(4);
      be().copy_from_host(*s, wb.data(), w.data(), w_count);
      be().copy_from_host(*s, bb.data(), bias.data(), 4);
      auto run = [&](DType type, std::vector<float>& y, std::vector<float>& dx, std::vector<float>& dwh,
                     std::vector<float>& dbh) {
        nn::ConvDesc dd = d;
        dd.dtype = type;
        auto plan = be().make_conv(dd);
        const Typed x = upload(xs, type), dy = upload(dys, type);
        Typed yt = empty(y_count, type), dxt = empty(x_count, type);
        plan->forward(*s, x.buf.raw(), wb.data(), bb.data(), yt.buf.raw());
        plan->backward_weights(*s, x.buf.raw(), dy.buf.raw(), dw.data(), db.data());
        plan->backward_data(*s, dy.buf.raw(), wb.data(), dxt.buf.raw());
        y = read(yt);
        dx = read(dxt);
        dwh = test::download(be(), dw.data(), w_count);
        dbh = test::download(be(), db.data(), 4);
      };
      std::vector<float> y32, dx32, dw32, db32, y, dx, dwl, dbl;
      run(DType::f32, y32, dx32, dw32, db32);
      run(t, y, dx, dwl, dbl);
      CHECK(test::relative_l2(y, y32) < tol);
      CHECK(test::relative_l2(dx, dx32) < tol);
      CHECK(test::relative_l2(dwl, dw32) < tol);
      CHECK(test::relative_l2(dbl, db32) < tol);
      CHECK(test::relative_l2(y, y32) > 0);  // really computed in t, not in f32
      CHECK(rounded(dwl, t) == dwl);
      CHECK(rounded(dbl, t) == dbl);
    }

    // Linear [6, 10] -> [6, 5].
    nn::LinearDesc ld{6, 10, 5, true};
    const auto lx = rounded(test::random_floats(60, 8), t), ldy = rounded(test::random_floats(30, 9), t);
    const auto lw = test::random_floats(50, 10, 0.3f);
    nn::Buffer lwb = be().allocate(50), lbb = be().allocate(5), ldw = be().allocate(50), ldb = be().allocate(5);
    be().copy_from_host(*s, lwb.data(), lw.data(), 50);
    be().fill(*s, lbb.data(), 5, 0.25f);
    auto run_linear = [&](DType type, std::vector<float>& yo, std::vector<float>& dxo, std::vector<float>& dwo,
                          std::vector<float>& dbo) {
      nn::LinearDesc dd = ld;
      dd.dtype = type;
      auto plan = be().make_linear(dd);
      const Typed x = upload(lx, type), dy = upload(ldy, type);
      Typed yt = empty(30, type), dxt = empty(60, type);
      plan->forward(*s, x.buf.raw(), lwb.data(), lbb.data(), yt.buf.raw());
      plan->backward_weights(*s, x.buf.raw(), dy.buf.raw(), ldw.data(), ldb.data());
      plan->backward_data(*s, dy.buf.raw(), lwb.data(), dxt.buf.raw());
      yo = read(yt);
      dxo = read(dxt);
      dwo = test::download(be(), ldw.data(), 50);
      dbo = test::download(be(), ldb.data(), 5);
    };
    std::vector<float> ly32, ldx32, ldw32, ldb32, ly, ldx, ldwl, ldbl;
    run_linear(DType::f32, ly32, ldx32, ldw32, ldb32);
    run_linear(t, ly, ldx, ldwl, ldbl);
    CHECK(test::relative_l2(ly, ly32) < tol);
    CHECK(test::relative_l2(ldx, ldx32) < tol);
    CHECK(test::relative_l2(ldwl, ldw32) < tol);
    CHECK(test::relative_l2(ldbl, ldb32) < tol);

    // Max pooling 2x2 picks values of t: exact. Batch norm: f32 statistics.
    const auto xs = rounded(test::random_floats(2 * 3 * 81, 4), t);
    nn::PoolDesc pd;
    pd.n = 2, pd.c = 3, pd.h = 8, pd.w = 8;
    auto run_pool = [&](DType type) {
      nn::PoolDesc dd = pd;
      dd.dtype = type;
      auto plan = be().make_pool(dd);
      const Typed x = upload(xs, type);  // the first 384 of xs
      Typed yt = empty(2 * 3 * 16, type);
      plan->forward(*s, x.buf.raw(), yt.buf.raw(), true);
      return read(yt);
    };
    CHECK(run_pool(t) == run_pool(DType::f32));

    nn::BatchNormDesc bd;
    bd.n = 2, bd.c = 3, bd.h = 9, bd.w = 9;
    nn::Buffer gamma = be().allocate(3), beta = be().allocate(3), rm = be().allocate(3), rv = be().allocate(3),
               dg = be().allocate(3), dbeta = be().allocate(3);
    auto run_bn = [&](DType type, std::vector<float>& yo, std::vector<float>& dxo) {
      nn::BatchNormDesc dd = bd;
      dd.dtype = type;
      auto plan = be().make_batch_norm(dd);
      be().fill(*s, gamma.data(), 3, 1.5f);
      be().fill(*s, beta.data(), 3, -0.5f);
      be().fill(*s, rm.data(), 3, 0.0f);
      be().fill(*s, rv.data(), 3, 1.0f);
      const Typed x = upload(xs, type), dy = upload(rounded(test::random_floats(xs.size(), 11), t), type);
      Typed yt = empty(xs.size(), type), dxt = empty(xs.size(), type);
      plan->forward(*s, x.buf.raw(), gamma.data(), beta.data(), rm.data(), rv.data(), yt.buf.raw(), true);
      plan->backward(*s, x.buf.raw(), dy.buf.raw(), gamma.data(), dxt.buf.raw(), dg.data(), dbeta.data());
      yo = read(yt);
      dxo = read(dxt);
    };
    std::vector<float> by32, bdx32, by, bdx;
    run_bn(DType::f32, by32, bdx32);
    run_bn(t, by, bdx);
    CHECK(test::relative_l2(by, by32) < tol);
    CHECK(test::relative_l2(bdx, bdx32) < tol);
  }
}

#ifndef SQUALL_TEST_GPU  // the CPU backend's own choice (this file also runs on the CUDA backend)
TEST_CASE("reduced precision: the CPU's bf16 convolutions run on oneDNN's bf16 primitives where it has bf16 "
          "arithmetic, and agree with the reference",
          "[precision][cpu-only][needs-hardware]") {
  // The choice: f32 always native; bf16 native exactly where oneDNN finds bf16 arithmetic,
  // and never under train.cpu_precision = reference; f16 never (oneDNN 2.6 has none on CPUs).
  CHECK(be().capabilities().native_precision(DType::f32));
  CHECK(be().capabilities().native_precision(DType::bf16) == cpu::dnn_has_bf16());
  CHECK(cpu::dnn_bf16_path() == (cpu::dnn_has_bf16() ? "native" : "reference"));  // what squall info says
  CHECK_FALSE(be().capabilities().native_precision(DType::f16));
  be().set_reference_precision(true);
  CHECK_FALSE(be().capabilities().native_precision(DType::bf16));
  CHECK(be().capabilities().native_precision(DType::f32));
  be().set_reference_precision(false);
  if (!cpu::dnn_has_bf16())
    SQUALL_SKIP("oneDNN runs " << cpu::dnn_isa() << " on " << cpu::cpu_model_name()
                               << ": no bf16 arithmetic (AVX512-BF16 or AMX) to compare with the reference");
  auto s = be().create_stream();
  const DType t = DType::bf16;
  // bf16 products are exact in f32 and both accumulate in f32: the two differ by the order of
  // the sums and by where the outputs are rounded.
  const double tol = 8 * unit_roundoff(t) * test::slack();
  for (const bool transposed : {false, true}) {
    INFO((transposed ? "transposed convolution" : "convolution"));
    nn::ConvDesc d;
    d.n = 2, d.c = 16, d.h = 12, d.w = 10, d.k = 32, d.r = d.s = 3, d.pad_h = d.pad_w = 1, d.dtype = t;
    d.transposed = transposed;
    if (transposed) d.r = d.s = d.stride_h = d.stride_w = 2, d.pad_h = d.pad_w = 0;
    const auto x_count = static_cast<size_t>(d.n * d.c * d.h * d.w);
    const auto y_count = static_cast<size_t>(d.output().numel());
    const auto w_count = static_cast<size_t>(d.weight().numel());
    const auto xs = rounded(test::random_floats(x_count, 4), t);
    const auto dys = rounded(test::random_floats(y_count, 7), t);
    const auto w = test::random_floats(w_count, 5, 0.2f), bias = test::random_floats(static_cast<size_t>(d.k), 6, 0.1f);
    nn::Buffer wb = be().allocate(w_count), bb = be().allocate(static_cast<size_t>(d.k)), dw = be().allocate(w_count),
               db = be().allocate(static_cast<size_t>(d.k));
    be().copy_from_host(*s, wb.data(), w.data(), w_count);
    be().copy_from_host(*s, bb.data(), bias.data(), static_cast<size_t>(d.k));
    std::vector<float> y[2], dx[2], dwh[2], dbh[2];
    for (const bool reference : {true, false}) {
      be().set_reference_precision(reference);
      auto plan = be().make_conv(d);
      be().set_reference_precision(false);
      const Typed x = upload(xs, t), dy = upload(dys, t);
      Typed yt = empty(y_count, t), dxt = empty(x_count, t);
      plan->forward(*s, x.buf.raw(), wb.data(), bb.data(), yt.buf.raw());
      plan->backward_weights(*s, x.buf.raw(), dy.buf.raw(), dw.data(), db.data());
      plan->backward_data(*s, dy.buf.raw(), wb.data(), dxt.buf.raw());
      y[reference] = read(yt);
      dx[reference] = read(dxt);
      dwh[reference] = test::download(be(), dw.data(), w_count);
      dbh[reference] = test::download(be(), db.data(), static_cast<size_t>(d.k));
    }
    CHECK(test::relative_l2(y[0], y[1]) < tol);
    CHECK(test::relative_l2(dx[0], dx[1]) < tol);
    CHECK(test::relative_l2(dwh[0], dwh[1]) < tol);
    CHECK(test::relative_l2(dbh[0], dbh[1]) < tol);
    CHECK(rounded(y[0], t) == y[0]);  // the outputs are bf16 values
    // The weight and bias gradients of the native path stay f32 (the primitives' f32
    // diff_weights and diff_bias, docs/design.md, "Precision"), where the reference rounds them
    // to bf16: of hundreds of sums of bf16 products, some are no bf16 values.
    CHECK(rounded(dwh[1], t) == dwh[1]);
    CHECK(rounded(dwh[0], t) != dwh[0]);
    CHECK(rounded(dbh[0], t) != dbh[0]);
  }
}
#endif

TEST_CASE("reduced precision: LeNet-5 at bf16 computes the f32 model's logits and gradients", "[precision][isa]") {
  // On both paths the backend has at bf16: the reference, pinned, then its own (on the CPU
  // native where it has bf16 arithmetic, the reference again where not). The tolerances
  // hold for both.
  const bool pinned = GENERATE(true, false);
  std::optional<test::ReferencePrecision> reference;
  if (pinned) reference.emplace(be());
  INFO("bf16 path " << (be().capabilities().native_precision(DType::bf16) ? "native" : "reference")
                    << (pinned ? " (pinned)" : " (the backend's own)"));
  auto s = be().create_stream();
  nn::ModelSpec spec;
  spec.name = "lenet5";
  auto make = [&](DType t) {
    auto g = nn::make_model(spec, nn::Shape(1, 1, 28, 28));
    g->set_dtype(t);
    g->build(be(), 8, 42);  // the same seed: the same f32 weights
    return g;
  };
  auto g32 = make(DType::f32), g16 = make(DType::bf16);
  CHECK_THROWS_AS(g16->set_dtype(DType::f16), Error);  // after build: refused
  const auto x = test::random_floats(8 * 28 * 28, 12);
  std::vector<int32_t> labels(8);
  for (int i = 0; i < 8; ++i) labels[static_cast<size_t>(i)] = i % 10;
  nn::Buffer label_owner, loss = be().allocate(1);
  int32_t* dev_labels = be().allocate_labels(8, label_owner);
  be().copy_labels_from_host(*s, dev_labels, labels.data(), 8);
  nn::RunMode mode;
  std::vector<std::vector<float>> logits, grads;
  for (nn::Graph* g : {g32.get(), g16.get()}) {
    CHECK(g->input().dtype == DType::f32);  // the batch goes in as f32 at any precision
    be().copy_from_host(*s, g->input().f32(), x.data(), x.size());
    g->forward(*s, mode);
    be().softmax_cross_entropy(*s, g->dtype(), g->output().data, dev_labels, nullptr, 8, 10, 1,
                               g->output_grad().data, loss.data(), nullptr);
    g->backward(*s);
    logits.push_back(read(Typed{nn::Buffer(g->output().data, 80, g->dtype(), nullptr), g->dtype(), 80}));
    grads.push_back(test::download(be(), g->grads(), g->param_arena_floats()));
  }
  CHECK(g16->output().dtype == DType::bf16);
  CHECK(test::relative_l2(logits[1], logits[0]) < 0.03);
  CHECK(test::relative_l2(logits[1], logits[0]) > 0);
  // The last layer's gradients are a few roundings from f32's. Earlier ones differ more: a
  // ReLU whose input lies within rounding of 0 passes the gradient in one model and not in
  // the other, and with 8 samples one such unit moves a layer's gradient by a few percent
  // (a wrong type or a missing term moves it by 100%).
  const auto& fc3 = g32->param_info()[g32->param_info().size() - 2];
  REQUIRE(fc3.name == "fc3.weight");
  const std::vector<float> a(grads[0].begin() + fc3.offset, grads[0].begin() + fc3.offset + fc3.count),
      b(grads[1].begin() + fc3.offset, grads[1].begin() + fc3.offset + fc3.count);
  CHECK(test::relative_l2(b, a) < 8 * unit_roundoff(DType::bf16) * test::slack());
  CHECK(test::relative_l2(grads[1], grads[0]) < 0.3);
}

TEST_CASE("fp16 loss scaling: overflowing steps are skipped, the scale follows GradScaler's rule, and the "
          "updates taken equal fp32's", "[precision][learners]") {
  const auto algorithm = GENERATE(parallel::Algorithm::ssgd, parallel::Algorithm::sma);
  INFO("algorithm " << parallel::algorithm_name(algorithm));
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  const int64_t b = 4;
  const int L = 2;
  parallel::LearnerGroupOptions o;
  o.algorithm = algorithm;
  o.learners = L;
  o.alpha = 0.2;
  o.momentum = 0.0;
  parallel::LearnerGroupOptions o16 = o;
  o16.precision = DType::f16;
  o16.loss_scaling.dynamic = true;
  o16.loss_scaling.initial = std::ldexp(1.0f, 30);  // dlogits ~ 0.1 x 2^30: far beyond f16's 65504
  o16.loss_scaling.growth_interval = 3;
  parallel::LearnerGroup g32(*backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o, alone);
  parallel::LearnerGroup g16(*backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o16, alone);
  const size_t P = test::k_tiny_arena;
  const auto initial = test::on_host(g16.central_params(), P);

  float expected_scale = o16.loss_scaling.initial;
  int64_t clean_streak = 0, skipped = 0, taken = 0;
  for (int64_t step = 0; step < 40; ++step) {
    const auto before = test::on_host(g16.central_params(), P);
    const test::TinyStep batch = test::tiny_step(0, L, step, b);
    g16.step(batch.inputs, step, 0.1f);
    const bool was_skipped = g16.skipped_steps() > skipped;
    if (was_skipped) {
      ++skipped;
      clean_streak = 0;
      expected_scale /= 2;
      if (algorithm == parallel::Algorithm::ssgd)  // nothing moved
        CHECK(test::on_host(g16.central_params(), P) == before);
    } else {
      ++taken;
      if (++clean_streak == 3) {
        clean_streak = 0;
        expected_scale *= 2;
      }
      g32.step(batch.inputs, step, 0.1f);  // fp32 takes the steps fp16 took
    }
    REQUIRE(g16.loss_scale() == expected_scale);
  }
  // 2^30 -> about 2^16 before the scaled gradients fit in f16.
  CHECK(skipped >= 8);
  CHECK(taken >= 10);
  const auto p16 = test::on_host(g16.central_params(), P), p32 = test::on_host(g32.central_params(), P);
  CHECK(test::relative_l2(p16, initial) > 0.01);  // it trained
  // ssgd: the same updates, up to f16's rounding of activations and gradients (unscaled
  // correctly: an update 2^16 times too large would be far off). (Under sma a skipped step
  // still pulls the replicas towards the centre, so fp32 has no step to match it with.)
  if (algorithm == parallel::Algorithm::ssgd) CHECK(test::relative_l2(p16, p32) < 0.02);
}

