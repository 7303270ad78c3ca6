// Every layer against an independent naive double-precision forward written here, and its
// backward against central finite differences of that forward (tests/support/layer_harness.hpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "src/core/error.hpp"
#include "src/nn/init.hpp"
#include "src/nn/layer.hpp"
#include "tests/support/layer_harness.hpp"
#include "tests/support/test_backend.hpp"

namespace nn = squall::nn;
using squall::test::Doubles;
using squall::test::Floats;
using squall::test::GradientCheck;
using squall::test::check_layer_gradients;

namespace {

// The backend under test (tests/support/test_backend.hpp).
nn::Backend& cpu() { return squall::test::test_backend(); }

struct Dims {
  int64_t n, c, h, w;
  int64_t numel() const { return n * c * h * w; }
  size_t at(int64_t in, int64_t ic, int64_t ih, int64_t iw) const {
    return static_cast<size_t>(((in * c + ic) * h + ih) * w + iw);
  }
  nn::Shape shape() const { return nn::Shape(n, c, h, w); }
};

// ---- naive references ----------------------------------------------------------------------

struct ConvGeometry {
  int64_t k, r, stride, pad, dil;
};

Doubles naive_conv(const Doubles& x, const Doubles& wt, const Doubles* b, Dims d, ConvGeometry g) {
  const int64_t p = (d.h + 2 * g.pad - g.dil * (g.r - 1) - 1) / g.stride + 1;
  const int64_t q = (d.w + 2 * g.pad - g.dil * (g.r - 1) - 1) / g.stride + 1;
  const Dims o{d.n, g.k, p, q}, wd{g.k, d.c, g.r, g.r};
  Doubles y(static_cast<size_t>(o.numel()), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t i = 0; i < p; ++i)
        for (int64_t j = 0; j < q; ++j) {
          double s = b ? (*b)[static_cast<size_t>(k)] : 0.0;
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t a = 0; a < g.r; ++a)
              for (int64_t e = 0; e < g.r; ++e) {
                const int64_t ih = i * g.stride - g.pad + a * g.dil, iw = j * g.stride - g.pad + e * g.dil;
                if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
                s += x[d.at(n, c, ih, iw)] * wt[wd.at(k, c, a, e)];
              }
          y[o.at(n, k, i, j)] = s;
        }
  return y;
}

// Transposed convolution as the scatter it is defined by: input pixel (ih, iw) spreads
// x * w[c, k, a, e] to output (ih*stride - pad + a, iw*stride - pad + e). Weights [c, k, r, r].
Doubles naive_conv_transpose(const Doubles& x, const Doubles& wt, const Doubles* b, Dims d, int64_t k_out,
                             int64_t r, int64_t stride, int64_t pad, int64_t out_pad) {
  const int64_t p = (d.h - 1) * stride - 2 * pad + r + out_pad, q = (d.w - 1) * stride - 2 * pad + r + out_pad;
  const Dims o{d.n, k_out, p, q}, wd{d.c, k_out, r, r};
  Doubles y(static_cast<size_t>(o.numel()), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t k = 0; k < k_out; ++k)
      for (int64_t i = 0; i < p; ++i)
        for (int64_t j = 0; j < q; ++j) y[o.at(n, k, i, j)] = b ? (*b)[static_cast<size_t>(k)] : 0.0;
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t ih = 0; ih < d.h; ++ih)
        for (int64_t iw = 0; iw < d.w; ++iw)
          for (int64_t k = 0; k < k_out; ++k)
            for (int64_t a = 0; a < r; ++a)
              for (int64_t e = 0; e < r; ++e) {
                const int64_t oh = ih * stride - pad + a, ow = iw * stride - pad + e;
                if (oh < 0 || oh >= p || ow < 0 || ow >= q) continue;
                y[o.at(n, k, oh, ow)] += x[d.at(n, c, ih, iw)] * wt[wd.at(c, k, a, e)];
              }
  return y;
}

