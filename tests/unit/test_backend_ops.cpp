// The backend under test (tests/support/test_backend.hpp: the CPU here, the CUDA backend in
// squall_gpu_tests) against naive double-precision references written here as plain loops:
// every op forward and backward, on small odd shapes that exercise strides, padding,
// dilation and the transposed convolution's output padding.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "tests/support/test_backend.hpp"

using namespace squall::nn;
namespace nn = squall::nn;
namespace cpu = squall::cpu;

namespace {

// The CPU backend's own single-range updates (the fused ones are built from them), on the
// backend under test: the cases that call them are [cpu-only].
cpu::CpuBackend& cpu_steps() { return dynamic_cast<cpu::CpuBackend&>(squall::test::test_backend()); }

using Vec = std::vector<float>;
using DVec = std::vector<double>;

Backend& backend() { return squall::test::test_backend(); }

Stream& stream() {
  static Stream* s = backend().create_stream().release();  // never destroyed: see test_backend()
  return *s;
}

Vec random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Largest |got - want| / (1 + |want|): relative for large values, absolute near zero.
double max_error(const Vec& got, const DVec& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::abs(want[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;  // NaN must fail, not pass
  }
  return worst;
}

DVec to_double(const Vec& v) { return DVec(v.begin(), v.end()); }

// Backend memory holding a copy of host data (the CPU backend's memory is host memory, but
// the tests go through the interface all the same).
struct DeviceVec {
  Buffer buf;
  size_t n = 0;
  explicit DeviceVec(size_t count) : buf(backend().allocate(count)), n(count) {}
  explicit DeviceVec(const Vec& host) : DeviceVec(host.size()) {
    backend().copy_from_host(stream(), buf.data(), host.data(), n);
  }
  float* data() const { return buf.data(); }
  Vec host() const {
    Vec v(n);
    backend().synchronize(stream());
    backend().copy_to_host(stream(), v.data(), buf.data(), n);
    return v;
  }
};

const double kTol = 1e-4 * squall::test::slack();

}  // namespace

// ---- memory --------------------------------------------------------------------------------

TEST_CASE("backend allocates memory and copies", "[cpu]") {
  CHECK(backend().name() == (squall::test::k_testing_gpu ? "cuda" : "cpu"));
  CHECK(backend().info().backend == backend().name());
  for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}}) {
    Buffer b = backend().allocate(n);
    CHECK(b.count() == n);
    REQUIRE(b.data() != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
  }
  const Vec src = random_vec(123, 1);
  DeviceVec a(src), c(src.size());
  backend().copy(stream(), c.data(), a.data(), src.size());
  CHECK(c.host() == src);

  Buffer owner;
  int32_t* labels = backend().allocate_labels(5, owner);
  const std::vector<int32_t> in{3, -1, 0, 7, 2};
  std::vector<int32_t> out(5, 99);
  backend().copy_labels_from_host(stream(), labels, in.data(), 5);
  backend().copy_labels_to_host(stream(), out.data(), labels, 5);
  backend().synchronize(stream());
  CHECK(out == in);
}

// ---- element-wise -------------------------------------------------------------------------

TEST_CASE("backend: element-wise ops match the reference", "[cpu]") {
  // Both sizes: below and above the serial/parallel threshold.
  for (size_t n : {size_t{37}, size_t{40001}}) {
    const Vec a = random_vec(n, 2), b = random_vec(n, 3);
    DeviceVec da(a), db(b), dy(n);
    DVec want(n);

    backend().fill(stream(), dy.data(), n, 2.5f);
    for (auto& x : want) x = 2.5;
    CHECK(max_error(dy.host(), want) == 0.0);

    nn::relu_forward(backend(), stream(), da.data(), dy.data(), n);
    for (size_t i = 0; i < n; ++i) want[i] = std::max(0.0, double(a[i]));
    CHECK(max_error(dy.host(), want) == 0.0);

    DeviceVec dx(n);
    nn::relu_backward(backend(), stream(), dy.data(), db.data(), dx.data(), n);
    for (size_t i = 0; i < n; ++i) want[i] = a[i] > 0 ? b[i] : 0.0;
    CHECK(max_error(dx.host(), want) == 0.0);

    nn::add(backend(), stream(), da.data(), db.data(), dy.data(), n);
    for (size_t i = 0; i < n; ++i) want[i] = double(a[i]) + b[i];
    CHECK(max_error(dy.host(), want) < 1e-6);

    nn::multiply(backend(), stream(), da.data(), db.data(), dy.data(), n);
    for (size_t i = 0; i < n; ++i) want[i] = double(a[i]) * b[i];
    CHECK(max_error(dy.host(), want) < 1e-6);

    backend().copy(stream(), dy.data(), db.data(), n);
    backend().axpy(stream(), -0.75f, da.data(), dy.data(), n);
    for (size_t i = 0; i < n; ++i) want[i] = b[i] - 0.75 * a[i];
    CHECK(max_error(dy.host(), want) < 1e-6);

    backend().scale(stream(), 3.0f, dy.data(), n);
    for (size_t i = 0; i < n; ++i) want[i] *= 3.0;
    CHECK(max_error(dy.host(), want) < 1e-6);

    double ss = 0;
    for (float x : a) ss += double(x) * x;
    DeviceVec out(1);
    backend().sum_squares(stream(), da.data(), n, out.data());
    CHECK(out.host()[0] == Approx(ss).epsilon(1e-6));
  }
}

