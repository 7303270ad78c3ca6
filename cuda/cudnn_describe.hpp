#pragma once
// The device-free half of the cuDNN plans (docs/design.md, "Backends"): squall's operation
// descriptions turned into cuDNN's tensor, filter, convolution, pooling and batch-norm
// parameter descriptors, with cuDNN's own output sizes checked against squall's shapes.
// None of this needs a GPU, a driver or a cuDNN handle (descriptors are host structures), so
// a machine without a device can check every model's descriptions (tests/cuda_host); the
// plans (conv.cpp, pool.cpp, batch_norm.cpp) take these objects and add only the device part:
// algorithm choice, workspace, handles, device memory.
//
// Each constructor validates the description and throws squall::Error naming the operation
// and the shapes when squall and cuDNN would disagree about it: a description the model's
// layers produce must never reach a device to fail there. Objects are built in place (the
// descriptors they own are neither copied nor moved).
#include <cudnn.h>

#include "cuda/cudnn_util.hpp"
#include "src/nn/backend.hpp"

namespace squall::cuda::detail {

// Per channel over (n, h, w): the mode of every batch-norm call of the plans.
inline constexpr cudnnBatchNormMode_t kBatchNormMode = CUDNN_BATCHNORM_SPATIAL;

// A convolution as the forward problem cuDNN sees (cuda/conv.cpp explains the mapping):
// ordinary, in = x and out = y; transposed, in = y and out = x; the filter is d.weight() in
// the activations' type and memory order, and the arithmetic is f32.
class ConvDescriptors {
 public:
  explicit ConvDescriptors(const nn::ConvDesc& d);
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;

  const nn::ConvDesc& desc() const { return m_desc; }
  cudnnTensorDescriptor_t x() const { return m_x; }  // squall's input [n, c, h, w]
  cudnnTensorDescriptor_t y() const { return m_y; }  // squall's output, d.output()
  cudnnFilterDescriptor_t filter() const { return m_filter; }
  cudnnConvolutionDescriptor_t conv() const { return m_conv; }
  // The f32 bias [1, k, 1, 1] for cuDNN's AddTensor and BackwardBias: set only when cuDNN adds
  // the bias (f32 NCHW); otherwise squall's kernels do (cuda/bias.cu) and this is null.
  cudnnTensorDescriptor_t bias() const { return m_bias_used ? m_bias.get() : nullptr; }
  // The forward problem's input and output (x and y, or y and x when transposed).
  cudnnTensorDescriptor_t problem_in() const { return m_desc.transposed ? m_y.get() : m_x.get(); }
  cudnnTensorDescriptor_t problem_out() const { return m_desc.transposed ? m_x.get() : m_y.get(); }
  nn::Shape problem_in_shape() const { return m_desc.transposed ? m_output : m_input; }
  nn::Shape problem_out_shape() const { return m_desc.transposed ? m_input : m_output; }
  const nn::Shape& output() const { return m_output; }
  const nn::Shape& filter_shape() const { return m_filter_shape; }  // [k, c, r, s] or [c, k, r, s]
  bool reduced() const { return m_desc.dtype != nn::DType::f32; }    // bf16/f16: tensor cores
  bool nhwc() const { return m_desc.layout == nn::Layout::nhwc; }
  // The plan keeps the weights (and their gradient) in the activations' type and order.
  bool copies_weights() const { return reduced() || nhwc(); }

 private:
  nn::ConvDesc m_desc;
  nn::Shape m_input, m_output, m_filter_shape;
  TensorDescriptor m_x, m_y, m_bias;
  FilterDescriptor m_filter;
  ConvolutionDescriptor m_conv;
  bool m_bias_used = false;
};

// A pooling window over x. cuDNN pools f32 and f16; bf16 is described as the f32 problem the
// plan runs on its widened copies (widened() says so).
class PoolDescriptors {
 public:
  explicit PoolDescriptors(const nn::PoolDesc& d);
  PoolDescriptors(const PoolDescriptors&) = delete;
  PoolDescriptors& operator=(const PoolDescriptors&) = delete;

  const nn::PoolDesc& desc() const { return m_desc; }
  cudnnTensorDescriptor_t x() const { return m_x; }
  cudnnTensorDescriptor_t y() const { return m_y; }
  cudnnPoolingDescriptor_t pool() const { return m_pool; }
  const nn::Shape& output() const { return m_output; }
  bool widened() const { return m_widened; }

 private:
  nn::PoolDesc m_desc;
  nn::Shape m_output;
  TensorDescriptor m_x, m_y;
  PoolingDescriptor m_pool;
  bool m_widened = false;
};

// Batch normalisation: x (also y, dx, dy) and the parameter descriptor cuDNN derives from it
// for gamma, beta and the statistics (f32, [1, c, 1, 1]). bf16 is described as the f32 problem
// the plan runs on widened copies (widened()).
//
// For f16 and bf16 activations it also describes the training problem of cuDNN's extended
// calls (cudnnBatchNormalizationForwardTrainingEx / BackwardEx, cuda/batch_norm.cpp, opt-in):
// x in its own type, bf16 included, and CUDNN_BATCHNORM_SPATIAL_PERSISTENT in NHWC (cuDNN's
// fast channels-last kernels, which PyTorch also keeps to channels last), CUDNN_BATCHNORM_SPATIAL
// in NCHW. f32 stays on the plain calls: it is the precision the CPU reference is matched in,
// and the persistent kernels' reductions limit the range of the values.
class BatchNormDescriptors {
 public:
  explicit BatchNormDescriptors(const nn::BatchNormDesc& d);
  BatchNormDescriptors(const BatchNormDescriptors&) = delete;
  BatchNormDescriptors& operator=(const BatchNormDescriptors&) = delete;

  const nn::BatchNormDesc& desc() const { return m_desc; }
  cudnnTensorDescriptor_t x() const { return m_x; }
  cudnnTensorDescriptor_t param() const { return m_param; }
  bool widened() const { return m_widened; }

  // The extended calls' training problem (null descriptors when !ex_candidate()).
  bool ex_candidate() const { return m_ex_candidate; }
  cudnnBatchNormMode_t ex_mode() const { return m_ex_mode; }
  cudnnTensorDescriptor_t ex_x() const { return m_ex_candidate ? m_ex_x.get() : nullptr; }
  cudnnTensorDescriptor_t ex_param() const { return m_ex_candidate ? m_ex_param.get() : nullptr; }

 private:
  nn::BatchNormDesc m_desc;
  TensorDescriptor m_x, m_param;
  bool m_widened = false;
  TensorDescriptor m_ex_x, m_ex_param;
  bool m_ex_candidate = false;
  cudnnBatchNormMode_t m_ex_mode = kBatchNormMode;

  static void derive_param(cudnnTensorDescriptor_t param, cudnnTensorDescriptor_t x, cudnnBatchNormMode_t mode,
                           const nn::BatchNormDesc& d);
};

}  // namespace squall::cuda::detail