Doubles naive_linear(const Doubles& x, const Doubles& wt, const Doubles* b, int64_t n, int64_t in, int64_t out) {
  Doubles y(static_cast<size_t>(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? (*b)[static_cast<size_t>(o)] : 0.0;
      for (int64_t f = 0; f < in; ++f) s += x[static_cast<size_t>(i * in + f)] * wt[static_cast<size_t>(o * in + f)];
      y[static_cast<size_t>(i * out + o)] = s;
    }
  return y;
}

struct Moments {
  Doubles mean, biased_var, unbiased_var;
};

Moments channel_moments(const Doubles& x, Dims d) {
  Moments m;
  const double count = static_cast<double>(d.n * d.h * d.w);
  for (int64_t c = 0; c < d.c; ++c) {
    double s = 0.0, ss = 0.0;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < d.h; ++i)
        for (int64_t j = 0; j < d.w; ++j) s += x[d.at(n, c, i, j)];
    const double mean = s / count;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t i = 0; i < d.h; ++i)
        for (int64_t j = 0; j < d.w; ++j) ss += (x[d.at(n, c, i, j)] - mean) * (x[d.at(n, c, i, j)] - mean);
    m.mean.push_back(mean);
    m.biased_var.push_back(ss / count);
    m.unbiased_var.push_back(ss / (count - 1.0));
  }
  return m;
}

Doubles naive_batch_norm(const Doubles& x, const Doubles& gamma, const Doubles& beta, const Doubles& mean,
                         const Doubles& var, Dims d, double eps) {
  Doubles y(x.size());
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t i = 0; i < d.h; ++i)
        for (int64_t j = 0; j < d.w; ++j) {
          const size_t u = static_cast<size_t>(c), at = d.at(n, c, i, j);
          y[at] = gamma[u] * (x[at] - mean[u]) / std::sqrt(var[u] + eps) + beta[u];
        }
  return y;
}

// Average pooling divides by the window's in-image count (padding excluded), as backend.hpp says.
Doubles naive_pool(const Doubles& x, Dims d, int64_t r, int64_t stride, int64_t pad, bool max) {
  const int64_t p = (d.h + 2 * pad - r) / stride + 1, q = (d.w + 2 * pad - r) / stride + 1;
  const Dims o{d.n, d.c, p, q};
  Doubles y(static_cast<size_t>(o.numel()));
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t i = 0; i < p; ++i)
        for (int64_t j = 0; j < q; ++j) {
          double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
          int64_t count = 0;
          for (int64_t a = 0; a < r; ++a)
            for (int64_t e = 0; e < r; ++e) {
              const int64_t ih = i * stride - pad + a, iw = j * stride - pad + e;
              if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
              const double v = x[d.at(n, c, ih, iw)];
              acc = max ? std::max(acc, v) : acc + v;
              ++count;
            }
          y[o.at(n, c, i, j)] = max ? acc : acc / static_cast<double>(count);
        }
  return y;
}

// PyTorch's align_corners=False source index: (dst + 0.5) * in/out - 0.5, clamped at 0.
void source_index(int64_t dst, int64_t in, int64_t out, int64_t& i0, int64_t& i1, double& frac) {
  double src = (static_cast<double>(dst) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
  if (src < 0.0) src = 0.0;
  i0 = std::min(static_cast<int64_t>(src), in - 1);
  i1 = std::min(i0 + 1, in - 1);
  frac = src - static_cast<double>(i0);
}

Doubles naive_bilinear(const Doubles& x, Dims d, int64_t oh, int64_t ow) {
  const Dims o{d.n, d.c, oh, ow};
  Doubles y(static_cast<size_t>(o.numel()));
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t h0, h1, w0, w1;
          double fh, fw;
          source_index(i, d.h, oh, h0, h1, fh);
          source_index(j, d.w, ow, w0, w1, fw);
          y[o.at(n, c, i, j)] = (1 - fh) * ((1 - fw) * x[d.at(n, c, h0, w0)] + fw * x[d.at(n, c, h0, w1)]) +
                                fh * ((1 - fw) * x[d.at(n, c, h1, w0)] + fw * x[d.at(n, c, h1, w1)]);
        }
  return y;
}

}  // namespace

