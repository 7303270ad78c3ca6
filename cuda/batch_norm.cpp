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
// bf16: the plain calls are not documented for bf16 data (PyTorch long kept bf16 off them), so
// the plan widens x and dy into f32 scratch of the stream (CudaStream::scratch), runs the f32
// plan there, and rounds y and dx back: the CPU reference's arithmetic, at the cost of the
// copies. The extended calls (below, opt-in) train f16 and bf16 without copies.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda/batch_norm_fallback.hpp"
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

// ---- the extended calls (opt-in) --------------------------------------------------------------
//
// Training through cudnnBatchNormalizationForwardTrainingEx / BackwardEx (CUDNN_BATCHNORM_OPS_BN:
// no fused add or activation) on the description step's Ex problem: f16 and bf16 in their own
// type (no f32 copies for bf16), CUDNN_BATCHNORM_SPATIAL_PERSISTENT in NHWC. Same statistics
// semantics as the plain calls (exponentialAverageFactor = momentum, unbiased running
// variance, saved mean and 1/sqrt(var + eps)); the reserve space the forward fills is the
// plan's and must survive until backward. Eval has no extended call: it runs the plain plan.
//
// f16 and bf16 training takes this path wherever cuDNN states a workspace and reserve size for
// the problem (the plain plan otherwise). Where cuDNN then refuses a call all the same, the plan
// runs the plain calls from then on and says so once per process (cuda/batch_norm_fallback.hpp).
// SQUALL_CUDNN_BN_EX=0 keeps every batch norm on the plain calls (bf16 through f32 copies) from
// the start: what scripts/gpu-check compares with, until a GPU has measured both.

bool ex_requested() {
  static const bool requested = [] {
    const char* v = std::getenv("SQUALL_CUDNN_BN_EX");
    return v == nullptr || std::string(v) != "0";
  }();
  return requested;
}

// One handle per device for the size queries at plan creation (they need one; plans have no
// stream yet). Never destroyed: handles must not be torn down after the CUDA runtime at exit.
cudnnHandle_t query_handle() {
  static std::mutex* mutex = new std::mutex;
  static std::map<int, cudnnHandle_t>* handles = new std::map<int, cudnnHandle_t>;
  int device = 0;
  SQUALL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(*mutex);
  cudnnHandle_t& h = (*handles)[device];
  if (h == nullptr) SQUALL_CUDNN_CHECK(cudnnCreate(&h));
  return h;
}

struct ExSizes {
  size_t forward_workspace = 0, backward_workspace = 0, reserve = 0;
};

// The extended calls' sizes for the problem, or false where cuDNN states none (the problem is
// not one it runs through these calls).
bool ex_sizes(const detail::BatchNormDescriptors& d, ExSizes* out) {
  const cudnnHandle_t h = query_handle();
  const cudnnBatchNormMode_t mode = d.ex_mode();
  const cudnnTensorDescriptor_t x = d.ex_x();
  return cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, mode, CUDNN_BATCHNORM_OPS_BN, x, nullptr, x,
                                                                  d.ex_param(), nullptr,
                                                                  &out->forward_workspace) == CUDNN_STATUS_SUCCESS &&
         cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, mode, CUDNN_BATCHNORM_OPS_BN, x, x, x, nullptr, x,
                                                           d.ex_param(), nullptr,
                                                           &out->backward_workspace) == CUDNN_STATUS_SUCCESS &&
         cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, mode, CUDNN_BATCHNORM_OPS_BN, nullptr, x,
                                                              &out->reserve) == CUDNN_STATUS_SUCCESS;
}

// The extended calls on cuDNN for one problem: the descriptors, the workspace sizes, the saved
// batch statistics and the reserve space the forward fills and the backward reads. The plan
// around them (cuda/batch_norm_fallback.hpp) decides what runs, and runs the plain calls where
// cuDNN refuses these.
class CudnnExCalls final : public detail::BatchNormExCalls {
 public:
  CudnnExCalls(std::unique_ptr<const detail::BatchNormDescriptors> cudnn, const ExSizes& sizes)
      : m_cudnn(std::move(cudnn)),
        m_c(static_cast<size_t>(m_cudnn->desc().c)),
        m_sizes(sizes),
        m_saved(2 * m_c),
        m_scratch(2 * m_c),
        m_reserve(sizes.reserve) {}

