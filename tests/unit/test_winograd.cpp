// squall's Winograd F(2x2, 3x3) forward (src/cpu/cpu_winograd.hpp), the forward-only
// convolution of 8-channel blocked activations where oneDNN 2.6 has no Winograd kernel (AVX2).
//
// Tolerance: Winograd computes each output as a different sum from the direct form's (the
// input and filter are combined first, the products summed over channels, then combined
// again), so it rounds differently; with inputs of order 1 the relative L2 difference from a
// double-precision reference or oneDNN's direct kernel is some 1e-7, and 1e-5 leaves room for
// the larger channel counts. A wrong coefficient in any transform, a missing edge zero or a
// write outside the output changes whole outputs by their own size (relative L2 of order 1).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/cpu/cpu_winograd.hpp"
#include "src/nn/backend.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/test_backend.hpp"

using namespace squall;
using nn::Layout;

namespace {

struct Case {
  int64_t n, c, k, h, w, pad_h, pad_w;
  bool bias, relu, fold;
};

// Odd and even sizes (edge tiles half outside the output), a single pixel, both paddings,
// 8 to 64 channels in and out (8 and 24: a panel of 8 output channels at the end).
const Case k_cases[] = {
    {2, 16, 24, 7, 9, 1, 1, true, false, false},  {1, 24, 16, 6, 9, 0, 0, true, true, false},
    {1, 8, 8, 1, 1, 1, 1, true, false, false},    {3, 8, 16, 3, 3, 0, 0, false, false, false},
    {1, 16, 8, 5, 4, 1, 0, true, true, true},     {2, 64, 64, 12, 18, 1, 1, true, true, true},
    {1, 64, 24, 9, 7, 0, 1, false, true, false},  {2, 8, 64, 10, 13, 1, 1, false, false, true},
    {1, 32, 32, 4, 70, 1, 1, true, false, false},  // rows of tiles in more than one piece each
};

nn::ConvDesc desc_of(const Case& cc) {
  nn::ConvDesc d;
  d.n = cc.n, d.c = cc.c, d.k = cc.k, d.h = cc.h, d.w = cc.w, d.r = d.s = 3;
  d.pad_h = cc.pad_h, d.pad_w = cc.pad_w;
  d.bias = cc.bias;
  d.relu = cc.relu;
  d.fold_batch_norm = cc.fold;
  d.backward = false;
  d.layout = Layout::nchw8c;
  return d;
}

std::string name_of(const Case& cc) {
  return std::to_string(cc.n) + "x" + std::to_string(cc.c) + "x" + std::to_string(cc.h) + "x" + std::to_string(cc.w) +
         " -> " + std::to_string(cc.k) + " pad " + std::to_string(cc.pad_h) + "," + std::to_string(cc.pad_w) +
         (cc.bias ? " bias" : "") + (cc.relu ? " relu" : "") + (cc.fold ? " folded batch norm" : "");
}

// The convolution in double precision, straight from its definition, x and y in nChw8c.
std::vector<float> reference(const nn::ConvDesc& d, const std::vector<float>& x, const std::vector<float>& w,
                             const float* bias) {
  const nn::Shape out = d.output();
  const int64_t p = out.h(), q = out.w();
  std::vector<float> y(static_cast<size_t>(out.numel()));
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < d.k; ++o)
      for (int64_t i = 0; i < p; ++i)
        for (int64_t j = 0; j < q; ++j) {
          double sum = bias != nullptr ? bias[o] : 0.0;
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t r = 0; r < 3; ++r)
              for (int64_t s = 0; s < 3; ++s) {
                const int64_t yy = i + r - d.pad_h, xx = j + s - d.pad_w;
                if (yy < 0 || yy >= d.h || xx < 0 || xx >= d.w) continue;
                const float xv = x[static_cast<size_t>((((n * d.c / 8 + c / 8) * d.h + yy) * d.w + xx) * 8 + c % 8)];
                sum += double(xv) * w[static_cast<size_t>(((o * d.c + c) * 3 + r) * 3 + s)];
              }
          if (d.relu) sum = std::max(sum, 0.0);
          y[static_cast<size_t>((((n * d.k / 8 + o / 8) * p + i) * q + j) * 8 + o % 8)] = static_cast<float>(sum);
        }
  return y;
}

}  // namespace