TEST_CASE("Every layer's backward checked against finite differences (double-precision reference)", "[layers]") {
  const Dims d{2, 3, 7, 6};

  SECTION("conv2d: stride, padding, dilation, with and without bias") {
    struct Case {
      int64_t k, r, stride, pad, dil;
      bool bias;
    };
    for (const Case& c : {Case{4, 3, 1, 1, 1, true}, Case{5, 3, 2, 1, 1, true}, Case{4, 3, 1, 2, 2, true},
                          Case{3, 2, 2, 0, 1, false}, Case{2, 1, 1, 0, 1, true}}) {
      INFO("k " << c.k << " r " << c.r << " stride " << c.stride << " pad " << c.pad << " dil " << c.dil
                << " bias " << c.bias);
      nn::Conv2dOptions o;
      o.out_channels = c.k; o.kernel = c.r; o.stride = c.stride; o.padding = c.pad; o.dilation = c.dil;
      o.bias = c.bias;
      const ConvGeometry g{c.k, c.r, c.stride, c.pad, c.dil};
      check_layer_gradients(cpu(), nn::conv2d(o), {d.shape()},
                            [&](const std::vector<Doubles>& x, const std::vector<Doubles>& p) {
                              return naive_conv(x[0], p[0], c.bias ? &p[1] : nullptr, d, g);
                            });
    }
  }

  SECTION("conv_transpose2d: stride 2 with output padding") {
    struct Case {
      int64_t k, r, stride, pad, out_pad;
      bool bias;
    };
    for (const Case& c : {Case{4, 3, 2, 1, 1, true}, Case{2, 2, 2, 0, 0, true}, Case{3, 3, 2, 0, 1, false}}) {
      INFO("k " << c.k << " r " << c.r << " stride " << c.stride << " pad " << c.pad << " out_pad " << c.out_pad);
      nn::ConvTranspose2dOptions o;
      o.out_channels = c.k; o.kernel = c.r; o.stride = c.stride; o.padding = c.pad; o.output_padding = c.out_pad;
      o.bias = c.bias;
      check_layer_gradients(cpu(), nn::conv_transpose2d(o), {d.shape()},
                            [&](const std::vector<Doubles>& x, const std::vector<Doubles>& p) {
                              return naive_conv_transpose(x[0], p[0], c.bias ? &p[1] : nullptr, d, c.k, c.r,
                                                          c.stride, c.pad, c.out_pad);
                            });
    }
  }

  SECTION("linear on [n,f] and on [n,c,h,w] read as [n,c*h*w]") {
    check_layer_gradients(cpu(), nn::linear(5), {nn::Shape(3, 11)},
                          [](const std::vector<Doubles>& x, const std::vector<Doubles>& p) {
                            return naive_linear(x[0], p[0], &p[1], 3, 11, 5);
                          });
    check_layer_gradients(cpu(), nn::linear(4, false), {d.shape()},
                          [&](const std::vector<Doubles>& x, const std::vector<Doubles>& p) {
                            return naive_linear(x[0], p[0], nullptr, d.n, d.c * d.h * d.w, 4);
                          });
  }

  SECTION("batch_norm in train mode: gradients wrt input, gamma and beta") {
    const double eps = 1e-5;
    auto naive = [&](Dims dims) {
      return [=](const std::vector<Doubles>& x, const std::vector<Doubles>& p) {
        const Moments m = channel_moments(x[0], dims);
        return naive_batch_norm(x[0], p[0], p[1], m.mean, m.biased_var, dims, eps);
      };
    };
    check_layer_gradients(cpu(), nn::batch_norm(), {d.shape()}, naive(d));
    const Dims features{5, 4, 1, 1};  // [n, f]: statistics per feature over the batch
    check_layer_gradients(cpu(), nn::batch_norm(), {nn::Shape(5, 4)}, naive(features));
  }

  SECTION("relu (inputs kept away from the kink)") {
    GradientCheck opt;
    opt.distinct_inputs = {true};
    check_layer_gradients(cpu(), nn::relu(), {d.shape()},
                          [](const std::vector<Doubles>& x, const std::vector<Doubles>&) {
                            Doubles y = x[0];
                            for (double& v : y) v = std::max(v, 0.0);
                            return y;
                          },
                          opt);
  }

  SECTION("max_pool (distinct values: no ties)") {
    GradientCheck opt;
    opt.distinct_inputs = {true};
    for (auto [r, stride, pad] : {std::tuple{3, 2, 1}, std::tuple{2, 2, 0}, std::tuple{3, 1, 1}}) {
      INFO("kernel " << r << " stride " << stride << " pad " << pad);
      check_layer_gradients(cpu(), nn::max_pool(r, stride, pad), {d.shape()},
                            [&](const std::vector<Doubles>& x, const std::vector<Doubles>&) {
                              return naive_pool(x[0], d, r, stride, pad, true);
                            },
                            opt);
    }
  }

  SECTION("avg_pool with padding (padding excluded from the count)") {
    for (auto [r, stride, pad] : {std::tuple{3, 2, 1}, std::tuple{3, 1, 1}, std::tuple{2, 2, 0}}) {
      INFO("kernel " << r << " stride " << stride << " pad " << pad);
      check_layer_gradients(cpu(), nn::avg_pool(r, stride, pad), {d.shape()},
                            [&](const std::vector<Doubles>& x, const std::vector<Doubles>&) {
                              return naive_pool(x[0], d, r, stride, pad, false);
                            });
    }
  }

  SECTION("global_avg_pool") {
    check_layer_gradients(cpu(), nn::global_avg_pool(), {d.shape()},
                          [&](const std::vector<Doubles>& x, const std::vector<Doubles>&) {
                            Doubles y(static_cast<size_t>(d.n * d.c), 0.0);
                            const int64_t hw = d.h * d.w;
                            for (size_t i = 0; i < x[0].size(); ++i) y[i / static_cast<size_t>(hw)] += x[0][i] / static_cast<double>(hw);
                            return y;
                          });
  }

  SECTION("upsample_bilinear (align_corners = false), non-integer and integer factors") {
    for (auto [oh, ow] : {std::pair{11, 13}, std::pair{14, 12}, std::pair{5, 4}}) {
      INFO("to " << oh << "x" << ow);
      check_layer_gradients(cpu(), nn::upsample_bilinear(oh, ow), {d.shape()},
                            [&](const std::vector<Doubles>& x, const std::vector<Doubles>&) {
                              return naive_bilinear(x[0], d, oh, ow);
                            });
    }
  }

  SECTION("add, with both gradients") {
    check_layer_gradients(cpu(), nn::add(), {d.shape(), d.shape()},
                          [](const std::vector<Doubles>& x, const std::vector<Doubles>&) {
                            Doubles y = x[0];
                            for (size_t i = 0; i < y.size(); ++i) y[i] += x[1][i];
                            return y;
                          });
  }

  SECTION("concat over channels of three inputs, and over features") {
    const Dims a{2, 2, 5, 3}, b{2, 3, 5, 3}, c{2, 1, 5, 3};
    check_layer_gradients(cpu(), nn::concat(), {a.shape(), b.shape(), c.shape()},
                          [&](const std::vector<Doubles>& x, const std::vector<Doubles>&) {
                            Doubles y;
                            const int64_t hw = a.h * a.w;
                            for (int64_t n = 0; n < a.n; ++n)
                              for (size_t i = 0; i < 3; ++i) {
                                const int64_t row = static_cast<int64_t>(x[i].size()) / a.n;
                                y.insert(y.end(), x[i].begin() + n * row, x[i].begin() + (n + 1) * row);
                              }
                            REQUIRE(static_cast<int64_t>(y.size()) == a.n * (a.c + b.c + c.c) * hw);
                            return y;
                          });
    check_layer_gradients(cpu(), nn::concat(), {nn::Shape(3, 4), nn::Shape(3, 2)},
                          [](const std::vector<Doubles>& x, const std::vector<Doubles>&) {
                            Doubles y;
                            for (size_t n = 0; n < 3; ++n) {
                              y.insert(y.end(), x[0].begin() + static_cast<long>(n * 4), x[0].begin() + static_cast<long>(n * 4 + 4));
                              y.insert(y.end(), x[1].begin() + static_cast<long>(n * 2), x[1].begin() + static_cast<long>(n * 2 + 2));
                            }
                            return y;
                          });
  }

  SECTION("flatten") {
    squall::test::LayerRunner run(cpu(), nn::flatten(), {d.shape()});
    REQUIRE(run.output_shape() == nn::Shape(d.n, d.c * d.h * d.w));
    check_layer_gradients(cpu(), nn::flatten(), {d.shape()},
                          [](const std::vector<Doubles>& x, const std::vector<Doubles>&) { return x[0]; });
  }
}

