// The two-pass reductions (bias gradient, softmax cross-entropy, sum of squares) and the
// per-pixel metrics kernels (argmax, confusion), emulated on the host with the device's block
// partitioning, against the CPU backend. Sums are in double in another order than the CPU's,
// so results that pass through them are compared within a stated tolerance; everything else
// bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tests/cuda_host/kernels_check.hpp"

using namespace squall::test::kernels;
namespace emu = squall::test::emulated;
using squall::nn::Layout;

namespace {

// The bias gradient the CPU backend computes for dy [n, c, hw] (or [n, hw, c]) of type t:
// the bias gradient of a linear plan (hw = 1) or of a 1x1 convolution (hw > 1).
std::vector<float> cpu_bias_grad(DType t, bool nhwc, const Bytes& dy, int64_t n, int64_t c, int64_t h, int64_t w) {
  auto& b = cpu();
  std::vector<float> db(static_cast<size_t>(c));
  if (h * w == 1 && !nhwc) {
    squall::nn::LinearDesc d;
    d.n = n, d.in = 1, d.out = c, d.dtype = t;
    auto plan = b.make_linear(d);
    const Bytes x = random_typed(t, static_cast<size_t>(n), 21);
    const std::vector<float> weights(static_cast<size_t>(c), 0.5f), bias(static_cast<size_t>(c), 0.0f);
    std::vector<float> dw(static_cast<size_t>(c));
    Bytes y(dy.size());
    plan->forward(cpu_stream(), x.data(), weights.data(), bias.data(), y.data());
    plan->backward_weights(cpu_stream(), x.data(), dy.data(), dw.data(), db.data());
    return db;
  }
  squall::nn::ConvDesc d;
  d.n = n, d.c = 1, d.h = h, d.w = w, d.k = c, d.r = 1, d.s = 1, d.dtype = t;
  d.layout = nhwc ? Layout::nhwc : Layout::nchw;
  auto plan = b.make_conv(d);
  const Bytes x = random_typed(t, static_cast<size_t>(n * h * w), 22);
  const std::vector<float> weights(static_cast<size_t>(c), 0.5f), bias(static_cast<size_t>(c), 0.0f);
  std::vector<float> dw(static_cast<size_t>(c));
  Bytes y(dy.size());
  plan->forward(cpu_stream(), x.data(), weights.data(), bias.data(), y.data());
  plan->backward_weights(cpu_stream(), x.data(), dy.data(), dw.data(), db.data());
  return db;
}

}  // namespace

