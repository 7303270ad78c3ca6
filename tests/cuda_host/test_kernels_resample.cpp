// Global average pooling and bilinear resizing, emulated on the host, against the CPU
// backend: the bilinear forward and the thread gather of the backward bit for bit; the block
// gather of the backward (large fan-in) and the pooling's warp sums within stated tolerances.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/cuda_host/kernels_check.hpp"

using namespace squall::test::kernels;
namespace emu = squall::test::emulated;

namespace {

struct Resize {
  int64_t h, w, oh, ow;
};

}  // namespace

TEST_CASE("global average pooling: the CPU's mean, its gradient bit for bit", "[cuda-host][kernels]") {
  const int64_t nc = 37, hw = 1013;
  for (DType t : float_types()) {
    INFO(type_name(t));
    const size_t e = squall::nn::dtype_size(t);
    const Bytes x = random_typed(t, static_cast<size_t>(nc * hw), 61);
    const std::vector<float> xf = widen(t, x);
    Bytes want(static_cast<size_t>(nc) * e), got(want.size());
    cpu().global_avg_pool_forward(cpu_stream(), t, x.data(), want.data(), nc, hw);
    emu::global_avg_pool_forward(code(t), x.data(), got.data(), nc, hw);
    const std::vector<float> gf = widen(t, got), wf = widen(t, want);
    for (int64_t r = 0; r < nc; ++r) {
      double magnitude = 0.0;
      for (int64_t j = 0; j < hw; ++j) magnitude += std::abs(xf[static_cast<size_t>(r * hw + j)]);
      // Both sum in f32 in different orders (32 lanes and a shuffle tree, the CPU's SIMD
      // lanes): each within hw * 2^-24 * sum |x| of the exact sum, then scaled by 1 / hw
      // and rounded to t.
      const double tol = 2.0 * std::ldexp(1.0, -24) * magnitude + ulp(t, wf[r]);
      INFO("row " << r << ": got " << gf[r] << ", CPU " << wf[r]);
      CHECK(std::abs(static_cast<double>(gf[r]) - wf[r]) <= tol);
    }
    const Bytes dy = random_typed(t, static_cast<size_t>(nc), 62);
    Bytes want_dx(static_cast<size_t>(nc * hw) * e), got_dx(want_dx.size());
    cpu().global_avg_pool_backward(cpu_stream(), t, dy.data(), want_dx.data(), nc, hw);
    emu::global_avg_pool_backward(code(t), dy.data(), got_dx.data(), nc, hw);
    require_same_bits(got_dx, want_dx, e, "global_avg_pool backward");
  }
}

TEST_CASE("bilinear forward and the thread gather backward match the CPU bit for bit", "[cuda-host][kernels]") {
  const int64_t nc = 6;
  // Up, down, odd ratios, an axis of one, and the largest 4x upsampling kept on the gather.
  const std::vector<Resize> shapes{{5, 7, 11, 13}, {8, 8, 16, 16}, {16, 16, 7, 5}, {3, 1, 7, 4},
                                   {9, 10, 9, 10}, {1, 3, 5, 6},   {12, 15, 48, 60}};
  for (const Resize& r : shapes)
    for (DType t : float_types()) {
      INFO(type_name(t) << " " << r.h << "x" << r.w << " -> " << r.oh << "x" << r.ow);
      const size_t e = squall::nn::dtype_size(t);
      const size_t in = static_cast<size_t>(nc * r.h * r.w), out = static_cast<size_t>(nc * r.oh * r.ow);
      const Bytes x = random_typed(t, in, 63);
      Bytes want(out * e), got(out * e);
      cpu().bilinear_forward(cpu_stream(), t, x.data(), want.data(), nc, r.h, r.w, r.oh, r.ow);
      emu::bilinear_forward(code(t), x.data(), got.data(), nc, r.h, r.w, r.oh, r.ow);
      require_same_bits(got, want, e, "bilinear forward");

      REQUIRE_FALSE(emu::bilinear_block_path(r.h, r.w, r.oh, r.ow));
      const Bytes dy = random_typed(t, out, 64);
      Bytes want_dx(in * e), got_dx(in * e);
      cpu().bilinear_backward(cpu_stream(), t, dy.data(), want_dx.data(), nc, r.h, r.w, r.oh, r.ow);
      emu::bilinear_backward(code(t), dy.data(), got_dx.data(), nc, r.h, r.w, r.oh, r.ow);
      require_same_bits(got_dx, want_dx, e, "bilinear backward (gather)");
    }
}