TEST_CASE("batch_norm updates running statistics in train mode and uses them in eval mode", "[layers]") {
  const Dims d{2, 3, 7, 6};
  std::mt19937_64 rng(5);
  squall::test::LayerRunner run(cpu(), nn::batch_norm(1e-5f, 0.1f), {d.shape()});
  const Floats x = squall::test::random_floats(rng, d.numel(), -1.0, 3.0);
  const Floats gamma = squall::test::random_floats(rng, d.c), beta = squall::test::random_floats(rng, d.c);
  run.set_input(0, x);
  run.set_param(0, gamma);
  run.set_param(1, beta);
  run.forward({true, 0, 0});

  const Moments m = channel_moments(squall::test::to_doubles(x), d);
  Doubles expected_mean(3), expected_var(3);
  for (size_t c = 0; c < 3; ++c) {
    expected_mean[c] = 0.1 * m.mean[c];                    // from 0
    expected_var[c] = 0.9 * 1.0 + 0.1 * m.unbiased_var[c];  // from 1, unbiased as PyTorch
  }
  squall::test::require_close(run.state(0), expected_mean, 1e-4, "running_mean");
  squall::test::require_close(run.state(1), expected_var, 1e-4, "running_var");

  const Floats y = run.forward({false, 0, 0});
  squall::test::require_close(run.state(0), expected_mean, 1e-4, "running_mean unchanged by eval");
  squall::test::require_close(
      y, naive_batch_norm(squall::test::to_doubles(x), squall::test::to_doubles(gamma), squall::test::to_doubles(beta),
                          expected_mean, expected_var, d, 1e-5),
      1e-4, "batch_norm eval forward");
}

