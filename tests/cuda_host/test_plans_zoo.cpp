// cuda-host: every convolution, pooling and batch-norm description the zoo's models ask a
// backend for, in NCHW and NHWC at f32, bf16 and f16, turned into cuDNN's descriptors by the
// CUDA plans' device-free step (cuda/cudnn_describe.hpp); cuDNN's own output sizes, read back
// from those descriptors, must be squall's shapes. No GPU, driver or cuDNN handle is needed.
//
// The descriptions come from Graph::build on a RecordingBackend (the CPU backend, recording
// what the layers ask it to plan), at inputs small enough to build quickly here but of the
// shape each model takes (DeepCAM's 16 channels and 2:3 aspect for the DeepLab models).
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "cuda/cudnn_describe.hpp"
#include "src/core/error.hpp"
#include "src/nn/graph.hpp"
#include "tests/cuda_host/plans_inspect.hpp"
#include "tests/cuda_host/plans_recording_backend.hpp"

namespace squall {
namespace {

using cuda::detail::BatchNormDescriptors;
using cuda::detail::ConvDescriptors;
using cuda::detail::PoolDescriptors;
using nn::DType;
using nn::Layout;
using nn::Shape;

constexpr int64_t kBatch = 2;

std::string what_conv(const nn::ConvDesc& d) {
  return std::string(d.transposed ? "transposed conv " : "conv ") + Shape(d.n, d.c, d.h, d.w).str() + " k=" +
         std::to_string(d.k) + " kernel " + std::to_string(d.r) + "x" + std::to_string(d.s) + " stride " +
         std::to_string(d.stride_h) + " pad " + std::to_string(d.pad_h) + " dilation " + std::to_string(d.dil_h);
}

// "" when cuDNN's descriptors of d say what squall means by d; else the first difference.
std::string conv_problem(const nn::ConvDesc& d) {
  try {
    const ConvDescriptors c(d);
    const cudnnDataType_t type = test::cudnn_type_of(d.dtype);
    const Shape x(d.n, d.c, d.h, d.w), y = d.output();
    const test::CudnnTensor tx = test::read_tensor(c.x()), ty = test::read_tensor(c.y());
    if (tx.status != CUDNN_STATUS_SUCCESS || !tx.dims.equals(x) || tx.type != type || !tx.packed(d.layout))
      return "x descriptor " + tx.dims.str() + ", expected " + x.str();
    if (ty.status != CUDNN_STATUS_SUCCESS || !ty.dims.equals(y) || ty.type != type || !ty.packed(d.layout))
      return "y descriptor " + ty.dims.str() + ", expected " + y.str();
    const test::CudnnFilter f = test::read_filter(c.filter());
    const cudnnTensorFormat_t format = d.layout == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    if (f.status != CUDNN_STATUS_SUCCESS || !f.dims.equals(d.weight()) || f.type != type || f.format != format)
      return "filter descriptor " + f.dims.str() + ", expected " + d.weight().str();
    const test::CudnnConv k = test::read_conv(c.conv());
    if (k.status != CUDNN_STATUS_SUCCESS || k.pad_h != d.pad_h || k.pad_w != d.pad_w || k.stride_h != d.stride_h ||
        k.stride_w != d.stride_w || k.dil_h != d.dil_h || k.dil_w != d.dil_w || k.mode != CUDNN_CROSS_CORRELATION ||
        k.compute != CUDNN_DATA_FLOAT)
      return "convolution descriptor differs from the description";
    // f32 never on TF32 tensor cores (results agree with the CPU); bf16/f16 on tensor cores.
    if (k.math != (d.dtype == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH)) return "math type";
    // cuDNN's own size of the forward problem's output: y from x, or (transposed) x from y.
    test::CudnnDims out;
    const cudnnStatus_t s = cudnnGetConvolution2dForwardOutputDim(c.conv(), d.transposed ? c.y() : c.x(),
                                                                  c.filter(), &out.n, &out.c, &out.h, &out.w);
    const Shape expected = d.transposed ? x : y;
    if (s != CUDNN_STATUS_SUCCESS || !out.equals(expected))
      return "cuDNN's output " + out.str() + ", squall's " + expected.str();
    // The bias goes through cuDNN only for f32 NCHW (else squall's kernels add it).
    const bool cudnn_bias = d.bias && d.dtype == DType::f32 && d.layout == Layout::nchw;
    if (cudnn_bias != (c.bias() != nullptr)) return "bias descriptor presence";
    if (cudnn_bias) {
      const test::CudnnTensor tb = test::read_tensor(c.bias());
      if (!tb.dims.equals(Shape(1, d.k, 1, 1)) || tb.type != CUDNN_DATA_FLOAT)
        return "bias descriptor " + tb.dims.str();
    }
  } catch (const Error& e) {
    return std::string("refused: ") + e.what();
  }
  return "";
}

std::string pool_problem(const nn::PoolDesc& d) {
  try {
    const PoolDescriptors p(d);
    // bf16 pools as f32 copies (the plan widens it); f32 and f16 as they are.
    const cudnnDataType_t type = d.dtype == DType::bf16 ? CUDNN_DATA_FLOAT : test::cudnn_type_of(d.dtype);
    if (p.widened() != (d.dtype == DType::bf16)) return "widened";
    const Shape x(d.n, d.c, d.h, d.w), y = d.output();
    const test::CudnnTensor tx = test::read_tensor(p.x()), ty = test::read_tensor(p.y());
    if (!tx.dims.equals(x) || tx.type != type || !tx.packed(d.layout)) return "x descriptor " + tx.dims.str();
    if (!ty.dims.equals(y) || ty.type != type || !ty.packed(d.layout)) return "y descriptor " + ty.dims.str();
    const test::CudnnPool k = test::read_pool(p.pool());
    const cudnnPoolingMode_t mode = d.kind == nn::PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                                                : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    if (k.status != CUDNN_STATUS_SUCCESS || k.mode != mode || k.r != d.r || k.s != d.s || k.pad_h != d.pad_h ||
        k.pad_w != d.pad_w || k.stride_h != d.stride_h || k.stride_w != d.stride_w)
      return "pooling descriptor differs from the description";
    test::CudnnDims out;
    const cudnnStatus_t s = cudnnGetPooling2dForwardOutputDim(p.pool(), p.x(), &out.n, &out.c, &out.h, &out.w);
    if (s != CUDNN_STATUS_SUCCESS || !out.equals(y)) return "cuDNN's output " + out.str() + ", squall's " + y.str();
  } catch (const Error& e) {
    return std::string("refused: ") + e.what();
  }
  return "";
}

std::string batch_norm_problem(const nn::BatchNormDesc& d) {
  try {
    const BatchNormDescriptors b(d);
    const cudnnDataType_t type = d.dtype == DType::bf16 ? CUDNN_DATA_FLOAT : test::cudnn_type_of(d.dtype);
    if (b.widened() != (d.dtype == DType::bf16)) return "widened";
    const test::CudnnTensor tx = test::read_tensor(b.x());
    if (!tx.dims.equals(Shape(d.n, d.c, d.h, d.w)) || tx.type != type || !tx.packed(d.layout))
      return "x descriptor " + tx.dims.str();
    // gamma, beta and the statistics: f32 [1, c, 1, 1], whatever the activations.
    const test::CudnnTensor tp = test::read_tensor(b.param());
    if (tp.status != CUDNN_STATUS_SUCCESS || !tp.dims.equals(Shape(1, d.c, 1, 1)) || tp.type != CUDNN_DATA_FLOAT)
      return "parameter descriptor " + tp.dims.str() + ", expected " + Shape(1, d.c, 1, 1).str();
    // The extended calls' problem (f16, bf16): x in its own type, bf16 not widened; the
    // persistent kernels in NHWC; the same f32 [1, c, 1, 1] parameters.
    const bool reduced = d.dtype != DType::f32;
    if (b.ex_candidate() != reduced) return "extended-call candidate";
    if (reduced) {
      const cudnnBatchNormMode_t mode =
          d.layout == Layout::nhwc ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
      if (b.ex_mode() != mode) return "extended-call mode";
      const test::CudnnTensor ex = test::read_tensor(b.ex_x());
      if (ex.status != CUDNN_STATUS_SUCCESS || !ex.dims.equals(Shape(d.n, d.c, d.h, d.w)) ||
          ex.type != test::cudnn_type_of(d.dtype) || !ex.packed(d.layout))
        return "extended-call x descriptor " + ex.dims.str();
      const test::CudnnTensor ep = test::read_tensor(b.ex_param());
      if (ep.status != CUDNN_STATUS_SUCCESS || !ep.dims.equals(Shape(1, d.c, 1, 1)) || ep.type != CUDNN_DATA_FLOAT)
        return "extended-call parameter descriptor " + ep.dims.str();
    } else if (b.ex_x() != nullptr || b.ex_param() != nullptr) {
      return "extended-call descriptors for f32";
    }
  } catch (const Error& e) {
    return std::string("refused: ") + e.what();
  }
  return "";
}

// A zoo model at a size that builds in seconds here, and how many of each description its
// layers make (counted from the model's definition in src/nn/models/zoo.cpp, not from a run).
struct ModelCase {
  nn::ModelSpec spec;
  Shape sample;
  size_t convs, transposed, pools, batch_norms;
};

nn::ModelSpec spec_of(const std::string& name, int64_t classes) {
  nn::ModelSpec s;
  s.name = name;
  s.classes = classes;
  return s;
}

// Builds `m` at every activation type and layout on a recording backend and checks each
// description it records; prints how many were checked per build.
void check_model(const ModelCase& m) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
      const std::string combo = m.spec.name + " " + nn::dtype_name(dtype) + " " + nn::layout_name(layout);
      INFO(combo);
      test::RecordingBackend backend;
      auto graph = nn::make_model(m.spec, m.sample);
      graph->set_dtype(dtype);
      graph->set_layout(layout);
      graph->build(backend, kBatch, 1);

