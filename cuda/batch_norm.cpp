// Batch normalisation plans on cuDNN (CUDNN_BATCHNORM_SPATIAL: per channel over n, h, w),
// NCHW f32.
//
// Training normalises with the batch mean and biased variance and updates the running
// statistics as PyTorch does: running = (1 - momentum) running + momentum batch, with the
// UNBIASED batch variance (cuDNN's exponentialAverageFactor is PyTorch's momentum, and cuDNN
// updates the running variance with the unbiased estimate, which is why PyTorch's cuDNN
// path agrees with its native one). The batch mean and 1/sqrt(var + eps) cuDNN saves for
// backward live in device memory the plan allocates once. Eval normalises with the running
// statistics.
#include <string>

#include "cuda/cuda_backend.hpp"
#include "cuda/cudnn_util.hpp"
#include "cuda/plans.hpp"
#include "src/core/error.hpp"

namespace squall::cuda {

namespace {

using detail::DeviceFloats;
using detail::kOne;
using detail::kZero;
using detail::TensorDescriptor;

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

class CudnnBatchNormPlan final : public nn::BatchNormPlan {
 public:
  explicit CudnnBatchNormPlan(const nn::BatchNormDesc& d) : m_desc(d) {
    if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || !(d.eps > 0.0f))
      throw Error("batch norm: invalid description " + nn::Shape(d.n, d.c, d.h, d.w).str() +
                  " eps=" + std::to_string(d.eps));
    detail::set_nchw(m_x, d.n, d.c, d.h, d.w, "batch norm");
    SQUALL_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(m_param, m_x, kMode));  // [1, c, 1, 1]
    m_saved = DeviceFloats(2 * static_cast<size_t>(d.c));
  }

  void forward(nn::Stream& s, const float* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, float* y, bool train) override {
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

  void backward(nn::Stream& s, const float* x, const float* dy, const float* gamma, float* dx, float* dgamma,
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

  nn::BatchNormDesc m_desc;
  TensorDescriptor m_x;      // x, y, dy and dx: [n, c, h, w]
  TensorDescriptor m_param;  // gamma, beta, running and saved statistics: [1, c, 1, 1]
  DeviceFloats m_saved;      // batch mean, then 1/sqrt(var + eps), of the last training forward
  bool m_have_batch_stats = false;
};

}  // namespace

std::unique_ptr<nn::BatchNormPlan> make_cudnn_batch_norm(const nn::BatchNormDesc& d) {
  return std::make_unique<CudnnBatchNormPlan>(d);
}

}  // namespace squall::cuda