TEST_CASE("winograd: which convolutions the F(2x2, 3x3) forward takes", "[winograd]") {
  nn::ConvDesc d;
  d.n = 2, d.c = 16, d.k = 32, d.h = 12, d.w = 10, d.r = d.s = 3, d.pad_h = d.pad_w = 1;
  d.layout = Layout::nchw8c;
  CHECK(cpu::winograd::eligible(d));
  d.pad_h = d.pad_w = 0;
  CHECK(cpu::winograd::eligible(d));
  auto refused = [&](auto change) {
    nn::ConvDesc e = d;
    change(e);
    return !cpu::winograd::eligible(e);
  };
  CHECK(refused([](nn::ConvDesc& e) { e.stride_h = 2; }));
  CHECK(refused([](nn::ConvDesc& e) { e.dil_w = 2; }));
  CHECK(refused([](nn::ConvDesc& e) { e.pad_h = 2; }));
  CHECK(refused([](nn::ConvDesc& e) { e.r = e.s = 5; }));
  CHECK(refused([](nn::ConvDesc& e) { e.r = e.s = 1; }));
  CHECK(refused([](nn::ConvDesc& e) { e.c = 12; }));
  CHECK(refused([](nn::ConvDesc& e) { e.k = 20; }));
  CHECK(refused([](nn::ConvDesc& e) { e.layout = Layout::nchw16c; }));
  CHECK(refused([](nn::ConvDesc& e) { e.out_layout = Layout::nchw; }));
  CHECK(refused([](nn::ConvDesc& e) { e.layout = Layout::nchw; }));
  CHECK(refused([](nn::ConvDesc& e) { e.transposed = true; }));
  CHECK(refused([](nn::ConvDesc& e) { e.dtype = nn::DType::bf16; }));
}

TEST_CASE("winograd: the F(2x2, 3x3) forward computes the convolution's definition", "[winograd][isa]") {
  if (!cpu::winograd::cpu_supported()) SQUALL_SKIP("this CPU lacks AVX2 or FMA");
  for (const Case& cc : k_cases) {
    INFO(name_of(cc));
    nn::ConvDesc d = desc_of(cc);
    d.fold_batch_norm = false;  // the kernel takes whatever weights it is given
    const nn::Shape out = d.output();
    const auto x = test::random_floats(static_cast<size_t>(d.n * d.c * d.h * d.w), 31);
    const auto w = test::random_floats(static_cast<size_t>(d.weight().numel()), 32, 0.3f);
    const auto b = test::random_floats(static_cast<size_t>(d.k), 33);
    const float* bias = cc.bias ? b.data() : nullptr;
    cpu::winograd::Forward f(d);
    f.set_weights(w.data());
    // A guard after the output (a row and more): the edge tiles write only inside it.
    const size_t count = static_cast<size_t>(out.numel()), guard = static_cast<size_t>(8 * out.w() + 64);
    std::vector<float> y(count + guard, std::numeric_limits<float>::quiet_NaN());
    f.run(x.data(), bias, d.relu, y.data());
    const std::vector<float> got(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(count));
    const auto want = reference(d, x, w, bias);
    for (size_t i = count; i < y.size(); ++i) REQUIRE(std::isnan(y[i]));
    size_t finite = 0;
    for (float v : got) finite += std::isfinite(v) ? 1 : 0;
    CHECK(finite == count);  // every output written
    CHECK(test::relative_l2(got, want) < 1e-5);
    // Other weights, the same plan: transformed again.
    const auto w2 = test::random_floats(w.size(), 34, 0.3f);
    f.set_weights(w2.data());
    f.run(x.data(), bias, d.relu, y.data());
    CHECK(test::relative_l2(std::vector<float>(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(count)),
                            reference(d, x, w2, bias)) < 1e-5);
  }
}

