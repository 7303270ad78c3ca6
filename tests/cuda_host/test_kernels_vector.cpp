// The kernels' 16-byte and one-element paths (cuda/vectorised.cuh), emulated on the host,
// against the CPU backend bit for bit: every size around the vector width (the tail), every
// operand off a 16-byte boundary in turn (the launch then moves one element at a time), the
// layout permutation by tiles and by elements, the strided copy, the bias, and the 64-bit
// index path on sizes small enough to run here.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/cuda_host/kernels_check.hpp"

using namespace squall::test::kernels;
namespace emu = squall::test::emulated;
using squall::nn::Layout;

namespace {

// Memory whose data() starts `offset` bytes past a 64-byte boundary: the test, not the
// allocator, decides which path a kernel takes.
class Placed {
 public:
  Placed(size_t bytes, size_t offset) : m_store(bytes + 64 + offset, 0xa5) {
    const auto base = reinterpret_cast<uintptr_t>(m_store.data());
    m_data = m_store.data() + (64 - base % 64) % 64 + offset;
  }
  Placed(const Bytes& content, size_t offset) : Placed(content.size(), offset) {
    std::memcpy(m_data, content.data(), content.size());
  }
  unsigned char* data() { return m_data; }
  Bytes bytes(size_t count) const { return Bytes(m_data, m_data + count); }

 private:
  Bytes m_store;
  unsigned char* m_data = nullptr;
};

// Sizes around the widths (4 f32, 8 bf16/f16 elements per access), and a partial block.
const std::vector<size_t> kSizes{1, 3, 4, 7, 8, 9, 15, 16, 17, 33, 4099};

}  // namespace

TEST_CASE("element-wise kernels: the 16-byte path, its tail and unaligned operands give the CPU's bits",
          "[cuda-host][kernels]") {
  for (DType t : float_types()) {
    const size_t e = squall::nn::dtype_size(t);
    for (size_t n : kSizes)
      for (int moved = -1; moved < 3; ++moved) {  // -1: all aligned; else operand `moved` off by one element
        INFO(type_name(t) << ", " << n << " elements, operand " << moved << " unaligned");
        const size_t bytes = n * e;
        const auto offset = [&](int operand) { return operand == moved ? e : 0; };
        Placed a(random_typed(t, n, 31), offset(0)), b(random_typed(t, n, 32), offset(1)), y(bytes, offset(2));
        Placed mask(bytes, offset(2));
        Bytes want(bytes), want_mask(bytes);

        cpu().add(cpu_stream(), t, a.data(), b.data(), want.data(), n);
        emu::add(code(t), a.data(), b.data(), y.data(), n);
        require_same_bits(y.bytes(bytes), want, e, "add");

        cpu().multiply(cpu_stream(), t, a.data(), b.data(), want.data(), n);
        emu::multiply(code(t), a.data(), b.data(), y.data(), n);
        require_same_bits(y.bytes(bytes), want, e, "multiply");

        cpu().relu_forward(cpu_stream(), t, a.data(), want.data(), n);
        emu::relu_forward(code(t), a.data(), y.data(), n);
        require_same_bits(y.bytes(bytes), want, e, "relu forward");

        cpu().relu_backward(cpu_stream(), t, a.data(), b.data(), want.data(), n);
        emu::relu_backward(code(t), a.data(), b.data(), y.data(), n);
        require_same_bits(y.bytes(bytes), want, e, "relu backward");

        cpu().dropout_forward(cpu_stream(), t, a.data(), want.data(), want_mask.data(), n, 0.4f, 99, 5);
        emu::dropout_forward(code(t), a.data(), y.data(), mask.data(), n, 0.4f, 99, 5);
        require_same_bits(y.bytes(bytes), want, e, "dropout output");
        require_same_bits(mask.bytes(bytes), want_mask, e, "dropout mask");

        for (DType to : float_types()) {
          if (to == t) continue;
          INFO("convert to " << type_name(to));
          const size_t te = squall::nn::dtype_size(to);
          Placed out(n * te, moved == 2 ? te : 0);
          Bytes expected(n * te);
          cpu().convert(cpu_stream(), a.data(), t, expected.data(), to, n);
          emu::convert(a.data(), code(t), out.data(), code(to), n);
          require_same_bits(out.bytes(n * te), expected, te, "convert");
        }
      }
  }
}