  cudnnStatus_t forward_training(nn::Stream& s, const void* x, const float* gamma, const float* beta,
                                 float* running_mean, float* running_var, void* y) override {
    CudaStream& cs = cuda_stream(s);
    const nn::BatchNormDesc& d = m_cudnn->desc();
    const cudnnTensorDescriptor_t xd = m_cudnn->ex_x();
    return cudnnBatchNormalizationForwardTrainingEx(
        cs.cudnn(), m_cudnn->ex_mode(), CUDNN_BATCHNORM_OPS_BN, &kOne, &kZero, xd, x, nullptr, nullptr, xd, y,
        m_cudnn->ex_param(), gamma, beta, static_cast<double>(d.momentum), running_mean, running_var,
        static_cast<double>(d.eps), saved_mean(), saved_inv_std(), nullptr, workspace(cs, m_sizes.forward_workspace),
        m_sizes.forward_workspace, m_reserve.data(), m_sizes.reserve);
  }

  cudnnStatus_t backward(nn::Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                         float* dbeta) override {
    CudaStream& cs = cuda_stream(s);
    const cudnnTensorDescriptor_t xd = m_cudnn->ex_x();
    // No y, z, dz or activation (CUDNN_BATCHNORM_OPS_BN); dx, dgamma and dbeta overwritten.
    return cudnnBatchNormalizationBackwardEx(
        cs.cudnn(), m_cudnn->ex_mode(), CUDNN_BATCHNORM_OPS_BN, &kOne, &kZero, &kOne, &kZero, xd, x, nullptr,
        nullptr, xd, dy, nullptr, nullptr, xd, dx, m_cudnn->ex_param(), gamma, nullptr, dgamma, dbeta,
        static_cast<double>(m_cudnn->desc().eps), saved_mean(), saved_inv_std(), nullptr,
        workspace(cs, m_sizes.backward_workspace), m_sizes.backward_workspace, m_reserve.data(), m_sizes.reserve);
  }

  float* scratch_statistics() override { return m_scratch.data(); }

 private:
  static void* workspace(CudaStream& cs, size_t bytes) { return bytes > 0 ? cs.workspace(bytes) : nullptr; }
  float* saved_mean() const { return m_saved.data(); }
  float* saved_inv_std() const { return m_saved.data() + m_c; }

  std::unique_ptr<const detail::BatchNormDescriptors> m_cudnn;
  size_t m_c;
  ExSizes m_sizes;
  DeviceFloats m_saved;           // batch mean, then 1/sqrt(var + eps), of the last training forward
  DeviceFloats m_scratch;         // a redone plain forward's running statistics (batch_norm_fallback.hpp)
  detail::DeviceBytes m_reserve;  // cuDNN's reserve space, filled by forward, read by backward
};

// The plain plans: f32 and f16 directly, bf16 through f32 copies.
std::unique_ptr<nn::BatchNormPlan> make_plain(const nn::BatchNormDesc& d,
                                              std::unique_ptr<const detail::BatchNormDescriptors> cudnn) {
  if (cudnn->widened()) return std::make_unique<WidenedBatchNormPlan>(d);
  return std::make_unique<CudnnBatchNormPlan>(std::move(cudnn));
}

}  // namespace

std::unique_ptr<nn::BatchNormPlan> make_cudnn_batch_norm(const nn::BatchNormDesc& d) {
  auto cudnn = std::make_unique<const detail::BatchNormDescriptors>(d);  // checks d, bf16 included
  ExSizes sizes;
  if (cudnn->ex_candidate() && ex_requested() && ex_sizes(*cudnn, &sizes))
    return std::make_unique<detail::FallbackBatchNormPlan>(
        d, std::make_unique<CudnnExCalls>(std::move(cudnn), sizes),
        make_plain(d, std::make_unique<const detail::BatchNormDescriptors>(d)), detail::ExRefusalLog::process());
  return make_plain(d, std::move(cudnn));
}

}  // namespace squall::cuda