// The plan's Winograd against oneDNN's direct kernel: a training plan (backward = true never
// takes Winograd) given the weights and bias with the batch norm folded in as the
// forward-only plan folds them.
TEST_CASE("winograd: a forward-only nChw8c plan computes what oneDNN's direct kernel computes", "[winograd][isa]") {
  if (!cpu::winograd::cpu_supported()) SQUALL_SKIP("this CPU lacks AVX2 or FMA");
  cpu::CpuBackend cpu(2);
  auto s = cpu.create_stream();
  for (const Case& cc : k_cases) {
    INFO(name_of(cc));
    const nn::ConvDesc d = desc_of(cc);
    const nn::Shape out = d.output();
    const auto x = test::random_floats(static_cast<size_t>(d.n * d.c * d.h * d.w), 41);
    const auto w = test::random_floats(static_cast<size_t>(d.weight().numel()), 42, 0.3f);
    const auto b = test::random_floats(static_cast<size_t>(d.k), 43);
    std::vector<float> bn = test::random_floats(static_cast<size_t>(4 * d.k), 44, 0.5f);  // gamma, beta, mean, var
    const float *gamma = bn.data(), *beta = gamma + d.k, *mean = beta + d.k;
    float* var = bn.data() + 3 * d.k;
    for (int64_t o = 0; o < d.k; ++o) var[o] = 0.3f + std::abs(var[o]);

    auto plan = cpu.make_conv(d);
    const std::string impl = cpu::conv_forward_info(*plan).implementation;
    INFO("implementation " << impl);
    if (impl.find("wino") != std::string::npos) CHECK(impl == cpu::winograd::k_impl_name);
    if (cc.fold) plan->bind_batch_norm(gamma, beta, mean, var);

    nn::ConvDesc direct = d;
    direct.backward = true;
    direct.fold_batch_norm = false;
    direct.bias = cc.bias || cc.fold;
    std::vector<float> wd = w, bd(static_cast<size_t>(d.k));
    for (int64_t o = 0; o < d.k; ++o) {
      const float scale = cc.fold ? gamma[o] / std::sqrt(var[o] + d.bn_eps) : 1.0f;
      const float bias = cc.bias ? b[static_cast<size_t>(o)] : 0.0f;
      bd[static_cast<size_t>(o)] = cc.fold ? (bias - mean[o]) * scale + beta[o] : bias;
      for (int64_t j = 0; j < d.c * 9; ++j) wd[static_cast<size_t>(o * d.c * 9 + j)] *= scale;
    }
    auto reference_plan = cpu.make_conv(direct);
    REQUIRE(cpu::conv_forward_info(*reference_plan).implementation.find("wino") == std::string::npos);

    // Room after the outputs (a row): a write past the end fails the comparison, not the heap.
    const auto count = static_cast<size_t>(out.numel()), room = static_cast<size_t>(8 * out.w() + 64);
    nn::Buffer xb = cpu.allocate(x.size()), y = cpu.allocate(count + room), yd = cpu.allocate(count + room);
    cpu.copy_from_host(*s, xb.data(), x.data(), x.size());
    plan->forward(*s, xb.raw(), w.data(), cc.bias ? b.data() : nullptr, y.raw());
    reference_plan->forward(*s, xb.raw(), wd.data(), direct.bias ? bd.data() : nullptr, yd.raw());
    const auto got = test::download(cpu, y.data(), count), want = test::download(cpu, yd.data(), count);
    CHECK(test::relative_l2(got, want) < 1e-5);
  }
}

// Where oneDNN computes f32 in nChw8c (AVX2: ONEDNN_MAX_CPU_ISA=AVX2 on a larger CPU, which
// the [isa] rerun sets) it has no Winograd kernel, and the U-Net's middle layers take squall's.
// [avx2-layout]: it skips where oneDNN's f32 layout is not AVX2's (an AVX-512 CPU without the
// ISA cap), so the async-streams:all entries leave it out (a skip would report the whole entry
// as skipped); unit:isa-avx2 runs it under the cap.
TEST_CASE("winograd: forward-only plans in the AVX2 layout take squall's Winograd for the U-Net's middle layers",
          "[winograd][isa][avx2-layout]") {
  if (!cpu::winograd::cpu_supported()) SQUALL_SKIP("this CPU lacks AVX2 or FMA");
  cpu::CpuBackend cpu(2);
  const Layout blocked = cpu.capabilities().blocked_layout_for(nn::DType::f32);
  if (blocked != Layout::nchw8c)
    SQUALL_SKIP("oneDNN computes f32 in " << nn::layout_name(blocked)
                                          << " here (AVX-512: its own Winograd F(4x4, 3x3) serves it)");
  struct Layer {
    int64_t c, k, h, w;
  };
  for (const Layer& l : {Layer{16, 32, 48, 72}, Layer{32, 32, 48, 72}, Layer{64, 64, 24, 36}}) {
    nn::ConvDesc d;
    d.n = 8, d.c = l.c, d.k = l.k, d.h = l.h, d.w = l.w, d.r = d.s = 3, d.pad_h = d.pad_w = 1;
    d.layout = blocked;
    d.backward = false;
    d.fold_batch_norm = true;
    d.relu = true;
    INFO(d.c << " -> " << d.k << " at " << d.h << "x" << d.w);
    CHECK(cpu::conv_forward_info(*cpu.make_conv(d)).implementation == cpu::winograd::k_impl_name);
    d.backward = true;  // training keeps oneDNN's kernels
    d.fold_batch_norm = false;
    CHECK(cpu::conv_forward_info(*cpu.make_conv(d)).implementation != cpu::winograd::k_impl_name);
  }
}
