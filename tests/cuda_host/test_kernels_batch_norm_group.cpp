// The CUDA plan's batch norm over a split sample's group (cuda/batch_norm_group_ops.cuh and
// cuda/batch_norm_group_host.hpp), emulated on the host for a group of one, against the CPU
// backend's split batch norm (the reference, src/cpu/cpu_batch_norm.cpp) on the same group:
// the normalised values, the running statistics, dx, dgamma and dbeta. Both form the
// statistics and the gradient sums in double, in different orders, and the CUDA kernels keep
// them in two floats (about 48 bits): the tolerances are a few float roundings of each value.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/nn/spatial.hpp"
#include "tests/cuda_host/kernels_check.hpp"

using namespace squall::test::kernels;
namespace emu = squall::test::emulated;

namespace {

// The largest |a - b| over the largest |b|.
double relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    largest = std::max(largest, static_cast<double>(std::fabs(b[i])));
  }
  return worst / std::max(largest, 1e-30);
}

}  // namespace

TEST_CASE("batch norm over a group: the CUDA plan's arithmetic is the CPU's split batch norm's",
          "[cuda-host][kernels][spatial]") {
  const int64_t n = 2, c = 5, h = 7, w = 9, hw = h * w;
  const auto cs = static_cast<size_t>(c);
  for (DType t : float_types()) {
    for (const bool nhwc : {false, true}) {
      for (const bool relu : {false, true}) {
        DYNAMIC_SECTION(type_name(t) << (nhwc ? " NHWC" : " NCHW") << (relu ? ", fused ReLU" : "")) {
          const size_t count = static_cast<size_t>(n * c * hw);
          // Values around a large mean (the shift keeps its moments exact).
          const Bytes x = random_typed(t, count, 91, 40.0f, 44.0f);
          const Bytes dy = random_typed(t, count, 92);
          const std::vector<float> gamma = random_floats(cs, 93, 0.5f, 1.5f), beta = random_floats(cs, 94);
          squall::nn::SoloTileComm solo;
          squall::nn::BatchNormDesc d;
          d.n = n;
          d.c = c;
          d.h = h;
          d.w = w;
          d.dtype = t;
          d.layout = nhwc ? squall::nn::Layout::nhwc : squall::nn::Layout::nchw;
          d.relu = relu;
          d.group = &solo;
          auto plan = cpu().make_batch_norm(d);
          std::vector<float> rm_want(cs, 0.1f), rv_want(cs, 2.0f), rm_got = rm_want, rv_got = rv_want;
          Bytes y_want(x.size()), y_got(x.size()), dx_want(x.size()), dx_got(x.size());
          std::vector<float> dg_want(cs), db_want(cs), dg_got(cs), db_got(cs);
          plan->forward(cpu_stream(), x.data(), gamma.data(), beta.data(), rm_want.data(), rv_want.data(),
                        y_want.data(), true);
          plan->backward(cpu_stream(), x.data(), dy.data(), gamma.data(), dx_want.data(), dg_want.data(),
                         db_want.data());
          cpu().synchronize(cpu_stream());
          std::vector<float> params(7 * cs);
          double values = 0;
          emu::bn_group_forward(code(t), nhwc, relu, x.data(), y_got.data(), gamma.data(), beta.data(), d.eps,
                                d.momentum, rm_got.data(), rv_got.data(), params.data(), &values, n, c, hw);
          CHECK(values == static_cast<double>(n * hw));
          emu::bn_group_backward(code(t), nhwc, relu, x.data(), dy.data(), dx_got.data(), gamma.data(),
                                 params.data(), values, dg_got.data(), db_got.data(), n, c, hw);
          const double unit = t == DType::f32 ? 1e-6 : 1e-2;  // a few roundings of the type
          CHECK(relative(widen(t, y_got), widen(t, y_want)) <= unit);
          CHECK(relative(rm_got, rm_want) <= 1e-6);
          CHECK(relative(rv_got, rv_want) <= 1e-6);
          CHECK(relative(widen(t, dx_got), widen(t, dx_want)) <= unit);
          CHECK(relative(dg_got, dg_want) <= 1e-5);
          CHECK(relative(db_got, db_want) <= 1e-5);
          // The ReLU's mask is the CPU's: the same values are zero.
          if (relu) {
            const std::vector<float> a = widen(t, y_got), b = widen(t, y_want);
            for (size_t i = 0; i < a.size(); ++i) CHECK((a[i] == 0.0f) == (b[i] == 0.0f));
          }
        }
      }
    }
  }
}