TEST_CASE("backend: dropout draws a reproducible, counter-based mask", "[cpu]") {
  const size_t n = 50001;
  const float p = 0.3f;
  const Vec x = random_vec(n, 4);
  DeviceVec dx(x), y(n), mask(n), y2(n), mask2(n);
  nn::dropout_forward(backend(), stream(), dx.data(), y.data(), mask.data(), n, p, 1234, 100);
  const Vec m = mask.host(), yy = y.host();
  size_t dropped = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool ok = m[i] == 0.0f || std::abs(m[i] - 1.0f / (1.0f - p)) < 1e-6f;
    if (!ok) FAIL("mask value " << m[i] << " at " << i);
    dropped += m[i] == 0.0f;
    if (yy[i] != x[i] * m[i]) FAIL("y != x * mask at " << i);
  }
  CHECK(std::abs(double(dropped) / n - p) < 0.01);
  // Element i of offset 100 is element i - 10 of offset 110: the counter is offset + i.
  nn::dropout_forward(backend(), stream(), dx.data(), y2.data(), mask2.data(), n, p, 1234, 110);
  const Vec m2 = mask2.host();
  for (size_t i = 0; i + 10 < n; ++i)
    if (m2[i] != m[i + 10]) FAIL("mask not counter-based at " << i);
  // Another seed gives another mask.
  nn::dropout_forward(backend(), stream(), dx.data(), y2.data(), mask2.data(), n, p, 1235, 100);
  CHECK(mask2.host() != m);
  // p = 0 keeps everything unscaled.
  nn::dropout_forward(backend(), stream(), dx.data(), y2.data(), mask2.data(), n, 0.0f, 1, 0);
  CHECK(y2.host() == x);
  // The error comes with the call, or (asynchronous CPU streams) with the next synchronize.
  CHECK_THROWS_AS((nn::dropout_forward(backend(), stream(), dx.data(), y2.data(), mask2.data(), n, 1.5f, 1, 0),
                   backend().synchronize(stream())),
                  squall::Error);
}

TEST_CASE("backend: copy_strided and global average pooling", "[cpu]") {
  const int64_t rows = 3, src_stride = 7, dst_stride = 11, count = 4;
  const Vec src = random_vec(rows * src_stride, 5);
  Vec dst0 = random_vec(rows * dst_stride, 6);
  DeviceVec ds(src), dd(dst0);
  nn::copy_strided(backend(), stream(), dd.data(), dst_stride, 5, ds.data(), src_stride, 2, rows, count);
  DVec want = to_double(dst0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < count; ++j) want[i * dst_stride + 5 + j] = src[i * src_stride + 2 + j];
  CHECK(max_error(dd.host(), want) == 0.0);

  const int64_t nc = 6, hw = 35;
  const Vec x = random_vec(nc * hw, 7), dy = random_vec(nc, 8);
  DeviceVec dx_(x), y(nc), ddy(dy), dxg(nc * hw);
  nn::global_avg_pool_forward(backend(), stream(), dx_.data(), y.data(), nc, hw);
  DVec wy(nc, 0.0), wdx(nc * hw);
  for (int64_t i = 0; i < nc; ++i) {
    for (int64_t j = 0; j < hw; ++j) wy[i] += x[i * hw + j];
    wy[i] /= hw;
    for (int64_t j = 0; j < hw; ++j) wdx[i * hw + j] = dy[i] / double(hw);
  }
  CHECK(max_error(y.host(), wy) < kTol);
  nn::global_avg_pool_backward(backend(), stream(), ddy.data(), dxg.data(), nc, hw);
  CHECK(max_error(dxg.host(), wdx) < kTol);
}

namespace {

// PyTorch's F.interpolate(mode='bilinear', align_corners=False), written from its definition.
DVec bilinear_ref(const DVec& x, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  DVec y(nc * oh * ow);
  auto src = [](int64_t d, int64_t in, int64_t out, int64_t& i0, int64_t& i1, double& l1) {
    double s = (d + 0.5) * double(in) / double(out) - 0.5;
    if (s < 0) s = 0;
    i0 = static_cast<int64_t>(std::floor(s));
    if (i0 > in - 1) i0 = in - 1;
    i1 = std::min(i0 + 1, in - 1);
    l1 = s - i0;
  };
  for (int64_t p = 0; p < nc; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t y0, y1, x0, x1;
        double ly, lx;
        src(oy, h, oh, y0, y1, ly);
        src(ox, w, ow, x0, x1, lx);
        const double* a = x.data() + p * h * w;
        y[(p * oh + oy) * ow + ox] = (1 - ly) * ((1 - lx) * a[y0 * w + x0] + lx * a[y0 * w + x1]) +
                                     ly * ((1 - lx) * a[y1 * w + x0] + lx * a[y1 * w + x1]);
      }
  return y;
}

}  // namespace

TEST_CASE("backend: bilinear resize matches PyTorch's align_corners=false, forward and backward", "[cpu]") {
  struct Case { int64_t nc, h, w, oh, ow; };
  for (const Case c : {Case{6, 5, 4, 11, 9}, Case{3, 9, 7, 4, 3}, Case{2, 3, 5, 3, 5}, Case{2, 4, 4, 8, 8}}) {
    const Vec x = random_vec(c.nc * c.h * c.w, 9);
    const Vec dy = random_vec(c.nc * c.oh * c.ow, 10);
    DeviceVec dx_(x), y(dy.size()), ddy(dy), dxg(x.size());
    nn::bilinear_forward(backend(), stream(), dx_.data(), y.data(), c.nc, c.h, c.w, c.oh, c.ow);
    CHECK(max_error(y.host(), bilinear_ref(to_double(x), c.nc, c.h, c.w, c.oh, c.ow)) < kTol);
    // The reference backward: the forward is linear, so dx_i = <dy, forward(e_i)>.
    DVec want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      DVec e(x.size(), 0.0);
      e[i] = 1.0;
      const DVec col = bilinear_ref(e, c.nc, c.h, c.w, c.oh, c.ow);
      for (size_t j = 0; j < col.size(); ++j) want[i] += col[j] * dy[j];
    }
    nn::bilinear_backward(backend(), stream(), ddy.data(), dxg.data(), c.nc, c.h, c.w, c.oh, c.ow);
    CHECK(max_error(dxg.host(), want) < kTol);
  }
}