TEST_CASE("bias_grad: two passes over (channel, part), as the exact sum and the CPU", "[cuda-host][kernels]") {
  struct Shape {
    int64_t n, c, h, w;
  };
  // A 3-class output over many pixels (several parts per channel, the last part short), a
  // linear layer's bias, and enough channels that the block cap limits the parts.
  const std::vector<Shape> shapes{{2, 3, 301, 299}, {37, 11, 1, 1}, {2, 300, 50, 41}};
  for (const Shape& s : shapes)
    for (DType t : float_types())
      for (const bool nhwc : {false, true}) {
        if (s.h * s.w == 1 && nhwc) continue;
        const int64_t hw = s.h * s.w;
        INFO(type_name(t) << (nhwc ? " nhwc " : " nchw ") << s.n << "x" << s.c << "x" << hw);
        const size_t count = static_cast<size_t>(s.n * s.c * hw);
        const Bytes dy = random_typed(t, count, 23, -1.0f, 1.5f);
        const std::vector<float> dyf = widen(t, dy);
        if (s.c == 3) CHECK(emu::bias_grad_parts(s.n, s.c, hw) > 1);  // the two passes really split

        std::vector<float> scratch(emu::bias_grad_scratch_floats(s.n, s.c, hw), std::nanf(""));
        std::vector<float> got(static_cast<size_t>(s.c), std::nanf(""));
        emu::bias_grad(code(t), nhwc, dy.data(), got.data(), s.n, s.c, hw, t != DType::f32, scratch.data());
        const std::vector<float> want = cpu_bias_grad(t, nhwc, dy, s.n, s.c, s.h, s.w);

        for (int64_t ch = 0; ch < s.c; ++ch) {
          long double exact = 0.0L, magnitude = 0.0L;
          for (int64_t i = 0; i < s.n; ++i)
            for (int64_t p = 0; p < hw; ++p) {
              const float v = dyf[static_cast<size_t>(nhwc ? (i * hw + p) * s.c + ch : (i * s.c + ch) * hw + p)];
              exact += v;
              magnitude += std::abs(v);
            }
          // Rounded as the kernel rounds: to f32, then to t for reduced precision.
          const float exact_f = static_cast<float>(exact);
          const float ref = t == DType::f32 ? exact_f : widen(t, to_type(t, {exact_f}))[0];
          INFO("channel " << ch << ": got " << got[ch] << ", exact " << ref << ", CPU " << want[ch]);
          // The kernel's double sum is exact to far below a float ulp: one ulp of the result
          // type covers a rounding tie broken the other way.
          CHECK(std::abs(got[ch] - ref) <= ulp(t, ref));
          // The CPU (oneDNN) sums in f32: its rounding error, at most count * 2^-24 * sum |dy|,
          // plus one ulp of the result type.
          const double cpu_tol = static_cast<double>(s.n * hw) * std::ldexp(1.0, -24) * static_cast<double>(magnitude);
          CHECK(std::abs(static_cast<double>(got[ch]) - want[ch]) <= cpu_tol + ulp(t, want[ch]));
        }
      }
}

TEST_CASE("bias_grad in NHWC sums groups of channels per 16-byte access, each as its own block would",
          "[cuda-host][kernels]") {
  struct Shape {
    int64_t n, c, hw;
  };
  // Several parts per channel, and few; 16 and 32 channels (whole groups of 8 and of 4).
  const std::vector<Shape> shapes{{2, 16, 301 * 7}, {3, 32, 50}, {1, 16, 9}};
  for (const Shape& s : shapes)
    for (DType t : float_types()) {
      INFO(type_name(t) << " " << s.n << "x" << s.c << "x" << s.hw);
      const size_t e = squall::nn::dtype_size(t), count = static_cast<size_t>(s.n * s.c * s.hw);
      const Bytes dy = random_typed(t, count, 29, -1.0f, 1.5f);
      // The same values one element past a 16-byte boundary: the launch takes one channel
      // per block there.
      std::vector<unsigned char> store(count * e + 64), other(count * e + 96);
      const auto place = [](std::vector<unsigned char>& v, size_t off) {
        return v.data() + (64 - reinterpret_cast<uintptr_t>(v.data()) % 64) % 64 + off;
      };
      unsigned char* base = place(store, 0);
      unsigned char* shifted = place(other, e);
      std::memcpy(base, dy.data(), dy.size());
      std::memcpy(shifted, dy.data(), dy.size());
      REQUIRE(emu::bias_grad_by_groups(code(t), true, base, s.c));
      REQUIRE_FALSE(emu::bias_grad_by_groups(code(t), true, shifted, s.c));
      std::vector<float> grouped(static_cast<size_t>(s.c)), single(static_cast<size_t>(s.c));
      std::vector<float> scratch(emu::bias_grad_scratch_floats(s.n, s.c, s.hw));
      emu::bias_grad(code(t), true, base, grouped.data(), s.n, s.c, s.hw, t != DType::f32, scratch.data());
      emu::bias_grad(code(t), true, shifted, single.data(), s.n, s.c, s.hw, t != DType::f32, scratch.data());
      require_same_bits(grouped, single, "bias gradient by groups and by single channels");
    }
}

TEST_CASE("bias_grad of an empty batch is zero", "[cuda-host][kernels]") {
  std::vector<float> db(4, 1.0f);
  emu::bias_grad(0, false, nullptr, db.data(), 0, 4, 10, false, nullptr);
  for (float v : db) CHECK(v == 0.0f);
}

