// The element-wise and data-movement kernels, emulated on the host, against the CPU backend:
// bit for bit (docs/design.md, "Backends": element-wise results, the dropout mask,
// conversions and permutes are exact), at f32, bf16 and f16.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tests/cuda_host/kernels_check.hpp"

using namespace squall::test::kernels;
namespace emu = squall::test::emulated;
using squall::nn::Layout;

namespace {

// Sizes: a partial last block, and one past the grid cap (kMaxBlocks * kThreads = 8 Mi
// elements), where each thread loops.
constexpr size_t kOdd = 70001;
constexpr size_t kPastGridCap = (size_t{32768} * 256) + 4099;

}  // namespace

TEST_CASE("relu, add, multiply and dropout match the CPU bit for bit", "[cuda-host][kernels]") {
  for (DType t : float_types()) {
    const size_t e = squall::nn::dtype_size(t);
    INFO("type " << type_name(t));
    const Bytes a = random_typed(t, kOdd, 1), b = random_typed(t, kOdd, 2), dy = random_typed(t, kOdd, 3);
    Bytes want(kOdd * e), got(kOdd * e), want_mask(kOdd * e), got_mask(kOdd * e);

    cpu().relu_forward(cpu_stream(), t, a.data(), want.data(), kOdd);
    emu::relu_forward(code(t), a.data(), got.data(), kOdd);
    require_same_bits(got, want, e, "relu forward");

    cpu().relu_backward(cpu_stream(), t, a.data(), dy.data(), want.data(), kOdd);
    emu::relu_backward(code(t), a.data(), dy.data(), got.data(), kOdd);
    require_same_bits(got, want, e, "relu backward");

    cpu().add(cpu_stream(), t, a.data(), b.data(), want.data(), kOdd);
    emu::add(code(t), a.data(), b.data(), got.data(), kOdd);
    require_same_bits(got, want, e, "add");

    cpu().multiply(cpu_stream(), t, a.data(), b.data(), want.data(), kOdd);
    emu::multiply(code(t), a.data(), b.data(), got.data(), kOdd);
    require_same_bits(got, want, e, "multiply");

    for (const float p : {0.0f, 0.3f, 0.5f, 1.0f}) {
      INFO("p " << p);
      cpu().dropout_forward(cpu_stream(), t, a.data(), want.data(), want_mask.data(), kOdd, p, 1234, 77);
      emu::dropout_forward(code(t), a.data(), got.data(), got_mask.data(), kOdd, p, 1234, 77);
      require_same_bits(got_mask, want_mask, e, "dropout mask");
      require_same_bits(got, want, e, "dropout output");
    }
  }
}

TEST_CASE("the element-wise grid-stride loop covers every element past the grid cap", "[cuda-host][kernels]") {
  const Bytes a = random_typed(DType::f32, kPastGridCap, 4), b = random_typed(DType::f32, kPastGridCap, 5);
  Bytes want(a.size()), got(a.size(), 0xff);
  cpu().add(cpu_stream(), DType::f32, a.data(), b.data(), want.data(), kPastGridCap);
  emu::add(0, a.data(), b.data(), got.data(), kPastGridCap);
  require_same_bits(got, want, 4, "add");
}

TEST_CASE("axpy, scale, axpby and fill match the CPU bit for bit", "[cuda-host][kernels]") {
  const std::vector<float> x = random_floats(kOdd, 6), y0 = random_floats(kOdd, 7, -100.0f, 100.0f);
  std::vector<float> want = y0, got = y0;
  cpu().axpy(cpu_stream(), 0.37f, x.data(), want.data(), kOdd);
  emu::axpy(0.37f, x.data(), got.data(), kOdd);
  require_same_bits(got, want, "axpy");

  cpu().scale(cpu_stream(), -1.3f, want.data(), kOdd);
  emu::scale(-1.3f, got.data(), kOdd);
  require_same_bits(got, want, "scale");

  cpu().axpby(cpu_stream(), 0.25f, x.data(), 0.75f, want.data(), kOdd);
  emu::axpby(0.25f, x.data(), 0.75f, got.data(), kOdd);
  require_same_bits(got, want, "axpby");

  cpu().fill(cpu_stream(), want.data(), kOdd - 3, 2.5f);
  emu::fill(got.data(), kOdd - 3, 2.5f);
  require_same_bits(got, want, "fill");
}