// ---- loss ---------------------------------------------------------------------------------

namespace {

// torch.nn.CrossEntropyLoss(weight, reduction='mean') with negative labels ignored.
double ce_ref(const DVec& x, const std::vector<int32_t>& labels, const float* weights, int64_t n, int64_t k,
              int64_t hw, DVec* grad) {
  double total = 0, wsum = 0;
  if (grad) grad->assign(x.size(), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p) {
      const int32_t l = labels[i * hw + p];
      if (l < 0) continue;
      double mx = -INFINITY, s = 0;
      for (int64_t c = 0; c < k; ++c) mx = std::max(mx, x[(i * k + c) * hw + p]);
      for (int64_t c = 0; c < k; ++c) s += std::exp(x[(i * k + c) * hw + p] - mx);
      const double wt = weights ? weights[l] : 1.0;
      total += wt * (std::log(s) + mx - x[(i * k + l) * hw + p]);
      wsum += wt;
      if (grad)
        for (int64_t c = 0; c < k; ++c)
          (*grad)[(i * k + c) * hw + p] = wt * (std::exp(x[(i * k + c) * hw + p] - mx) / s - (c == l));
    }
  if (grad)
    for (auto& g : *grad) g /= wsum;
  return total / wsum;
}

}  // namespace

TEST_CASE("backend: softmax cross-entropy with class weights and ignored labels", "[cpu]") {
  struct Case { int64_t n, k, hw; bool weighted; };
  for (const Case c : {Case{5, 7, 1, false}, Case{5, 7, 1, true}, Case{2, 3, 35, true}, Case{3, 4, 6000, false}}) {
    const Vec x = random_vec(c.n * c.k * c.hw, 11, -4.0f, 4.0f);
    std::mt19937 gen(12);
    std::vector<int32_t> labels(c.n * c.hw);
    for (auto& l : labels) l = static_cast<int32_t>(gen() % (c.k + 1)) - 1;  // about 1 in k+1 ignored
    labels[0] = -1;
    labels[1] = 1;
    const Vec weights = random_vec(c.k, 13, 0.2f, 2.0f);
    const float* w = c.weighted ? weights.data() : nullptr;
    DeviceVec dx_(x), dw(weights), grad(x.size());
    Buffer lab_owner;
    int32_t* dl = backend().allocate_labels(labels.size(), lab_owner);
    backend().copy_labels_from_host(stream(), dl, labels.data(), labels.size());
    DeviceVec loss_d(1);
    nn::softmax_cross_entropy(backend(), stream(), dx_.data(), dl, c.weighted ? dw.data() : nullptr, c.n, c.k, c.hw,
                                    grad.data(), loss_d.data());
    const float loss = loss_d.host()[0];  // the loss stays in backend memory until read
    DVec want_grad;
    const DVec xd = to_double(x);
    const double want = ce_ref(xd, labels, w, c.n, c.k, c.hw, &want_grad);
    CHECK(loss == Approx(want).epsilon(kTol));
    CHECK(max_error(grad.host(), want_grad) < kTol);
    // The reference gradient itself against central differences of the reference loss.
    for (size_t j : {size_t{0}, size_t{3}, x.size() / 2, x.size() - 1}) {
      DVec xp = xd, xm = xd;
      xp[j] += 1e-5;
      xm[j] -= 1e-5;
      const double fd = (ce_ref(xp, labels, w, c.n, c.k, c.hw, nullptr) - ce_ref(xm, labels, w, c.n, c.k, c.hw, nullptr)) / 2e-5;
      CHECK(fd == Approx(want_grad[j]).margin(1e-7).epsilon(1e-4));
    }
  }
}

TEST_CASE("cpu softmax cross-entropy rejects labels out of range", "[cpu][cpu-only]") {
  DeviceVec x(Vec{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}), grad(6);
  Buffer owner;
  int32_t* dl = backend().allocate_labels(2, owner);
  const std::vector<int32_t> labels{1, 3};
  backend().copy_labels_from_host(stream(), dl, labels.data(), 2);
  DeviceVec loss(1);
  // Inline, the call throws; on asynchronous streams, the next synchronize.
  CHECK_THROWS_WITH((nn::softmax_cross_entropy(backend(), stream(), x.data(), dl, nullptr, 2, 3, 1, grad.data(), loss.data()),
                     backend().synchronize(stream())),
                    Catch::Contains("label 3"));
}

TEST_CASE("backend: argmax over channels", "[cpu]") {
  const int64_t n = 2, c = 5, hw = 13;
  const Vec x = random_vec(n * c * hw, 14);
  DeviceVec dx_(x);
  Buffer owner;
  int32_t* out = backend().allocate_labels(n * hw, owner);
  nn::argmax_channels(backend(), stream(), dx_.data(), out, n, c, hw);
  std::vector<int32_t> got(n * hw);
  backend().copy_labels_to_host(stream(), got.data(), out, got.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p) {
      int32_t best = 0;
      for (int64_t k = 1; k < c; ++k)
        if (x[(i * c + k) * hw + p] > x[(i * c + best) * hw + p]) best = static_cast<int32_t>(k);
      CHECK(got[i * hw + p] == best);
    }
}

// ---- optimizers ---------------------------------------------------------------------------