TEST_CASE("dropout: fixed mask per (seed, step), dx = dy * mask / (1 - p), identity in eval", "[layers]") {
  const float p = 0.3f;
  const Dims d{4, 5, 20, 25};  // 10,000 elements: enough for the drop rate
  std::mt19937_64 rng(9);
  squall::test::LayerRunner run(cpu(), nn::dropout(p), {d.shape()});
  Floats x = squall::test::random_floats(rng, d.numel(), 0.5, 1.5);  // nonzero: the mask shows in y
  run.set_input(0, x);

  const Floats y = run.forward({true, 11, 3});
  std::vector<bool> kept(x.size());
  size_t dropped = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    kept[i] = y[i] != 0.0f;
    if (!kept[i]) ++dropped;
    else REQUIRE(y[i] == Approx(x[i] / (1.0f - p)).epsilon(1e-6));
  }
  const double rate = static_cast<double>(dropped) / static_cast<double>(x.size());
  CHECK(rate > p - 0.03);
  CHECK(rate < p + 0.03);

  const Floats dy = squall::test::random_floats(rng, d.numel());
  run.backward(dy);
  const Floats dx = run.dinput(0);
  for (size_t i = 0; i < x.size(); ++i)
    REQUIRE(dx[i] == Approx(kept[i] ? dy[i] / (1.0f - p) : 0.0f).epsilon(1e-6).margin(1e-7));

  // The same (seed, step) replays the mask; another step draws another one.
  REQUIRE(run.forward({true, 11, 3}) == y);
  const Floats y_next = run.forward({true, 11, 4});
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += (y_next[i] != 0.0f) != kept[i];
  CHECK(differ > x.size() / 10);

  // Eval: identity forward and backward.
  REQUIRE(run.forward({false, 11, 5}) == x);
  run.backward(dy);
  REQUIRE(run.dinput(0) == dy);
}