TEST_CASE("f32 kernels: the 16-byte path, its tail and unaligned operands give the CPU's bits",
          "[cuda-host][kernels]") {
  for (size_t n : kSizes)
    for (const size_t off : {size_t{0}, size_t{4}, size_t{8}}) {
      INFO(n << " elements, y " << off << " bytes off");
      const std::vector<float> x = random_floats(n, 41), y0 = random_floats(n, 42);
      Bytes y0b(n * 4);
      std::memcpy(y0b.data(), y0.data(), n * 4);
      Placed xs(Bytes(reinterpret_cast<const unsigned char*>(x.data()), reinterpret_cast<const unsigned char*>(x.data() + n)), 0);
      Placed ys(y0b, off);
      auto* yp = reinterpret_cast<float*>(ys.data());
      std::vector<float> want = y0;
      cpu().axpy(cpu_stream(), 0.37f, x.data(), want.data(), n);
      emu::axpy(0.37f, reinterpret_cast<const float*>(xs.data()), yp, n);
      cpu().scale(cpu_stream(), -1.3f, want.data(), n);
      emu::scale(-1.3f, yp, n);
      cpu().axpby(cpu_stream(), 0.25f, x.data(), 0.75f, want.data(), n);
      emu::axpby(0.25f, reinterpret_cast<const float*>(xs.data()), 0.75f, yp, n);
      std::vector<float> got(n);
      std::memcpy(got.data(), yp, n * 4);
      require_same_bits(got, want, "axpy, scale, axpby");
      cpu().fill(cpu_stream(), want.data(), n, -2.5f);
      emu::fill(yp, n, -2.5f);
      std::memcpy(got.data(), yp, n * 4);
      require_same_bits(got, want, "fill");
    }
}

TEST_CASE("permute moves 16-byte tiles where channels and pixels allow, single elements elsewhere",
          "[cuda-host][kernels]") {
  struct Case {
    int64_t n, c, h, w;
    size_t offset;  // bytes off a 16-byte boundary for the source
  };
  // Tiles of 8 (a 2-byte side) need both c and h * w multiples of 8; of 4 (f32 to f32),
  // multiples of 4. 3x3 (a filter's pixels), odd channels and an offset source take the
  // one-element path; one channel or one pixel is no permutation at all.
  const std::vector<Case> cases{{2, 16, 4, 6, 0}, {1, 24, 8, 5, 0}, {2, 16, 3, 3, 0}, {3, 19, 7, 11, 0},
                                {2, 16, 4, 6, 4}, {2, 12, 2, 2, 0}, {4, 1, 5, 7, 0}, {5, 9, 1, 1, 0}};
  for (const Case& s : cases)
    for (DType from : float_types())
      for (DType to : float_types())
        for (const bool to_nhwc : {false, true}) {
          const size_t count = static_cast<size_t>(s.n * s.c * s.h * s.w);
          const size_t fe = squall::nn::dtype_size(from), te = squall::nn::dtype_size(to);
          INFO(type_name(from) << " -> " << type_name(to) << (to_nhwc ? " nhwc " : " nchw ") << s.n << "x" << s.c << "x"
                               << s.h << "x" << s.w << ", source " << s.offset << " bytes off");
          Placed src(random_typed(from, count, 51), s.offset), dst(count * te, 0);
          const int64_t hw = s.h * s.w;
          const int64_t tile = static_cast<int64_t>(16 / std::min(fe, te));
          const bool identity = s.c == 1 || hw == 1;
          if (!identity)
            CHECK(emu::permute_tiles(fe, te, src.data(), dst.data(), s.c, hw) ==
                  (s.c % tile == 0 && hw % tile == 0 && s.offset == 0));
          // The reference: the CPU's permute in the source type, then its conversion.
          Bytes moved(count * fe), want(count * te);
          const Layout from_layout = to_nhwc ? Layout::nchw : Layout::nhwc, to_layout = to_nhwc ? Layout::nhwc : Layout::nchw;
          cpu().permute_layout(cpu_stream(), from, src.data(), from_layout, moved.data(), to_layout, s.n, s.c, s.h, s.w);
          cpu().convert(cpu_stream(), moved.data(), from, want.data(), to, count);
          emu::permute_convert(src.data(), code(from), !to_nhwc, dst.data(), code(to), to_nhwc, s.n, s.c, s.h, s.w);
          require_same_bits(dst.bytes(count * te), want, te, "permute_convert");
          // The CPU backend's own one-pass operation gives the same bits.
          Bytes fused(count * te);
          cpu().permute_convert(cpu_stream(), src.data(), from, from_layout, fused.data(), to, to_layout, s.n, s.c, s.h,
                                s.w);
          require_same_bits(fused, want, te, "the CPU's permute_convert");
          if (from == to) {
            Placed bits(count * fe, 0);
            emu::permute_bits(fe, src.data(), !to_nhwc, bits.data(), to_nhwc, s.n, s.c, s.h, s.w);
            require_same_bits(bits.bytes(count * fe), moved, fe, "permute_bits");
          }
          if (!identity) {
            Placed wide(count * te, 0);
            emu::permute_convert_wide_index(src.data(), code(from), wide.data(), code(to), to_nhwc, s.n, s.c, s.h, s.w);
            require_same_bits(wide.bytes(count * te), want, te, "permute_convert, 64-bit indices");
          }
        }
}