TEST_CASE("backend: the CPU's sgd_step follows torch.optim.SGD", "[cpu][cpu-only]") {
  struct Case { float momentum, wd; bool nesterov; };
  const size_t n = 101;
  for (const Case c : {Case{0.0f, 0.0f, false}, Case{0.9f, 0.0f, false}, Case{0.9f, 1e-2f, false},
                       Case{0.9f, 1e-2f, true}, Case{0.0f, 5e-2f, false}}) {
    const float lr = 0.05f;
    const Vec w0 = random_vec(n, 15);
    DeviceVec w(w0), v(n);
    backend().fill(stream(), v.data(), n, 0.0f);
    DVec rw = to_double(w0), rv(n, 0.0);
    for (int step = 0; step < 4; ++step) {
      const Vec g = random_vec(n, 100 + step);
      DeviceVec dg(g);
      cpu_steps().sgd_step(stream(), w.data(), dg.data(), v.data(), n, lr, c.momentum, c.wd, c.nesterov);
      for (size_t i = 0; i < n; ++i) {
        // torch.optim.SGD, dampening 0: the first step sets buf = d_p.
        double dp = g[i] + c.wd * rw[i];
        if (c.momentum != 0) {
          rv[i] = step == 0 ? dp : c.momentum * rv[i] + dp;
          dp = c.nesterov ? dp + c.momentum * rv[i] : rv[i];
        }
        rw[i] -= lr * dp;
      }
    }
    CHECK(max_error(w.host(), rw) < 1e-5);
  }
}

namespace {

struct AdamRef {
  DVec w, m, v;
  // One step of torch.optim.Adam (decoupled=false) or AdamW (decoupled=true); returns the
  // direction u (+ wd w for decoupled) that LAMB would receive.
  DVec step(const Vec& g, double lr, double b1, double b2, double eps, double wd, bool decoupled, int t, bool apply) {
    DVec u(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      double gi = g[i];
      if (!decoupled) gi += wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      const double d = mh / (std::sqrt(vh) + eps);
      u[i] = d + (decoupled ? wd * w[i] : 0.0);
      if (apply) {
        if (decoupled) w[i] *= 1 - lr * wd;  // AdamW decays first, then steps
        w[i] -= lr * d;
      }
    }
    return u;
  }
};

}  // namespace

TEST_CASE("backend: the CPU's adam_step follows torch.optim.Adam, AdamW and the LAMB direction", "[cpu][cpu-only]") {
  const size_t n = 77;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  struct Case { float wd; bool decoupled; bool apply; };
  for (const Case c : {Case{0.0f, false, true}, Case{0.1f, false, true}, Case{0.1f, true, true},
                       Case{0.1f, true, false}}) {
    const Vec w0 = random_vec(n, 16);
    DeviceVec w(w0), m(n), v(n), u(n);
    backend().fill(stream(), m.data(), n, 0.0f);
    backend().fill(stream(), v.data(), n, 0.0f);
    AdamRef ref{to_double(w0), DVec(n, 0.0), DVec(n, 0.0)};
    DVec want_u;
    for (int t = 1; t <= 5; ++t) {
      const Vec g = random_vec(n, 200 + t, -0.1f, 0.1f);
      DeviceVec dg(g);
      cpu_steps().adam_step(stream(), w.data(), dg.data(), m.data(), v.data(), u.data(), n, lr, b1, b2, eps, c.wd,
                          c.decoupled, t, c.apply);
      want_u = ref.step(g, lr, b1, b2, eps, c.wd, c.decoupled, t, c.apply);
    }
    CHECK(max_error(w.host(), ref.w) < 1e-5);
    CHECK(max_error(m.host(), ref.m) < 1e-5);
    CHECK(max_error(v.host(), ref.v) < 1e-6);
    if (!c.apply) {
      CHECK(w.host() == w0);  // LAMB's direction leaves the weights alone
      CHECK(max_error(u.host(), want_u) < 1e-4);
    }
  }
}

// ---- convolution ----------------------------------------------------------------------------

namespace {

// Calls fn(x_index, w_index, y_index) for every multiply of the convolution: the same list
// of taps gives the forward and both backward passes, each from its definition.
void for_each_tap(const ConvDesc& d, const std::function<void(size_t, size_t, size_t)>& fn) {
  const Shape out = d.output();
  const int64_t p = out.h(), q = out.w();
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t k = 0; k < d.k; ++k)
        for (int64_t r = 0; r < d.r; ++r)
          for (int64_t s = 0; s < d.s; ++s) {
            const size_t wi = d.transposed ? ((c * d.k + k) * d.r + r) * d.s + s : ((k * d.c + c) * d.r + r) * d.s + s;
            if (!d.transposed) {
              for (int64_t oy = 0; oy < p; ++oy)
                for (int64_t ox = 0; ox < q; ++ox) {
                  const int64_t iy = oy * d.stride_h - d.pad_h + r * d.dil_h;
                  const int64_t ix = ox * d.stride_w - d.pad_w + s * d.dil_w;
                  if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
                  fn(((n * d.c + c) * d.h + iy) * d.w + ix, wi, ((n * d.k + k) * p + oy) * q + ox);
                }
            } else {
              // Transposed: input pixel (iy, ix) spreads to oy = iy * stride - pad + r * dil.
              for (int64_t iy = 0; iy < d.h; ++iy)
                for (int64_t ix = 0; ix < d.w; ++ix) {
                  const int64_t oy = iy * d.stride_h - d.pad_h + r * d.dil_h;
                  const int64_t ox = ix * d.stride_w - d.pad_w + s * d.dil_w;
                  if (oy < 0 || oy >= p || ox < 0 || ox >= q) continue;
                  fn(((n * d.c + c) * d.h + iy) * d.w + ix, wi, ((n * d.k + k) * p + oy) * q + ox);
                }
            }
          }
}

}  // namespace

