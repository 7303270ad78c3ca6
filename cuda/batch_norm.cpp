// Batch normalisation plans on cuDNN (CUDNN_BATCHNORM_SPATIAL: per channel over n, h, w),
// NCHW or NHWC; x, y, dx, dy f32 or f16 (gamma, beta and the statistics f32 always: cuDNN's
// mixed configuration), or bf16 through f32 copies (below).
//
// Training normalises with the batch mean and biased variance and updates the running
// statistics as PyTorch does: running = (1 - momentum) running + momentum batch, with the
// UNBIASED batch variance (cuDNN's exponentialAverageFactor is PyTorch's momentum, and cuDNN
// updates the running variance with the unbiased estimate, which is why PyTorch's cuDNN
// path agrees with its native one). The batch mean and 1/sqrt(var + eps) cuDNN saves for
// backward live in device memory the plan allocates once. Eval normalises with the running
// statistics.
//
// The descriptors, and the check that cuDNN's parameter descriptor is [1, c, 1, 1] f32, are
// the device-free step's (detail::BatchNormDescriptors, cuda/cudnn_describe.hpp).
//
// bf16: cuDNN's batch norm does not take bf16 data (PyTorch does not call it for bf16
// either), so the plan widens x and dy into f32 scratch of the stream (CudaStream::scratch),
// runs the f32 plan there, and rounds y and dx back: the CPU reference's arithmetic, at
// the cost of the copies.
#include <memory>
#include <string>

#include "cuda/cuda_backend.hpp"
#include "cuda/cudnn_describe.hpp"
#include "cuda/cudnn_util.hpp"
#include "cuda/kernels.cuh"
#include "cuda/plans.hpp"
#include "src/core/error.hpp"

namespace squall::cuda {

namespace {

using detail::DeviceFloats;
using detail::kOne;
using detail::kZero;

constexpr cudnnBatchNormMode_t kMode = detail::kBatchNormMode;

class CudnnBatchNormPlan final : public nn::BatchNormPlan {
 public:
  // `cudnn`: the description step's descriptors (cuda/cudnn_describe.hpp) of an f32 or f16
  // problem; the plan adds the device memory for the saved batch statistics.
  explicit CudnnBatchNormPlan(std::unique_ptr<const detail::BatchNormDescriptors> cudnn)
      : m_cudnn(std::move(cudnn)), m_desc(m_cudnn->desc()) {
    if (m_cudnn->widened())
      throw Error(std::string("batch norm: cuDNN's plan takes f32 or f16 activations, not ") +
                  nn::dtype_name(m_desc.dtype));
    m_x = m_cudnn->x();
    m_param = m_cudnn->param();
    m_saved = DeviceFloats(2 * static_cast<size_t>(m_desc.c));
  }

  void forward(nn::Stream& s, const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool train) override {
    const cudnnHandle_t h = cuda_stream(s).cudnn();
    if (train) {
      if (m_desc.n * m_desc.h * m_desc.w < 2)
        throw Error("batch norm: training needs more than one value per channel, got input " +
                    nn::Shape(m_desc.n, m_desc.c, m_desc.h, m_desc.w).str());
      SQUALL_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
          h, kMode, &kOne, &kZero, m_x, x, m_x, y, m_param, gamma, beta, static_cast<double>(m_desc.momentum),
          running_mean, running_var, static_cast<double>(m_desc.eps), saved_mean(), saved_inv_std()));
    } else {
      SQUALL_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(h, kMode, &kOne, &kZero, m_x, x, m_x, y, m_param,
                                                                 gamma, beta, running_mean, running_var,
                                                                 static_cast<double>(m_desc.eps)));
    }
    m_have_batch_stats = train;
  }

  void backward(nn::Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                float* dbeta) override {
    if (!m_have_batch_stats) throw Error("batch norm: backward needs a forward with train=true first");
    // alpha/beta for dx and for (dgamma, dbeta): 1 and 0, so all three are overwritten.
    SQUALL_CUDNN_CHECK(cudnnBatchNormalizationBackward(cuda_stream(s).cudnn(), kMode, &kOne, &kZero, &kOne, &kZero,
                                                       m_x, x, m_x, dy, m_x, dx, m_param, gamma, dgamma, dbeta,
                                                       static_cast<double>(m_desc.eps), saved_mean(),
                                                       saved_inv_std()));
  }

 private:
  float* saved_mean() const { return m_saved.data(); }
  float* saved_inv_std() const { return m_saved.data() + m_desc.c; }

  std::unique_ptr<const detail::BatchNormDescriptors> m_cudnn;  // owns the descriptors below
  nn::BatchNormDesc m_desc;
  cudnnTensorDescriptor_t m_x = nullptr;      // x, y, dy and dx: [n, c, h, w]
  cudnnTensorDescriptor_t m_param = nullptr;  // gamma, beta, running and saved statistics: [1, c, 1, 1]
  DeviceFloats m_saved;      // batch mean, then 1/sqrt(var + eps), of the last training forward
  bool m_have_batch_stats = false;
};

// bf16 through the f32 plan: x (and dy) widened into the stream's scratch, y (and dx)
// rounded back. The scratch holds three f32 tensors of x's size.
class WidenedBatchNormPlan final : public nn::BatchNormPlan {
 public:
  explicit WidenedBatchNormPlan(const nn::BatchNormDesc& d)
      : m_type(detail::kernel_type(d.dtype)), m_count(static_cast<size_t>(d.n * d.c * d.h * d.w)) {
    nn::BatchNormDesc f = d;
    f.dtype = nn::DType::f32;
    m_inner = std::make_unique<CudnnBatchNormPlan>(std::make_unique<const detail::BatchNormDescriptors>(f));
  }

  void forward(nn::Stream& s, const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool train) override {
    CudaStream& cs = cuda_stream(s);
    float* x32 = scratch(cs);
    float* y32 = x32 + m_count;
    kernels::convert(cs.stream(), x, m_type, x32, 0, m_count);
    m_inner->forward(s, x32, gamma, beta, running_mean, running_var, y32, train);
    kernels::convert(cs.stream(), y32, 0, y, m_type, m_count);
  }

  void backward(nn::Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                float* dbeta) override {
    CudaStream& cs = cuda_stream(s);
    float* x32 = scratch(cs);
    float* dy32 = x32 + m_count;
    float* dx32 = dy32 + m_count;
    kernels::convert(cs.stream(), x, m_type, x32, 0, m_count);
    kernels::convert(cs.stream(), dy, m_type, dy32, 0, m_count);
    m_inner->backward(s, x32, dy32, gamma, dx32, dgamma, dbeta);
    kernels::convert(cs.stream(), dx32, 0, dx, m_type, m_count);
  }

 private:
  float* scratch(CudaStream& cs) const { return static_cast<float*>(cs.scratch(3 * m_count * sizeof(float))); }

  int m_type;
  size_t m_count;
  std::unique_ptr<CudnnBatchNormPlan> m_inner;
};

}  // namespace

std::unique_ptr<nn::BatchNormPlan> make_cudnn_batch_norm(const nn::BatchNormDesc& d) {
  auto cudnn = std::make_unique<const detail::BatchNormDescriptors>(d);  // checks d, bf16 included
  if (cudnn->widened()) return std::make_unique<WidenedBatchNormPlan>(d);
  return std::make_unique<CudnnBatchNormPlan>(std::move(cudnn));
}

}  // namespace squall::cuda
