// cuda-host: descriptions that squall and cuDNN would disagree about are refused by the
// device-free step with an Error that says what is wrong, and the plan factories refuse them
// the same way before they touch a device (this machine may have none).
#include <catch2/catch.hpp>

#include <string>

#include "cuda/cudnn_describe.hpp"
#include "cuda/plans.hpp"
#include "src/core/error.hpp"

namespace squall {
namespace {

using Catch::Matchers::Contains;
using cuda::detail::BatchNormDescriptors;
using cuda::detail::ConvDescriptors;
using cuda::detail::PoolDescriptors;

// U-Net's up-sampling: a 2x2 transposed convolution of stride 2, [1, 8, 4, 4] -> [1, 4, 8, 8].
nn::ConvDesc upconv() {
  nn::ConvDesc d;
  d.n = 1;
  d.c = 8;
  d.h = d.w = 4;
  d.k = 4;
  d.r = d.s = 2;
  d.stride_h = d.stride_w = 2;
  d.transposed = true;
  return d;
}

nn::PoolDesc stem_pool() {  // 3x3 max pool, stride 2, pad 1, on [1, 4, 8, 8]
  nn::PoolDesc d;
  d.n = 1;
  d.c = 4;
  d.h = d.w = 8;
  d.r = d.s = 3;
  d.stride_h = d.stride_w = 2;
  d.pad_h = d.pad_w = 1;
  return d;
}

TEST_CASE("plans: a transposed convolution whose output padding is not below its stride is refused",
          "[plans]") {
  nn::ConvDesc d = upconv();
  CHECK_NOTHROW(ConvDescriptors(d));
  d.out_pad_h = 1;  // 9 rows: still one input row per stride of output, cuDNN agrees
  CHECK_NOTHROW(ConvDescriptors(d));

  // Output padding 2 = the stride: squall would make [1, 4, 10, 8], from which cuDNN's forward
  // problem gives back 5 input rows, not 4. Every activation type and layout is refused alike.
  d.out_pad_h = 2;
  REQUIRE(d.output().h() == 10);
  for (const nn::DType t : {nn::DType::f32, nn::DType::bf16, nn::DType::f16}) {
    for (const nn::Layout l : {nn::Layout::nchw, nn::Layout::nhwc}) {
      d.dtype = t;
      d.layout = l;
      CHECK_THROWS_AS(ConvDescriptors(d), Error);
      CHECK_THROWS_WITH(ConvDescriptors(d), Contains("output padding must be smaller than the stride") &&
                                                Contains("gives [1,8,5,4] where [1,8,4,4] is expected"));
    }
  }
  // The plan factory describes first: the same Error, without a device.
  CHECK_THROWS_WITH(cuda::make_cudnn_conv(d), Contains("output padding must be smaller than the stride"));
}

TEST_CASE("plans: a convolution window that does not fit the input is refused", "[plans]") {
  // A 3x3 kernel of stride 2 on a 2x2 input without padding: ConvDesc::output() counts one
  // row ((2 - 3) / 2 + 1 truncates to 1); cuDNN refuses the problem.
  nn::ConvDesc d;
  d.n = 1;
  d.c = 4;
  d.h = d.w = 2;
  d.k = 8;
  d.r = d.s = 3;
  d.stride_h = d.stride_w = 2;
  REQUIRE(d.output().h() == 1);
  CHECK_THROWS_WITH(ConvDescriptors(d), Contains("kernel 3x3 (dilation 1x1) does not fit input [1,4,2,2]"));
  CHECK_THROWS_WITH(cuda::make_cudnn_conv(d), Contains("does not fit input [1,4,2,2]"));
  d.pad_h = d.pad_w = 1;  // padded to 4x4 the window fits: [1, 8, 1, 1]
  CHECK_NOTHROW(ConvDescriptors(d));
}

TEST_CASE("plans: a pooling window that does not fit the input is refused", "[plans]") {
  CHECK_NOTHROW(PoolDescriptors(stem_pool()));

  // A 3x3 window on a 2x2 input without padding: PoolDesc::output() still counts one row
  // ((2 - 3) / 2 + 1 truncates to 1), so only an explicit check catches it.
  nn::PoolDesc d = stem_pool();
  d.h = d.w = 2;
  d.pad_h = d.pad_w = 0;
  REQUIRE(d.output().h() == 1);
  for (const nn::DType t : {nn::DType::f32, nn::DType::bf16, nn::DType::f16}) {
    d.dtype = t;
    CHECK_THROWS_WITH(PoolDescriptors(d), Contains("window 3x3 does not fit input [1,4,2,2]"));
  }
  CHECK_THROWS_WITH(cuda::make_cudnn_pool(d), Contains("does not fit"));

  // Padding of more than half the window would make windows of padding alone.
  d = stem_pool();
  d.pad_h = 2;
  CHECK_THROWS_WITH(PoolDescriptors(d), Contains("padding must be at most half the window"));
}

TEST_CASE("plans: invalid descriptions are refused before cuDNN sees them", "[plans]") {
  nn::ConvDesc c = upconv();
  c.transposed = false;
  c.k = 0;
  CHECK_THROWS_WITH(ConvDescriptors(c), Contains("conv: invalid description"));
  c = upconv();
  c.transposed = false;
  c.r = c.s = 7;  // a 7x7 kernel on 4x4, no padding
  CHECK_THROWS_WITH(ConvDescriptors(c), Contains("does not fit input 4x4"));

  nn::BatchNormDesc b;
  b.n = 2;
  b.c = 3;
  b.h = b.w = 4;
  CHECK_NOTHROW(BatchNormDescriptors(b));
  b.eps = 0.0f;
  CHECK_THROWS_WITH(BatchNormDescriptors(b), Contains("batch norm: invalid description"));
  CHECK_THROWS_WITH(cuda::make_cudnn_batch_norm(b), Contains("batch norm: invalid description"));
  b.eps = 1e-5f;
  b.dtype = nn::DType::i32;
  CHECK_THROWS_WITH(BatchNormDescriptors(b), Contains("not i32"));
}

}  // namespace
}  // namespace squall