TEST_CASE("backend: convolution and transposed convolution, forward and backward", "[cpu]") {
  auto conv = [](int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s, int64_t stride,
                 int64_t pad, int64_t dil, bool bias, bool transposed, int64_t out_pad) {
    ConvDesc d;
    d.n = n, d.c = c, d.h = h, d.w = w, d.k = k, d.r = r, d.s = s;
    d.stride_h = d.stride_w = stride;
    d.pad_h = d.pad_w = pad;
    d.dil_h = d.dil_w = dil;
    d.bias = bias;
    d.transposed = transposed;
    d.out_pad_h = d.out_pad_w = out_pad;
    return d;
  };
  std::vector<ConvDesc> cases{
      conv(2, 3, 7, 5, 4, 3, 3, 2, 1, 1, true, false, 0),   // stride 2, padding 1
      conv(2, 3, 7, 5, 4, 3, 2, 1, 2, 2, false, false, 0),  // dilation 2, rectangular kernel
      conv(2, 3, 8, 6, 5, 1, 1, 2, 0, 1, true, false, 0),   // 1x1 stride 2 (drops a column)
      conv(2, 3, 4, 3, 2, 3, 3, 2, 1, 1, true, true, 1),    // transposed, output padding 1
      conv(1, 2, 3, 5, 3, 3, 3, 3, 2, 2, false, true, 1),   // transposed, stride 3, dilation 2
      conv(2, 3, 5, 4, 2, 2, 2, 2, 0, 1, true, true, 0),    // transposed 2x2 upsampling
  };
  // Anisotropic case: different strides and paddings per axis.
  ConvDesc an = conv(2, 3, 9, 6, 4, 3, 2, 1, 1, 1, true, false, 0);
  an.stride_h = 2, an.pad_w = 0, an.dil_w = 2;
  cases.push_back(an);

  uint32_t seed = 20;
  for (const ConvDesc& d : cases) {
    CAPTURE(d.transposed, d.h, d.w, d.r, d.s, d.stride_h, d.pad_h, d.dil_h, d.out_pad_h, d.bias);
    const Shape ys = d.output(), ws = d.weight();
    const Vec x = random_vec(d.n * d.c * d.h * d.w, seed++), w = random_vec(ws.numel(), seed++),
              b = random_vec(d.k, seed++), dy = random_vec(ys.numel(), seed++);
    DVec ry(ys.numel(), 0.0), rdx(x.size(), 0.0), rdw(w.size(), 0.0), rdb(d.k, 0.0);
    for_each_tap(d, [&](size_t xi, size_t wi, size_t yi) {
      ry[yi] += double(x[xi]) * w[wi];
      rdx[xi] += double(dy[yi]) * w[wi];
      rdw[wi] += double(x[xi]) * dy[yi];
    });
    const int64_t pq = ys.h() * ys.w();
    for (int64_t i = 0; i < ys.numel(); ++i) {
      const int64_t k = (i / pq) % d.k;
      if (d.bias) ry[i] += b[k];
      rdb[k] += dy[i];
    }
    auto plan = backend().make_conv(d);
    DeviceVec dx_(x), dw_(w), db_(b), y(ys.numel()), ddy(dy), gx(x.size()), gw(w.size()), gb(d.k);
    plan->forward(stream(), dx_.data(), dw_.data(), d.bias ? db_.data() : nullptr, y.data());
    CHECK(max_error(y.host(), ry) < kTol);
    plan->backward_data(stream(), ddy.data(), dw_.data(), gx.data());
    CHECK(max_error(gx.host(), rdx) < kTol);
    plan->backward_weights(stream(), dx_.data(), ddy.data(), gw.data(), d.bias ? gb.data() : nullptr);
    CHECK(max_error(gw.host(), rdw) < kTol);
    if (d.bias) CHECK(max_error(gb.host(), rdb) < kTol);
    // A second step through the same plan with other inputs (the plan rebinds pointers).
    const Vec x2 = random_vec(x.size(), seed++);
    DeviceVec dx2(x2), y2(ys.numel());
    plan->forward(stream(), dx2.data(), dw_.data(), d.bias ? db_.data() : nullptr, y2.data());
    DVec ry2(ys.numel(), 0.0);
    for_each_tap(d, [&](size_t xi, size_t wi, size_t yi) { ry2[yi] += double(x2[xi]) * w[wi]; });
    for (int64_t i = 0; i < ys.numel(); ++i)
      if (d.bias) ry2[i] += b[(i / pq) % d.k];
    CHECK(max_error(y2.host(), ry2) < kTol);
  }
}

TEST_CASE("backend: convolution rejects a kernel larger than its input", "[cpu]") {
  ConvDesc d;
  d.h = d.w = 2;
  d.r = d.s = 5;
  CHECK_THROWS_AS(backend().make_conv(d), squall::Error);
}

// ---- linear -------------------------------------------------------------------------------

TEST_CASE("backend: linear forward and backward", "[cpu]") {
  for (bool bias : {true, false}) {
    LinearDesc d;
    d.n = 3, d.in = 7, d.out = 5, d.bias = bias;
    const Vec x = random_vec(d.n * d.in, 30), w = random_vec(d.out * d.in, 31), b = random_vec(d.out, 32),
              dy = random_vec(d.n * d.out, 33);
    DVec ry(d.n * d.out, 0.0), rdx(x.size(), 0.0), rdw(w.size(), 0.0), rdb(d.out, 0.0);
    for (int64_t i = 0; i < d.n; ++i)
      for (int64_t o = 0; o < d.out; ++o) {
        ry[i * d.out + o] = bias ? b[o] : 0.0;
        rdb[o] += dy[i * d.out + o];
        for (int64_t j = 0; j < d.in; ++j) {
          ry[i * d.out + o] += double(x[i * d.in + j]) * w[o * d.in + j];
          rdx[i * d.in + j] += double(dy[i * d.out + o]) * w[o * d.in + j];
          rdw[o * d.in + j] += double(dy[i * d.out + o]) * x[i * d.in + j];
        }
      }
    auto plan = backend().make_linear(d);
    DeviceVec dx_(x), dw_(w), db_(b), y(ry.size()), ddy(dy), gx(x.size()), gw(w.size()), gb(d.out);
    plan->forward(stream(), dx_.data(), dw_.data(), bias ? db_.data() : nullptr, y.data());
    CHECK(max_error(y.host(), ry) < kTol);
    plan->backward_data(stream(), ddy.data(), dw_.data(), gx.data());
    CHECK(max_error(gx.host(), rdx) < kTol);
    plan->backward_weights(stream(), dx_.data(), ddy.data(), gw.data(), bias ? gb.data() : nullptr);
    CHECK(max_error(gw.host(), rdw) < kTol);
    if (bias) CHECK(max_error(gb.host(), rdb) < kTol);
  }
}