TEST_CASE("Layers skip input gradients nobody needs", "[layers]") {
  const Dims d{2, 3, 7, 6};
  std::mt19937_64 rng(3);
  nn::Conv2dOptions o;
  o.out_channels = 2;
  squall::test::LayerRunner conv(cpu(), nn::conv2d(o), {d.shape()});
  conv.set_input(0, squall::test::random_floats(rng, d.numel()));
  for (size_t i = 0; i < 2; ++i) conv.set_param(i, squall::test::random_floats(rng, conv.param_specs()[i].shape.numel()));
  conv.forward({});
  conv.backward(squall::test::random_floats(rng, conv.output_shape().numel()), {false});
  for (float v : conv.dinput(0)) REQUIRE(std::isnan(v));  // untouched sentinel
  for (float v : conv.grad(0)) REQUIRE(std::isfinite(v));

  squall::test::LayerRunner bn(cpu(), nn::batch_norm(), {d.shape()});
  bn.set_input(0, squall::test::random_floats(rng, d.numel()));
  bn.set_param(0, Floats(3, 1.0f));
  bn.set_param(1, Floats(3, 0.0f));
  bn.forward({});
  bn.backward(squall::test::random_floats(rng, d.numel()), {false});
  for (float v : bn.grad(0)) REQUIRE(std::isfinite(v));

  squall::test::LayerRunner sum(cpu(), nn::add(), {d.shape(), d.shape()});
  const Floats dy = squall::test::random_floats(rng, d.numel());
  sum.backward(dy, {false, true});
  REQUIRE(sum.dinput(1) == dy);
  for (float v : sum.dinput(0)) REQUIRE(std::isnan(v));
}

TEST_CASE("Layers declare their parameters with PyTorch's shapes, fans and decay flags", "[layers]") {
  nn::Conv2dOptions o;
  o.out_channels = 8;
  o.kernel = 3;
  o.init = nn::Init::kaiming_normal_out;
  auto conv = nn::conv2d(o);
  REQUIRE(conv->setup({nn::Shape(2, 3, 7, 6)}) == nn::Shape(2, 8, 5, 4));
  auto specs = conv->param_specs();
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].shape == nn::Shape(8, 3, 3, 3));
  CHECK(specs[0].init == nn::Init::kaiming_normal_out);
  CHECK(specs[0].fan_in == 27);
  CHECK(specs[0].fan_out == 72);
  CHECK(specs[0].weight_decay);
  CHECK(specs[1].shape == nn::Shape(8));
  CHECK(specs[1].init == nn::Init::uniform_fan_in);
  CHECK(specs[1].fan_in == 27);
  CHECK_FALSE(specs[1].weight_decay);

  auto fc = nn::linear(10);
  REQUIRE(fc->setup({nn::Shape(4, 2, 3, 3)}) == nn::Shape(4, 10));
  specs = fc->param_specs();
  CHECK(specs[0].shape == nn::Shape(10, 18));
  CHECK(specs[0].fan_in == 18);
  CHECK_FALSE(specs[1].weight_decay);

  auto bn = nn::batch_norm();
  bn->setup({nn::Shape(4, 6, 5, 5)});
  specs = bn->param_specs();
  REQUIRE(specs.size() == 2);
  CHECK((specs[0].name == "weight" && specs[0].init == nn::Init::ones && !specs[0].weight_decay));
  CHECK((specs[1].name == "bias" && specs[1].init == nn::Init::zeros && !specs[1].weight_decay));
  const auto state = bn->state_specs();
  REQUIRE(state.size() == 2);
  CHECK((state[0].name == "running_mean" && state[0].init == nn::Init::zeros && state[0].shape == nn::Shape(6)));
  CHECK((state[1].name == "running_var" && state[1].init == nn::Init::ones));

  CHECK(nn::max_pool(3, 2, 1)->setup({nn::Shape(2, 3, 7, 6)}) == nn::Shape(2, 3, 4, 3));
  CHECK(nn::global_avg_pool()->setup({nn::Shape(2, 3, 7, 6)}) == nn::Shape(2, 3));
  CHECK(nn::concat()->setup({nn::Shape(2, 3, 7, 6), nn::Shape(2, 5, 7, 6)}) == nn::Shape(2, 8, 7, 6));
}