      // As many as the model has, so that an empty or partial recording cannot pass.
      size_t transposed = 0;
      for (const auto& d : backend.convs()) transposed += d.transposed ? 1 : 0;
      CHECK(backend.convs().size() == m.convs);
      CHECK(transposed == m.transposed);
      CHECK(backend.pools().size() == m.pools);
      CHECK(backend.batch_norms().size() == m.batch_norms);

      for (const auto& d : backend.convs()) {
        INFO(what_conv(d));
        CHECK(d.dtype == dtype);
        CHECK(d.layout == layout);
        CHECK(conv_problem(d) == "");
      }
      for (const auto& d : backend.pools()) {
        INFO("pool " + Shape(d.n, d.c, d.h, d.w).str() + " window " + std::to_string(d.r));
        CHECK(d.dtype == dtype);
        CHECK(d.layout == layout);
        CHECK(pool_problem(d) == "");
      }
      for (const auto& d : backend.batch_norms()) {
        INFO("batch norm " + Shape(d.n, d.c, d.h, d.w).str());
        CHECK(d.dtype == dtype);
        CHECK(d.layout == layout);
        CHECK(batch_norm_problem(d) == "");
      }
      std::printf("%s: %zu convolutions (%zu transposed), %zu poolings, %zu batch norms checked\n", combo.c_str(),
                  backend.convs().size(), transposed, backend.pools().size(), backend.batch_norms().size());
    }
  }
}