// ---- pooling --------------------------------------------------------------------------------

TEST_CASE("backend: max and average pooling (padding excluded), forward and backward", "[cpu]") {
  struct Case { int64_t r, s, stride, pad; PoolKind kind; };
  for (const Case c : {Case{3, 3, 2, 1, PoolKind::max}, Case{3, 3, 2, 1, PoolKind::average},
                       Case{2, 2, 2, 0, PoolKind::max}, Case{2, 2, 2, 0, PoolKind::average},
                       Case{3, 2, 1, 1, PoolKind::average}}) {
    PoolDesc d;
    d.n = 2, d.c = 3, d.h = 7, d.w = 5;
    d.r = c.r, d.s = c.s, d.stride_h = d.stride_w = c.stride, d.pad_h = d.pad_w = c.pad, d.kind = c.kind;
    if (c.s == 2 && c.r == 3) d.pad_w = 1;
    CAPTURE(c.r, c.s, c.stride, c.pad, c.kind == PoolKind::max);
    const Shape ys = d.output();
    const Vec x = random_vec(d.n * d.c * d.h * d.w, 40), dy = random_vec(ys.numel(), 41);
    DVec ry(ys.numel()), rdx(x.size(), 0.0);
    for (int64_t pl = 0; pl < d.n * d.c; ++pl)
      for (int64_t oy = 0; oy < ys.h(); ++oy)
        for (int64_t ox = 0; ox < ys.w(); ++ox) {
          const size_t yi = (pl * ys.h() + oy) * ys.w() + ox;
          double best = -INFINITY, sum = 0;
          size_t arg = 0;
          int cnt = 0;
          for (int64_t r = 0; r < d.r; ++r)
            for (int64_t s = 0; s < d.s; ++s) {
              const int64_t iy = oy * d.stride_h - d.pad_h + r, ix = ox * d.stride_w - d.pad_w + s;
              if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
              const size_t xi = (pl * d.h + iy) * d.w + ix;
              if (x[xi] > best) best = x[xi], arg = xi;
              sum += x[xi];
              ++cnt;
            }
          if (d.kind == PoolKind::max) {
            ry[yi] = best;
            rdx[arg] += dy[yi];
          } else {
            ry[yi] = sum / cnt;
            for (int64_t r = 0; r < d.r; ++r)
              for (int64_t s = 0; s < d.s; ++s) {
                const int64_t iy = oy * d.stride_h - d.pad_h + r, ix = ox * d.stride_w - d.pad_w + s;
                if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
                rdx[(pl * d.h + iy) * d.w + ix] += dy[yi] / cnt;
              }
          }
        }
    auto plan = backend().make_pool(d);
    DeviceVec dx_(x), y(ys.numel()), ddy(dy), gx(x.size()), y_eval(ys.numel());
    plan->forward(stream(), dx_.data(), y_eval.data(), false);
    CHECK(max_error(y_eval.host(), ry) < kTol);
    plan->forward(stream(), dx_.data(), y.data(), true);
    CHECK(max_error(y.host(), ry) < kTol);
    plan->backward(stream(), ddy.data(), gx.data());
    CHECK(max_error(gx.host(), rdx) < kTol);
  }
}

// ---- batch normalisation --------------------------------------------------------------------

TEST_CASE("backend: batch norm: training, running statistics, inference and backward", "[cpu]") {
  BatchNormDesc d;
  d.n = 2, d.c = 3, d.h = 7, d.w = 5, d.eps = 1e-5f, d.momentum = 0.1f;
  const int64_t hw = d.h * d.w, m = d.n * hw, total = d.n * d.c * hw;
  Vec x = random_vec(total, 50, -2.0f, 3.0f);
  for (int64_t i = 0; i < total; ++i) x[i] += float((i / hw) % d.c);  // a different mean per channel
  const Vec gamma = random_vec(d.c, 51, 0.5f, 1.5f), beta = random_vec(d.c, 52), dy = random_vec(total, 53);
  const Vec rm0 = random_vec(d.c, 54), rv0 = random_vec(d.c, 55, 0.5f, 2.0f);

  DVec ry(total), rdx(total), rdg(d.c, 0.0), rdb(d.c, 0.0), rrm(d.c), rrv(d.c), ry_eval(total);
  for (int64_t c = 0; c < d.c; ++c) {
    auto at = [&](int64_t n, int64_t j) { return (n * d.c + c) * hw + j; };
    double mean = 0, var = 0;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t j = 0; j < hw; ++j) mean += x[at(n, j)];
    mean /= m;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t j = 0; j < hw; ++j) var += (x[at(n, j)] - mean) * (x[at(n, j)] - mean);
    var /= m;  // biased for normalising, unbiased for the running estimate
    const double inv = 1.0 / std::sqrt(var + d.eps);
    rrm[c] = 0.9 * rm0[c] + 0.1 * mean;
    rrv[c] = 0.9 * rv0[c] + 0.1 * var * m / (m - 1);
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t j = 0; j < hw; ++j) {
        const double xh = (x[at(n, j)] - mean) * inv;
        ry[at(n, j)] = gamma[c] * xh + beta[c];
        sdy += dy[at(n, j)];
        sdyx += dy[at(n, j)] * xh;
      }
    rdg[c] = sdyx;
    rdb[c] = sdy;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t j = 0; j < hw; ++j) {
        const double xh = (x[at(n, j)] - mean) * inv;
        rdx[at(n, j)] = gamma[c] * inv * (dy[at(n, j)] - sdy / m - xh * sdyx / m);
        ry_eval[at(n, j)] = gamma[c] * (x[at(n, j)] - rrm[c]) / std::sqrt(rrv[c] + d.eps) + beta[c];
      }
  }

  auto plan = backend().make_batch_norm(d);
  DeviceVec dx_(x), dg(gamma), db(beta), rm(rm0), rv(rv0), y(total), ddy(dy), gx(total), gg(d.c), gb(d.c);
  plan->forward(stream(), dx_.data(), dg.data(), db.data(), rm.data(), rv.data(), y.data(), true);
  CHECK(max_error(y.host(), ry) < kTol);
  CHECK(max_error(rm.host(), rrm) < 1e-5);
  CHECK(max_error(rv.host(), rrv) < 1e-5);
  plan->backward(stream(), dx_.data(), ddy.data(), dg.data(), gx.data(), gg.data(), gb.data());
  CHECK(max_error(gx.host(), rdx) < kTol);
  CHECK(max_error(gg.host(), rdg) < kTol);
  CHECK(max_error(gb.host(), rdb) < kTol);
  plan->forward(stream(), dx_.data(), dg.data(), db.data(), rm.data(), rv.data(), y.data(), false);
  CHECK(max_error(y.host(), ry_eval) < kTol);
  CHECK(max_error(rm.host(), rrm) < 1e-5);  // inference leaves the running statistics alone
}