TEST_CASE("initialize follows PyTorch's distributions", "[layers]") {
  std::mt19937_64 rng(17);
  const int64_t count = 200000;
  std::vector<float> v(static_cast<size_t>(count));

  nn::ParamSpec uniform{"weight", nn::Shape(count), nn::Init::uniform_fan_in, 25, 1, true};
  nn::initialize(uniform, v.data(), rng);
  double lo = 1e9, hi = -1e9, sum = 0.0;
  for (float x : v) { lo = std::min(lo, double(x)); hi = std::max(hi, double(x)); sum += x; }
  CHECK(lo >= -0.2);
  CHECK(hi <= 0.2);
  CHECK(lo < -0.199);
  CHECK(hi > 0.199);
  CHECK(std::abs(sum / count) < 0.002);

  nn::ParamSpec normal{"weight", nn::Shape(count), nn::Init::kaiming_normal_out, 1, 50, true};
  nn::initialize(normal, v.data(), rng);
  double s = 0.0, ss = 0.0;
  for (float x : v) { s += x; ss += double(x) * x; }
  const double mean = s / count, stddev = std::sqrt(ss / count - mean * mean);
  CHECK(std::abs(mean) < 0.002);
  CHECK(stddev == Approx(std::sqrt(2.0 / 50.0)).epsilon(0.01));

  nn::ParamSpec ones{"weight", nn::Shape(3), nn::Init::ones};
  nn::initialize(ones, v.data(), rng);
  CHECK((v[0] == 1.0f && v[1] == 1.0f && v[2] == 1.0f));
}

TEST_CASE("Layers reject bad shapes with a message naming the layer and the shapes", "[layers]") {
  using Catch::Matchers::Contains;
  nn::Conv2dOptions o;
  o.kernel = 5;
  REQUIRE_THROWS_WITH(nn::conv2d(o)->setup({nn::Shape(2, 3, 3, 3)}), Contains("conv2d") && Contains("[2,3,3,3]"));
  REQUIRE_THROWS_WITH(nn::conv2d({})->setup({nn::Shape(2, 3)}), Contains("conv2d") && Contains("[2,3]"));
  REQUIRE_THROWS_WITH(nn::linear(4)->setup({nn::Shape(2)}), Contains("linear") && Contains("[2]"));
  REQUIRE_THROWS_WITH(nn::add()->setup({nn::Shape(2, 3), nn::Shape(2, 4)}), Contains("add") && Contains("[2,4]"));
  REQUIRE_THROWS_WITH(nn::concat()->setup({nn::Shape(2, 3, 4, 4), nn::Shape(2, 3, 5, 4)}),
                      Contains("concat") && Contains("[2,3,5,4]"));
  REQUIRE_THROWS_WITH(nn::concat()->setup({nn::Shape(2, 3, 4, 4)}), Contains("concat"));
  REQUIRE_THROWS_WITH(nn::global_avg_pool()->setup({nn::Shape(2, 3)}), Contains("global_avg_pool"));
  REQUIRE_THROWS_WITH(nn::max_pool(3, 2)->setup({nn::Shape(1, 1, 2, 2)}), Contains("max_pool") && Contains("[1,1,2,2]"));
  REQUIRE_THROWS_WITH(nn::upsample_bilinear(4, 4)->setup({nn::Shape(6)}), Contains("upsample_bilinear"));
  REQUIRE_THROWS_AS(nn::dropout(1.0f), squall::Error);
  REQUIRE_THROWS_AS(nn::avg_pool(2, 2, 2), squall::Error);
}