TEST_CASE("copy_strided moves 16 bytes at a time where rows, strides and offsets allow", "[cuda-host][kernels]") {
  struct Case {
    int64_t rows, src_stride, dst_stride, count, src_offset, dst_offset;
    size_t dst_bytes_off;
  };
  // The channel concat of NHWC pixels (16 and 48 of 64 channels), the same with an unaligned
  // destination, and a count that is no multiple of the width.
  const std::vector<Case> cases{{37, 16, 64, 16, 0, 0, 0},  {37, 48, 64, 48, 0, 16, 0}, {37, 16, 64, 16, 0, 0, 8},
                                {9, 24, 40, 24, 0, 16, 0}, {9, 20, 40, 20, 0, 16, 0}};
  for (const Case& s : cases)
    for (DType t : {DType::f32, DType::bf16}) {
      INFO(type_name(t) << " rows " << s.rows << " count " << s.count << " dst offset " << s.dst_offset << ", "
                        << s.dst_bytes_off << " bytes off");
      const size_t e = squall::nn::dtype_size(t);
      Placed src(random_typed(t, static_cast<size_t>(s.rows * s.src_stride), 61), 0);
      const Bytes before(static_cast<size_t>(s.rows * s.dst_stride) * e, 0x3c);
      Placed got(before, s.dst_bytes_off);
      Bytes want = before;
      cpu().copy_strided(cpu_stream(), t, want.data(), s.dst_stride, s.dst_offset, src.data(), s.src_stride,
                         s.src_offset, s.rows, s.count);
      emu::copy_strided(e, got.data(), s.dst_stride, s.dst_offset, src.data(), s.src_stride, s.src_offset, s.rows,
                        s.count);
      require_same_bits(got.bytes(before.size()), want, e, "copy_strided");
    }
}

TEST_CASE("bias_add's 16-byte path adds each element's channel, in both layouts", "[cuda-host][kernels]") {
  const int64_t n = 3, c = 16, hw = 37;  // 1776 elements: whole vectors and, at f32, whole rows
  const size_t count = static_cast<size_t>(n * c * hw);
  const std::vector<float> b = random_floats(static_cast<size_t>(c), 71);
  for (DType t : float_types())
    for (const bool nhwc : {false, true})
      for (const size_t off : {size_t{0}, squall::nn::dtype_size(t)}) {
        INFO(type_name(t) << (nhwc ? " nhwc" : " nchw") << ", y " << off << " bytes off");
        const Bytes y0 = random_typed(t, count, 72);
        std::vector<float> sum = widen(t, y0);
        for (size_t k = 0; k < count; ++k)
          sum[k] = sum[k] + b[nhwc ? k % static_cast<size_t>(c) : (k / static_cast<size_t>(hw)) % static_cast<size_t>(c)];
        const Bytes want = to_type(t, sum);
        Placed y(y0, off);
        emu::bias_add(code(t), nhwc, y.data(), b.data(), n, c, hw);
        require_same_bits(y.bytes(y0.size()), want, squall::nn::dtype_size(t), "bias_add");
      }
}

TEST_CASE("the 64-bit index path gives the 32-bit path's bits", "[cuda-host][kernels]") {
  for (DType t : float_types())
    for (const size_t n : {size_t{17}, size_t{70001}}) {
      INFO(type_name(t) << " " << n);
      const size_t e = squall::nn::dtype_size(t);
      const Bytes a = random_typed(t, n, 81), b = random_typed(t, n, 82);
      Placed narrow(n * e, 0), wide(n * e, 0);
      emu::add(code(t), a.data(), b.data(), narrow.data(), n);
      emu::add_wide_index(code(t), a.data(), b.data(), wide.data(), n);
      require_same_bits(wide.bytes(n * e), narrow.bytes(n * e), e, "add");
    }
}
