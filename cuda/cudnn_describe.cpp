// The device-free description step of the cuDNN plans (cuda/cudnn_describe.hpp).
#include "cuda/cudnn_describe.hpp"

#include <string>

#include "src/core/error.hpp"

namespace squall::cuda::detail {

namespace {

std::string dims_str(int n, int c, int h, int w) { return nn::Shape(n, c, h, w).str(); }

// A cuDNN query about a description squall made: a refusal is the description's fault (a
// user's model), reported as an Error rather than taking the job down as a failed call would.
void expect_accepted(cudnnStatus_t status, const std::string& what) {
  if (status != CUDNN_STATUS_SUCCESS) throw Error(what + " (" + cudnnGetErrorString(status) + ")");
}

bool same(int n, int c, int h, int w, const nn::Shape& s) {
  return n == s.n() && c == s.c() && h == s.h() && w == s.w();
}

std::string window_str(int64_t r, int64_t s) { return std::to_string(r) + "x" + std::to_string(s); }

}  // namespace

ConvDescriptors::ConvDescriptors(const nn::ConvDesc& d) : m_desc(d) {
  const char* what = "conv";
  if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || d.k < 1 || d.r < 1 || d.s < 1 || d.stride_h < 1 ||
      d.stride_w < 1 || d.dil_h < 1 || d.dil_w < 1 || d.pad_h < 0 || d.pad_w < 0 || d.out_pad_h < 0 ||
      d.out_pad_w < 0)
    throw Error("conv: invalid description (n=" + std::to_string(d.n) + " c=" + std::to_string(d.c) +
                " h=" + std::to_string(d.h) + " w=" + std::to_string(d.w) + " k=" + std::to_string(d.k) +
                " kernel " + window_str(d.r, d.s) + ")");
  m_input = nn::Shape(d.n, d.c, d.h, d.w);
  m_output = d.output();
  if (m_output.h() < 1 || m_output.w() < 1)
    throw Error("conv: kernel " + window_str(d.r, d.s) + " does not fit input " + std::to_string(d.h) + "x" +
                std::to_string(d.w) + " (output " + m_output.str() + ")");
  // ConvDesc::output() divides with truncation, so a dilated window larger than the padded
  // input still counts one output row; cuDNN refuses that convolution (BAD_PARAM), as PyTorch
  // does. (A transposed convolution's forward problem runs on its output, which always fits.)
  if (!d.transposed && (d.h + 2 * d.pad_h < d.dil_h * (d.r - 1) + 1 || d.w + 2 * d.pad_w < d.dil_w * (d.s - 1) + 1))
    throw Error("conv: kernel " + window_str(d.r, d.s) + " (dilation " + window_str(d.dil_h, d.dil_w) +
                ") does not fit input " + m_input.str() + " padded by " + window_str(d.pad_h, d.pad_w));
  const cudnnDataType_t type = cudnn_type(d.dtype, what);
  set_nchw(m_x, d.n, d.c, d.h, d.w, what, d.dtype, d.layout);
  set_nchw(m_y, m_output.n(), m_output.c(), m_output.h(), m_output.w(), what, d.dtype, d.layout);
  // The forward problem's filter, [k, c, r, s] or (transposed) [c, k, r, s], in the
  // activations' type and memory order: the plan's copy of the weights when those differ
  // from the f32 NCHW parameters.
  m_filter_shape = d.weight();
  SQUALL_CUDNN_CHECK(cudnnSetFilter4dDescriptor(m_filter, type, nhwc() ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                to_int(m_filter_shape.n(), what), to_int(m_filter_shape.c(), what),
                                                to_int(m_filter_shape.h(), what), to_int(m_filter_shape.w(), what)));
  // Computed in f32 whatever the activation type (cuDNN's "pseudo" half configurations).
  SQUALL_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(m_conv, to_int(d.pad_h, what), to_int(d.pad_w, what),
                                                     to_int(d.stride_h, what), to_int(d.stride_w, what),
                                                     to_int(d.dil_h, what), to_int(d.dil_w, what),
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // f32: FMA only, never TF32, so that f32 results agree with the CPU backend. bf16/f16:
  // tensor cores.
  SQUALL_CUDNN_CHECK(cudnnSetConvolutionMathType(m_conv, reduced() ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  m_bias_used = d.bias && !copies_weights();
  if (m_bias_used) set_nchw(m_bias, 1, d.k, 1, 1, what);

  // cuDNN computes the forward problem's output from its input; it must be squall's shape
  // (for a transposed convolution: the input x, which only an output padding smaller than the
  // stride reproduces).
  int on = 0, oc = 0, oh = 0, ow = 0;
  expect_accepted(cudnnGetConvolution2dForwardOutputDim(m_conv, problem_in(), m_filter, &on, &oc, &oh, &ow),
                  std::string("conv: cuDNN refuses the ") + (d.transposed ? "transposed " : "") + "convolution of " +
                      m_input.str() + " with filter " + m_filter_shape.str());
  const nn::Shape expected = problem_out_shape();
  if (!same(on, oc, oh, ow, expected)) {
    if (!d.transposed)
      throw Error("conv: cuDNN's convolution of " + m_input.str() + " gives " + dims_str(on, oc, oh, ow) + " where " +
                  expected.str() + " is expected");
    throw Error("conv: squall's transposed convolution of " + m_input.str() + " gives " + m_output.str() +
                ", but cuDNN's convolution of " + m_output.str() + " (its adjoint) gives " + dims_str(on, oc, oh, ow) +
                " where " + expected.str() + " is expected (output padding must be smaller than the stride)");
  }
}

PoolDescriptors::PoolDescriptors(const nn::PoolDesc& d) : m_desc(d) {
  const char* what = "pool";
  m_output = d.output();
  const nn::Shape in(d.n, d.c, d.h, d.w);
  if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || d.r < 1 || d.s < 1 || d.stride_h < 1 || d.stride_w < 1 ||
      d.pad_h < 0 || d.pad_w < 0 || m_output.h() < 1 || m_output.w() < 1)
    throw Error("pool: invalid description: input " + in.str() + ", window " + window_str(d.r, d.s) + ", output " +
                m_output.str());
  if (d.pad_h * 2 > d.r || d.pad_w * 2 > d.s)
    throw Error("pool: padding must be at most half the window (PyTorch's rule), got pad " +
                window_str(d.pad_h, d.pad_w) + " for window " + window_str(d.r, d.s));
  // PoolDesc::output() divides with truncation, so a window larger than the padded input
  // would still count one output row; neither PyTorch nor the pooling layer allow it.
  if (d.h + 2 * d.pad_h < d.r || d.w + 2 * d.pad_w < d.s)
    throw Error("pool: window " + window_str(d.r, d.s) + " does not fit input " + in.str() + " padded by " +
                window_str(d.pad_h, d.pad_w));
  if (d.dtype != nn::DType::f32 && d.dtype != nn::DType::f16 && d.dtype != nn::DType::bf16)
    throw Error(std::string("pool: cuDNN's plan takes f32, f16 or bf16 activations, not ") + nn::dtype_name(d.dtype));
  // bf16: cuDNN's pooling is not documented for it; the plan pools f32 copies.
  m_widened = d.dtype == nn::DType::bf16;
  const nn::DType type = m_widened ? nn::DType::f32 : d.dtype;
  set_nchw(m_x, d.n, d.c, d.h, d.w, what, type, d.layout);
  set_nchw(m_y, m_output.n(), m_output.c(), m_output.h(), m_output.w(), what, type, d.layout);
  const cudnnPoolingMode_t mode =
      d.kind == nn::PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  SQUALL_CUDNN_CHECK(cudnnSetPooling2dDescriptor(m_pool, mode, CUDNN_NOT_PROPAGATE_NAN, to_int(d.r, what),
                                                 to_int(d.s, what), to_int(d.pad_h, what), to_int(d.pad_w, what),
                                                 to_int(d.stride_h, what), to_int(d.stride_w, what)));
  // cuDNN's output size (floor mode) must be PyTorch's, which PoolDesc::output() computes.
  int on = 0, oc = 0, oh = 0, ow = 0;
  expect_accepted(cudnnGetPooling2dForwardOutputDim(m_pool, m_x, &on, &oc, &oh, &ow),
                  "pool: cuDNN refuses the pooling of " + in.str() + " by window " + window_str(d.r, d.s));
  if (!same(on, oc, oh, ow, m_output))
    throw Error("pool: cuDNN's pooling of " + in.str() + " gives " + dims_str(on, oc, oh, ow) + " where " +
                m_output.str() + " is expected");
}

BatchNormDescriptors::BatchNormDescriptors(const nn::BatchNormDesc& d) : m_desc(d) {
  const char* what = "batch norm";
  const nn::Shape in(d.n, d.c, d.h, d.w);
  if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || !(d.eps > 0.0f))
    throw Error("batch norm: invalid description " + in.str() + " eps=" + std::to_string(d.eps));
  if (d.dtype != nn::DType::f32 && d.dtype != nn::DType::f16 && d.dtype != nn::DType::bf16)
    throw Error(std::string("batch norm: cuDNN's plan takes f32, f16 or bf16 activations, not ") +
                nn::dtype_name(d.dtype));
  // bf16: cuDNN's batch norm does not take bf16 data; the plan normalises f32 copies.
  m_widened = d.dtype == nn::DType::bf16;
  set_nchw(m_x, d.n, d.c, d.h, d.w, what, m_widened ? nn::DType::f32 : d.dtype, d.layout);
  derive_param(m_param, m_x, kBatchNormMode, d);
  // The extended calls' training problem: reduced types only, in their own type.
  m_ex_candidate = d.dtype == nn::DType::f16 || d.dtype == nn::DType::bf16;
  if (m_ex_candidate) {
    m_ex_mode = d.layout == nn::Layout::nhwc ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
    set_nchw(m_ex_x, d.n, d.c, d.h, d.w, what, d.dtype, d.layout);
    derive_param(m_ex_param, m_ex_x, m_ex_mode, d);
  }
}

// gamma, beta and the statistics are f32 vectors of c: cuDNN must derive [1, c, 1, 1] f32.
void BatchNormDescriptors::derive_param(cudnnTensorDescriptor_t param, cudnnTensorDescriptor_t x,
                                        cudnnBatchNormMode_t mode, const nn::BatchNormDesc& d) {
  SQUALL_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param, x, mode));
  cudnnDataType_t type{};
  int n = 0, c = 0, h = 0, w = 0, sn = 0, sc = 0, sh = 0, sw = 0;
  SQUALL_CUDNN_CHECK(cudnnGetTensor4dDescriptor(param, &type, &n, &c, &h, &w, &sn, &sc, &sh, &sw));
  if (type != CUDNN_DATA_FLOAT || !same(n, c, h, w, nn::Shape(1, d.c, 1, 1)))
    throw Error("batch norm: cuDNN's parameters for " + nn::Shape(d.n, d.c, d.h, d.w).str() + " are " +
                dims_str(n, c, h, w) + (type == CUDNN_DATA_FLOAT ? "" : " not f32") + " where " +
                nn::Shape(1, d.c, 1, 1).str() + " f32 is expected");
}

}  // namespace squall::cuda::detail