TEST_CASE("softmax cross-entropy: the CPU's gradient bits and its loss", "[cuda-host][kernels]") {
  struct Case {
    int64_t n, classes, hw;
    bool weights;
  };
  for (const Case& k : {Case{2, 5, 3001, true}, Case{37, 10, 1, false}, Case{1, 3, 70000, true}})
    for (DType t : float_types()) {
      INFO(type_name(t) << " " << k.n << "x" << k.classes << "x" << k.hw);
      const size_t pixels = static_cast<size_t>(k.n * k.hw), count = pixels * static_cast<size_t>(k.classes);
      const Bytes logits = random_typed(t, count, 31, -4.0f, 4.0f);
      std::mt19937 gen(32);
      std::uniform_int_distribution<int32_t> label(-1, static_cast<int32_t>(k.classes) - 1);
      std::vector<int32_t> labels(pixels);
      for (auto& l : labels) l = label(gen);
      const std::vector<float> weights = random_floats(static_cast<size_t>(k.classes), 33, 0.5f, 2.0f);
      const float* cw = k.weights ? weights.data() : nullptr;
      const float grad_scale = 0.5f;
      const size_t e = squall::nn::dtype_size(t);

      Bytes want(count * e), got(count * e);
      float want_loss = 0.0f, got_loss = std::nanf("");
      cpu().softmax_cross_entropy(cpu_stream(), t, logits.data(), labels.data(), cw, k.n, k.classes, k.hw,
                                  want.data(), &want_loss, &grad_scale);
      std::vector<float> scratch(emu::loss_scratch_floats(static_cast<int64_t>(pixels)), std::nanf(""));
      emu::softmax_cross_entropy(code(t), logits.data(), labels.data(), cw, k.n, k.classes, k.hw, got.data(), &got_loss,
                                 &grad_scale, scratch.data());
      // The gradient's arithmetic is per pixel and the CPU's, and the weight sum (floats of
      // 24 bits, at most 2^17 of them, added in double) is exact in any order. Bit for bit
      // here, where expf is the host's for both; a GPU's expf may differ in the last bit.
      require_same_bits(got, want, e, "dlogits");
      // The loss sum is in double in another order: one float ulp.
      INFO("loss " << got_loss << " vs CPU " << want_loss);
      CHECK(std::abs(got_loss - want_loss) <= ulp(DType::f32, want_loss));
    }
}

TEST_CASE("softmax cross-entropy: ignored pixels and a label out of range", "[cuda-host][kernels]") {
  const int64_t n = 1, classes = 4, hw = 600;
  const Bytes logits = random_typed(DType::f32, static_cast<size_t>(classes * hw), 34);
  std::vector<int32_t> labels(static_cast<size_t>(hw), -1);
  std::vector<float> dlogits(static_cast<size_t>(classes * hw), 1.0f), scratch(emu::loss_scratch_floats(hw));
  float loss = std::nanf("");
  emu::softmax_cross_entropy(0, logits.data(), labels.data(), nullptr, n, classes, hw, dlogits.data(), &loss, nullptr,
                             scratch.data());
  CHECK(loss == 0.0f);  // every label ignored: zero loss, zero gradient (as the CPU)
  for (float g : dlogits) REQUIRE(g == 0.0f);

  labels[hw - 3] = static_cast<int32_t>(classes);  // the CPU throws; the device writes NaN
  emu::softmax_cross_entropy(0, logits.data(), labels.data(), nullptr, n, classes, hw, dlogits.data(), &loss, nullptr,
                             scratch.data());
  CHECK(std::isnan(loss));
}