TEST_CASE("copy_strided moves the CPU's elements", "[cuda-host][kernels]") {
  const int64_t rows = 37, src_stride = 301, dst_stride = 157, count = 113, src_offset = 17, dst_offset = 29;
  for (DType t : {DType::f32, DType::bf16, DType::i32}) {
    INFO("type " << type_name(t));
    const size_t e = squall::nn::dtype_size(t);
    const Bytes src = random_typed(t == DType::i32 ? DType::f32 : t, rows * src_stride, 8);
    Bytes want(rows * dst_stride * e, 0x5a), got = want;
    cpu().copy_strided(cpu_stream(), t, want.data(), dst_stride, dst_offset, src.data(), src_stride, src_offset, rows,
                       count);
    emu::copy_strided(e, got.data(), dst_stride, dst_offset, src.data(), src_stride, src_offset, rows, count);
    require_same_bits(got, want, e, "copy_strided");
  }
}

TEST_CASE("copy_block packs, unpacks and adds halos as the CPU does", "[cuda-host][kernels]") {
  // A halo's block of a blocked tensor [outer][h][w][inner]: 5 x 7 rows of 11 x 16 elements
  // out of a 9 x 23 x 16 plane, into a dense buffer and back, copied and accumulated.
  squall::nn::BlockCopy b;
  b.outer = 5;
  b.rows = 7;
  b.count = 11 * 16;
  b.src_offset = (2 * 23 + 3) * 16;
  b.src_outer = 9 * 23 * 16;
  b.src_row = 23 * 16;
  b.dst_offset = 5;
  b.dst_outer = 7 * 11 * 16 + 3;
  b.dst_row = 11 * 16;
  const int64_t src_n = b.outer * b.src_outer, dst_n = b.outer * b.dst_outer + b.dst_offset;
  for (DType t : float_types())
    for (bool accumulate : {false, true}) {
      INFO("type " << type_name(t) << (accumulate ? ", accumulated" : ", copied"));
      const size_t e = squall::nn::dtype_size(t);
      const Bytes src = random_typed(t, static_cast<size_t>(src_n), 21);
      const Bytes start = random_typed(t, static_cast<size_t>(dst_n), 22);
      Bytes want = start, got = start;
      cpu().copy_block(cpu_stream(), t, want.data(), src.data(), b, accumulate);
      emu::copy_block(code(t), got.data(), src.data(), b, accumulate);
      require_same_bits(got, want, e, "copy_block");
      if (!accumulate) CHECK(want != start);  // it wrote something
    }
}

TEST_CASE("convert rounds as the CPU does, special values included", "[cuda-host][kernels]") {
  std::vector<float> f = random_floats(kOdd, 9, -70000.0f, 70000.0f);
  const std::vector<float> small = random_floats(4096, 10, -1e-6f, 1e-6f);  // f16 subnormals
  f.insert(f.end(), small.begin(), small.end());
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, inf, -inf, 65504.0f, 65520.0f, 65519.99f, 1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f,
                  std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(3.0f, -26), 3.4e38f,
                  std::numeric_limits<float>::denorm_min(), 1.00390625f, 1.01171875f})
    f.push_back(v);
  const size_t n = f.size();
  for (DType from : float_types())
    for (DType to : float_types()) {
      INFO(type_name(from) << " -> " << type_name(to));
      const Bytes src = to_type(from, f);
      Bytes want(n * squall::nn::dtype_size(to)), got(want.size());
      cpu().convert(cpu_stream(), src.data(), from, want.data(), to, n);
      emu::convert(src.data(), code(from), got.data(), code(to), n);
      require_same_bits(got, want, squall::nn::dtype_size(to), "convert");
    }
}