TEST_CASE("bilinear backward from a tiny input: the block gather's sum", "[cuda-host][kernels]") {
  const int64_t nc = 3;
  // DeepLabv3+'s image pooling (1x1 to the feature map), and a 2x3 input upsampled 48x.
  const std::vector<Resize> shapes{{1, 1, 97, 129}, {2, 3, 96, 144}};
  for (const Resize& r : shapes)
    for (DType t : float_types()) {
      INFO(type_name(t) << " " << r.h << "x" << r.w << " -> " << r.oh << "x" << r.ow);
      REQUIRE(emu::bilinear_block_path(r.h, r.w, r.oh, r.ow));
      const size_t e = squall::nn::dtype_size(t);
      const size_t in_plane = static_cast<size_t>(r.h * r.w), out_plane = static_cast<size_t>(r.oh * r.ow);
      const Bytes dy = random_typed(t, static_cast<size_t>(nc) * out_plane, 65);
      const std::vector<float> dyf = widen(t, dy);
      Bytes want(static_cast<size_t>(nc) * in_plane * e), got(want.size());
      cpu().bilinear_backward(cpu_stream(), t, dy.data(), want.data(), nc, r.h, r.w, r.oh, r.ow);
      emu::bilinear_backward(code(t), dy.data(), got.data(), nc, r.h, r.w, r.oh, r.ow);
      const std::vector<float> gf = widen(t, got), wf = widen(t, want);

      // The weight with which each output reads input element k: the CPU's forward of a one-hot
      // plane (the products of the two taps' weights, rounded as the backward rounds them).
      for (size_t k = 0; k < in_plane; ++k) {
        std::vector<float> onehot(in_plane, 0.0f), weight(out_plane);
        onehot[k] = 1.0f;
        squall::nn::bilinear_forward(cpu(), cpu_stream(), onehot.data(), weight.data(), 1, r.h, r.w, r.oh, r.ow);
        for (int64_t plane = 0; plane < nc; ++plane) {
          long double exact = 0.0L, magnitude = 0.0L;
          for (size_t o = 0; o < out_plane; ++o) {
            const long double term = static_cast<long double>(weight[o]) * dyf[plane * out_plane + o];
            exact += term;
            magnitude += std::abs(term);
          }
          const size_t at = static_cast<size_t>(plane) * in_plane + k;
          const double ex = static_cast<double>(exact), mag = static_cast<double>(magnitude);
          INFO("plane " << plane << " element " << k << ": got " << gf[at] << ", exact " << ex << ", CPU " << wf[at]);
          // Each term rounded to float once (2^-24 relative), summed in double, rounded to
          // f32 and then t: within 2^-23 sum |terms| plus one ulp of t of the exact sum.
          CHECK(std::abs(gf[at] - ex) <= std::ldexp(mag, -23) + ulp(t, ex));
          // The CPU adds the same terms in float, one after another: its error grows with
          // their count, up to count * 2^-24 * sum |terms|.
          const double cpu_tol = static_cast<double>(out_plane) * std::ldexp(mag, -24) + ulp(t, ex);
          CHECK(std::abs(static_cast<double>(gf[at]) - wf[at]) <= cpu_tol + std::ldexp(mag, -23));
        }
      }
    }
}