TEST_CASE("argmax_channels and accumulate_confusion match the CPU exactly", "[cuda-host][kernels]") {
  const int64_t n = 3, c = 6, hw = 4099;
  const size_t pixels = static_cast<size_t>(n * hw);
  // Few distinct values, so that ties (lowest class wins) are common.
  std::vector<float> f = random_floats(pixels * static_cast<size_t>(c), 41, 0.0f, 4.0f);
  for (auto& v : f) v = std::floor(v);
  for (DType t : float_types()) {
    INFO(type_name(t));
    const Bytes x = to_type(t, f);
    std::vector<int32_t> want(pixels, -7), got(pixels, -7);
    cpu().argmax_channels(cpu_stream(), t, x.data(), want.data(), n, c, hw);
    emu::argmax_channels(code(t), x.data(), got.data(), n, c, hw);
    require_same_bits(got.data(), want.data(), pixels, 4, "argmax");
  }
  std::mt19937 gen(42);
  std::uniform_int_distribution<int32_t> any(-1, static_cast<int32_t>(c));  // -1 and c are skipped
  std::vector<int32_t> labels(pixels), pred(pixels);
  for (size_t i = 0; i < pixels; ++i) labels[i] = any(gen), pred[i] = any(gen);
  std::vector<int32_t> want(static_cast<size_t>(c * c), 5), got = want;
  cpu().accumulate_confusion(cpu_stream(), labels.data(), pred.data(), pixels, c, want.data());
  emu::accumulate_confusion(labels.data(), pred.data(), pixels, c, got.data());
  require_same_bits(got.data(), want.data(), want.size(), 4, "confusion");
}

TEST_CASE("sum_squares: the exact sum within a float ulp, as the CPU", "[cuda-host][kernels]") {
  // One block's worth, a partial grid, and past the block cap (each thread loops).
  for (const size_t n : {size_t{100}, size_t{1000003}, size_t{3} * 1024 * 256 * 8 + 5}) {
    INFO("n " << n);
    const std::vector<float> x = random_floats(n, 51, -3.0f, 3.0f);
    float want = 0.0f, got = std::nanf("");
    std::vector<float> scratch(emu::reduce_scratch_floats(n), std::nanf(""));
    cpu().sum_squares(cpu_stream(), x.data(), n, &want);
    emu::sum_squares(x.data(), n, &got, scratch.data());
    long double exact = 0.0L;
    for (float v : x) exact += static_cast<long double>(v) * v;
    INFO("got " << got << ", CPU " << want << ", exact " << static_cast<double>(exact));
    CHECK(std::abs(static_cast<long double>(got) - exact) <= ulp(DType::f32, static_cast<double>(exact)));
    CHECK(std::abs(got - want) <= ulp(DType::f32, want));
  }
  float out = 1.0f;
  emu::sum_squares(nullptr, 0, &out, nullptr);
  CHECK(out == 0.0f);
}

namespace {

// Lane 0's value after __shfl_down_sync steps with offsets 16, 8, 4, 2, 1 (kernel_util.cuh's
// block_sum), written as the recursion it amounts to: at offset o, lane l holds its value
// from offset 2o plus lane l + o's.
double shuffle_tree(const std::vector<double>& v, size_t warp, size_t lane, size_t offset) {
  if (offset == 32) return v[warp * 32 + lane];
  return shuffle_tree(v, warp, lane, 2 * offset) + shuffle_tree(v, warp, lane + offset, 2 * offset);
}

}  // namespace

TEST_CASE("the emulated block_sum adds in the device's order", "[cuda-host][kernels]") {
  // Values of many magnitudes, so that almost any other order of the additions rounds
  // differently somewhere.
  std::mt19937 gen(81);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 40);
  std::vector<double> v(256);
  for (auto& x : v) x = std::ldexp(mantissa(gen), exponent(gen));
  double want = 0.0;  // thread 0 adds the warps' sums in warp order
  for (size_t w = 0; w < 8; ++w) want += shuffle_tree(v, w, 0, 1);
  double sequential = 0.0;
  for (double x : v) sequential += x;
  REQUIRE(want != sequential);
  CHECK(emu::block_sum(v) == want);
}