// ---- threads ------------------------------------------------------------------------------

TEST_CASE("cpu backend with an explicit thread count computes the same", "[cpu][cpu-only]") {
  // The thread count is process state (OpenMP's); put it back for the tests that follow.
  const int before = omp_get_max_threads();
  auto one = std::make_unique<squall::cpu::CpuBackend>(1);
  CHECK(omp_get_max_threads() == 1);
  auto s = one->create_stream();
  const size_t n = 40000;
  const Vec a = random_vec(n, 60);
  Buffer b = one->allocate(n);
  one->copy_from_host(*s, b.data(), a.data(), n);
  double want = 0;
  for (float v : a) want += double(v) * v;
  float got = 0;
  one->sum_squares(*s, b.data(), n, &got);  // CPU backend memory is host memory
  CHECK(got == Approx(want).epsilon(1e-6));
  CHECK_THROWS_AS(std::make_unique<squall::cpu::CpuBackend>(-1), squall::Error);
  std::make_unique<squall::cpu::CpuBackend>(before);
  CHECK(omp_get_max_threads() == before);
}

// ---- streams, events, types, metrics and fused updates ------------------------------------

TEST_CASE("backend: an event orders one stream's work after another's", "[cpu]") {
  // Stream a fills a large buffer and records; stream b waits for the event and then copies
  // the buffer. Without the wait, b could copy before a's fill ran (on a device).
  auto a = backend().create_stream(), b = backend().create_stream();
  auto done = backend().create_event();
  const size_t n = size_t{1} << 22;
  DeviceVec x(n), y(n);
  backend().fill(*a, x.data(), n, 0.0f);
  backend().synchronize(*a);
  for (int round = 1; round <= 3; ++round) {
    backend().fill(*a, x.data(), n, static_cast<float>(round));
    backend().record(*done, *a);
    backend().wait(*b, *done);
    backend().copy(*b, y.data(), x.data(), n);
    backend().synchronize(*b);
    const Vec got = y.host();
    CHECK(got.front() == static_cast<float>(round));
    CHECK(got.back() == static_cast<float>(round));
  }
  backend().synchronize(*done);
  CHECK(backend().ready(*done));
}

TEST_CASE("backend: axpby and the averaging arithmetic", "[cpu]") {
  const size_t n = 70001;
  const Vec x = random_vec(n, 70), y0 = random_vec(n, 71);
  DeviceVec dx(x), dy(y0);
  backend().axpby(stream(), 0.25f, dx.data(), -1.5f, dy.data(), n);
  DVec want(n);
  for (size_t i = 0; i < n; ++i) want[i] = 0.25 * x[i] - 1.5 * y0[i];
  CHECK(max_error(dy.host(), want) < 1e-6);
}

TEST_CASE("backend: f32 <-> bf16 / f16 conversion rounds to nearest even", "[cpu]") {
  // Values chosen to round differently under truncation and round-to-nearest-even, plus
  // subnormals, overflow and the extremes of each format.
  const Vec src{1.0f, -2.5f, 1.00390625f /* 1 + 2^-8: a bf16 tie, even stays 1 */, 1.01171875f /* 1 + 3*2^-8: up */,
                65504.0f, 70000.0f, 6.0e-8f, 1e-3f, 3.14159265f, 0.0f, -0.0f};
  DeviceVec d(src), back(src.size());
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(dtype_name(t));
    Buffer half = backend().allocate(src.size(), t);
    CHECK(half.bytes() == src.size() * 2);
    backend().convert(stream(), d.data(), DType::f32, half.raw(), t, src.size());
    backend().convert(stream(), half.raw(), t, back.data(), DType::f32, src.size());
    const Vec got = back.host();
    CHECK(got[0] == 1.0f);
    CHECK(got[1] == -2.5f);
    CHECK(got[9] == 0.0f);
    CHECK(std::signbit(got[10]));
    for (size_t i = 0; i < src.size(); ++i) {
      if (t == DType::f16 && std::abs(src[i]) > 65504.0f) {
        CHECK(std::isinf(got[i]));  // beyond the largest half: infinity
        continue;
      }
      const double rel = t == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;  // half an ulp of the format
      CHECK(std::abs(got[i] - src[i]) <= rel * std::abs(src[i]) + (t == DType::f16 ? 6e-8 : 0.0));
    }
    if (t == DType::bf16) {
      CHECK(got[2] == 1.0f);          // tie to even
      CHECK(got[3] == 1.015625f);     // 1 + 4*2^-8
    } else {
      CHECK(got[4] == 65504.0f);
      CHECK(got[6] == Approx(5.9604645e-8f));  // the smallest subnormal half
    }
  }
}