TEST_CASE("convert keeps NaN a NaN", "[cuda-host][kernels]") {
  const std::vector<float> f{std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  for (DType to : {DType::bf16, DType::f16}) {
    Bytes got(f.size() * 2);
    emu::convert(f.data(), 0, got.data(), code(to), f.size());
    for (float back : widen(to, got)) CHECK(std::isnan(back));
  }
}

TEST_CASE("permute_convert and permute_bits give the CPU's layouts", "[cuda-host][kernels]") {
  const int64_t n = 3, c = 19, h = 7, w = 11;
  const size_t count = static_cast<size_t>(n * c * h * w);
  for (DType from : float_types())
    for (DType to : float_types())
      for (const bool from_nhwc : {false, true})
        for (const bool to_nhwc : {false, true}) {
          INFO(type_name(from) << (from_nhwc ? " nhwc" : " nchw") << " -> " << type_name(to)
                               << (to_nhwc ? " nhwc" : " nchw"));
          const Bytes src = random_typed(from, count, 11);
          // The reference: the CPU's permute in the source type, then its conversion.
          Bytes moved(src.size());
          cpu().permute_layout(cpu_stream(), from, src.data(), from_nhwc ? Layout::nhwc : Layout::nchw, moved.data(),
                               to_nhwc ? Layout::nhwc : Layout::nchw, n, c, h, w);
          Bytes want(count * squall::nn::dtype_size(to)), got(want.size());
          cpu().convert(cpu_stream(), moved.data(), from, want.data(), to, count);
          emu::permute_convert(src.data(), code(from), from_nhwc, got.data(), code(to), to_nhwc, n, c, h, w);
          require_same_bits(got, want, squall::nn::dtype_size(to), "permute_convert");
        }
  for (DType t : {DType::i32, DType::f16})
    for (const bool to_nhwc : {false, true}) {
      INFO(type_name(t) << " to " << (to_nhwc ? "nhwc" : "nchw"));
      const size_t e = squall::nn::dtype_size(t);
      const Bytes src = random_typed(e == 4 ? DType::f32 : t, count, 12);
      Bytes want(src.size()), got(src.size());
      cpu().permute_layout(cpu_stream(), t, src.data(), to_nhwc ? Layout::nchw : Layout::nhwc, want.data(),
                           to_nhwc ? Layout::nhwc : Layout::nchw, n, c, h, w);
      emu::permute_bits(e, src.data(), !to_nhwc, got.data(), to_nhwc, n, c, h, w);
      require_same_bits(got, want, e, "permute_bits");
    }
}

TEST_CASE("bias_add rounds y + b once per element, in both layouts", "[cuda-host][kernels]") {
  const int64_t n = 3, c = 5, hw = 37;
  const size_t count = static_cast<size_t>(n * c * hw);
  const std::vector<float> b = random_floats(static_cast<size_t>(c), 13);
  for (DType t : float_types())
    for (const bool nhwc : {false, true}) {
      INFO(type_name(t) << (nhwc ? " nhwc" : " nchw"));
      const Bytes y0 = random_typed(t, count, 14);
      // The reference, written out: widen, add the channel's bias in f32, round to t.
      std::vector<float> sum = widen(t, y0);
      for (size_t k = 0; k < count; ++k) {
        const size_t ch = nhwc ? k % static_cast<size_t>(c) : (k / static_cast<size_t>(hw)) % static_cast<size_t>(c);
        sum[k] = sum[k] + b[ch];
      }
      const Bytes want = to_type(t, sum);
      Bytes got = y0;
      emu::bias_add(code(t), nhwc, got.data(), b.data(), n, c, hw);
      require_same_bits(got, want, squall::nn::dtype_size(t), "bias_add");
    }
}