TEST_CASE("plans: LeNet-5's descriptions are cuDNN's", "[plans]") {
  // conv1 5x5 pad 2, pool, conv2 5x5, pool: 2 convolutions (with bias), 2 max poolings.
  check_model({spec_of("lenet5", 10), Shape(1, 1, 28, 28), 2, 0, 2, 0});

  // The shapes themselves, written out: cuDNN's sizes must be LeNet-5's, not merely agree
  // with squall's arithmetic.
  test::RecordingBackend backend;
  auto graph = nn::make_model(spec_of("lenet5", 10), Shape(1, 1, 28, 28));
  graph->build(backend, kBatch, 1);
  REQUIRE(backend.convs().size() == 2);
  REQUIRE(backend.pools().size() == 2);
  const Shape conv_out[2] = {Shape(2, 6, 28, 28), Shape(2, 16, 10, 10)};
  const Shape pool_out[2] = {Shape(2, 6, 14, 14), Shape(2, 16, 5, 5)};
  for (size_t i = 0; i < 2; ++i) {
    const ConvDescriptors c(backend.convs()[i]);
    test::CudnnDims out;
    REQUIRE(cudnnGetConvolution2dForwardOutputDim(c.conv(), c.x(), c.filter(), &out.n, &out.c, &out.h, &out.w) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(out.str() == conv_out[i].str());
    const PoolDescriptors p(backend.pools()[i]);
    REQUIRE(cudnnGetPooling2dForwardOutputDim(p.pool(), p.x(), &out.n, &out.c, &out.h, &out.w) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(out.str() == pool_out[i].str());
  }
}

TEST_CASE("plans: ResNet-20's descriptions are cuDNN's", "[plans]") {
  // Stem conv-BN; 3 stages of 3 basic blocks (2 conv-BN each); a 1x1 projection conv-BN where
  // the stage changes the shape (stages 2 and 3): 1 + 18 + 2 = 21 of each. No pooling plan
  // (the global average pool is an element-wise operation).
  check_model({spec_of("resnet20", 10), Shape(1, 3, 16, 16), 21, 0, 0, 21});
}

TEST_CASE("plans: U-Net's descriptions are cuDNN's", "[plans]") {
  // Depth 3: per level down 2 conv-BN and a max pool; bottom 2 conv-BN; per level up a
  // transposed conv and 2 conv-BN; the 1x1 classifier: 6 + 2 + 9 + 1 = 18 convolutions, 3 of
  // them transposed, 6 + 2 + 6 = 14 batch norms, 3 poolings.
  check_model({spec_of("unet", 3), Shape(1, 4, 16, 16), 18, 3, 3, 14});

  // The up-sampling written out: each 2x2 stride-2 transposed convolution doubles the side
  // and halves the channels, and cuDNN's forward problem maps that output back to its input.
  test::RecordingBackend backend;
  auto graph = nn::make_model(spec_of("unet", 3), Shape(1, 4, 16, 16));
  graph->set_layout(Layout::nhwc);
  graph->build(backend, kBatch, 1);
  const Shape up_in[3] = {Shape(2, 128, 2, 2), Shape(2, 64, 4, 4), Shape(2, 32, 8, 8)};
  const Shape up_out[3] = {Shape(2, 64, 4, 4), Shape(2, 32, 8, 8), Shape(2, 16, 16, 16)};
  size_t i = 0;
  for (const auto& d : backend.convs()) {
    if (!d.transposed) continue;
    REQUIRE(i < 3);
    const ConvDescriptors c(d);
    CHECK(test::read_tensor(c.y()).dims.str() == up_out[i].str());
    test::CudnnDims back;
    REQUIRE(cudnnGetConvolution2dForwardOutputDim(c.conv(), c.y(), c.filter(), &back.n, &back.c, &back.h,
                                                  &back.w) == CUDNN_STATUS_SUCCESS);
    CHECK(back.str() == up_in[i].str());
    ++i;
  }
  CHECK(i == 3);
}

TEST_CASE("plans: DeepLabv3+'s descriptions are cuDNN's", "[plans]") {
  // 16 x 24, DeepCAM's 16 channels and 2:3 aspect, divisible by the output stride 8.
  // Encoder: stem conv-BN; 4 stages of 2 basic blocks, each stage's first with a projection
  // (stride 2, or a new width): 1 + 4 * 5 = 21 conv-BN. Head: ASPP 1x1 and 3 dilated 3x3
  // (rates 6, 12, 18, wider than the 2 x 3 features: padding only), the projection, the
  // low-level 1x1, 2 decoder 3x3: 8 conv-BN; the classifier conv without BN.
  check_model({spec_of("deeplabv3plus", 3), Shape(1, 16, 16, 24), 30, 0, 0, 29});
}

TEST_CASE("plans: DeepLabv3+ on ResNet-50's descriptions are cuDNN's", "[plans]") {
  // 32 x 48 (DeepCAM's 768 x 1152 / 24), divisible by the output stride 16. Stem 7x7 conv-BN
  // and a 3x3 max pool (pad 1); bottlenecks of 3 conv-BN in stages of 3, 4, 6, 3 blocks, each
  // stage's first block with a projection conv-BN: 16 * 3 + 4 = 52; the head as DeepLabv3+'s:
  // 8 conv-BN and the classifier. 1 + 52 + 9 = 62 convolutions, 1 + 52 + 8 = 61 batch norms.
  check_model({spec_of("deeplabv3plus-resnet50", 3), Shape(1, 16, 32, 48), 62, 0, 1, 61});
}

}  // namespace
}  // namespace squall