TEST_CASE("backend: the confusion matrix accumulates in backend memory", "[cpu]") {
  const std::vector<int32_t> labels{0, 1, 2, 2, -1, 1, 3 /* out of range: ignored */, 0};
  const std::vector<int32_t> pred{0, 2, 2, 2, 1, 1, 0, 1};
  Buffer lo, po;
  int32_t* dl = backend().allocate_labels(labels.size(), lo);
  int32_t* dp = backend().allocate_labels(pred.size(), po);
  backend().copy_labels_from_host(stream(), dl, labels.data(), labels.size());
  backend().copy_labels_from_host(stream(), dp, pred.data(), pred.size());
  Buffer cm = backend().allocate(9, DType::i32);
  backend().fill(stream(), reinterpret_cast<float*>(cm.raw()), 9, 0.0f);
  for (int round = 0; round < 2; ++round)
    backend().accumulate_confusion(stream(), dl, dp, labels.size(), 3, cm.as<int32_t>());
  std::vector<int32_t> got(9);
  backend().copy_labels_to_host(stream(), got.data(), cm.as<int32_t>(), 9);
  backend().synchronize(stream());
  // [label][pred], twice over: (0,0) (1,2) (2,2) (2,2) (1,1) (0,1)
  CHECK(got == std::vector<int32_t>{2, 2, 0, 0, 2, 2, 0, 0, 4});
}

TEST_CASE("backend: fused updates equal the CPU's single-range forms tensor by tensor", "[cpu][cpu-only]") {
  // Three tensors of awkward sizes (one spans several fused chunks), one without decay.
  const std::vector<size_t> sizes{7, 65536 * 2 + 3, 129};
  size_t total = 0;
  for (size_t n : sizes) total += n;
  const Vec w0 = random_vec(total, 80), g0 = random_vec(total, 81);
  auto run = [&](bool fused, int which) {  // which: 0 sgd, 1 adam, 2 adamw, 3 lamb, 4 larc+sgd
    DeviceVec w(w0), g(g0), s1(total), s2(total);
    backend().fill(stream(), s1.data(), total, 0.0f);
    backend().fill(stream(), s2.data(), total, 0.0f);
    std::vector<TensorRef> refs;
    size_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      refs.push_back({w.data() + off, g.data() + off, sizes[i], i != 2});
      off += sizes[i];
    }
    auto set = backend().make_tensor_set(refs);
    CHECK(set->total() == total);
    DeviceVec u(total), norm(1);
    for (int step = 1; step <= 3; ++step) {
      if (which == 0 || which == 4) {
        if (which == 4) {
          LarcArgs a;
          a.lr = 0.1f, a.eta = 0.02f, a.weight_decay = 0.01f, a.clip = step == 2;
          if (fused) {
            backend().larc_scale(stream(), *set, a);
          } else {
            for (const auto& r : refs) {  // the arithmetic spelt out with the single-range calls
              const float wd = r.decay ? a.weight_decay : 0.0f;
              backend().sum_squares(stream(), r.w, r.n, norm.data());
              const double wn = std::sqrt(norm.host()[0]);
              backend().sum_squares(stream(), r.g, r.n, norm.data());
              const double gn = std::sqrt(norm.host()[0]);
              double f = a.eta * wn / (gn + wd * wn);
              if (a.clip) f = std::min(f / a.lr, 1.0);
              backend().axpy(stream(), wd, r.w, r.g, r.n);
              backend().scale(stream(), static_cast<float>(f), r.g, r.n);
            }
          }
        }
        SgdArgs a;
        a.lr = 0.05f, a.momentum = 0.9f, a.weight_decay = 0.01f, a.nesterov = step == 3;
        if (fused) {
          backend().sgd_update(stream(), *set, s1.data(), a);
        } else {
          size_t o = 0;
          for (const auto& r : refs) {
            cpu_steps().sgd_step(stream(), r.w, r.g, s1.data() + o, r.n, a.lr, a.momentum, r.decay ? a.weight_decay : 0.0f,
                               a.nesterov);
            o += r.n;
          }
        }
      } else {
        AdamArgs a;
        a.kind = which == 1 ? AdamArgs::Kind::adam : which == 2 ? AdamArgs::Kind::adamw : AdamArgs::Kind::lamb;
        a.lr = 0.01f, a.weight_decay = 0.05f, a.step = step;
        if (fused) {
          backend().adam_update(stream(), *set, s1.data(), s2.data(), a);
        } else {
          size_t o = 0;
          for (const auto& r : refs) {
            const float wd = r.decay ? a.weight_decay : 0.0f;
            if (which != 3) {
              cpu_steps().adam_step(stream(), r.w, r.g, s1.data() + o, s2.data() + o, nullptr, r.n, a.lr, a.beta1, a.beta2,
                                  a.eps, wd, which == 2, step, true);
            } else {
              cpu_steps().adam_step(stream(), r.w, r.g, s1.data() + o, s2.data() + o, u.data(), r.n, a.lr, a.beta1,
                                  a.beta2, a.eps, wd, true, step, false);
              backend().sum_squares(stream(), r.w, r.n, norm.data());
              const double wn = std::sqrt(norm.host()[0]);
              backend().sum_squares(stream(), u.data(), r.n, norm.data());
              const double un = std::sqrt(norm.host()[0]);
              const double trust = wn > 0 && un > 0 ? wn / un : 1.0;
              backend().axpy(stream(), static_cast<float>(-a.lr * trust), u.data(), r.w, r.n);
            }
            o += r.n;
          }
        }
      }
    }
    return std::make_pair(w.host(), g.host());
  };
  for (int which = 0; which <= 4; ++which) {
    INFO("optimizer " << which);
    const auto fused = run(true, which), single = run(false, which);
    CHECK(max_error(fused.first, to_double(single.first)) < 1e-5 * squall::test::slack());
    CHECK(max_error(fused.second, to_double(single.second)) < 1e-5 * squall::test::slack());
    CHECK(fused.first != w0);  // it moved
  }
}
