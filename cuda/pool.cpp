// Pooling plans on cuDNN, NCHW or NHWC, f32 or f16 (bf16 through f32 copies, below). Max
// pooling is CUDNN_POOLING_MAX_DETERMINISTIC; average
// pooling divides by the number of input elements in the window, padding excluded
// (CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, PyTorch's count_include_pad=False).
//
// cuDNN keeps no state between forward and backward: its backward takes x and y again (max
// pooling finds each window's maximum anew). The PoolPlan interface gives backward only dy,
// so the plan remembers x and y of the last training forward; the graph keeps both alive
// until the layer's backward has run.
//
// The descriptors and the checks of the description (cuDNN's output size against squall's)
// are the device-free step's (detail::PoolDescriptors, cuda/cudnn_describe.hpp).
//
// bf16: the plan widens x into an f32 copy it keeps (cuDNN's backward reads x and y again),
// pools that with the f32 plan and rounds y; backward widens dy, and rounds dx. cuDNN's
// pooling is not documented for bf16, and pooling layers are few (a stem's max pool).
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

using detail::kOne;
using detail::kZero;

class CudnnPoolPlan final : public nn::PoolPlan {
 public:
  // `cudnn`: the description step's descriptors (cuda/cudnn_describe.hpp) of an f32 or f16
  // problem; cuDNN's pooling needs nothing more of the device until it runs.
  explicit CudnnPoolPlan(std::unique_ptr<const detail::PoolDescriptors> cudnn)
      : m_cudnn(std::move(cudnn)), m_desc(m_cudnn->desc()) {
    if (m_cudnn->widened())
      throw Error(std::string("pool: cuDNN's plan takes f32 or f16 activations, not ") +
                  nn::dtype_name(m_desc.dtype));
    m_x = m_cudnn->x();
    m_y = m_cudnn->y();
    m_pool = m_cudnn->pool();
  }

  void forward(nn::Stream& s, const void* x, void* y, bool train) override {
    SQUALL_CUDNN_CHECK(cudnnPoolingForward(cuda_stream(s).cudnn(), m_pool, &kOne, m_x, x, &kZero, m_y, y));
    if (train) {
      m_saved_x = x;
      m_saved_y = y;
    }
  }

  void backward(nn::Stream& s, const void* dy, void* dx) override {
    if (dx == nullptr) return;
    const bool max = m_desc.kind == nn::PoolKind::max;
    if (max && m_saved_x == nullptr)
      throw Error("pool: max-pooling backward needs a forward with train=true first (it keeps the argmax)");
    // Average pooling reads neither x nor y; valid pointers are passed all the same.
    const void* x = m_saved_x != nullptr ? m_saved_x : dx;
    const void* y = m_saved_y != nullptr ? m_saved_y : dy;
    SQUALL_CUDNN_CHECK(cudnnPoolingBackward(cuda_stream(s).cudnn(), m_pool, &kOne, m_y, y, m_y, dy, m_x, x, &kZero,
                                            m_x, dx));
  }

 private:
  std::unique_ptr<const detail::PoolDescriptors> m_cudnn;  // owns the descriptors below
  nn::PoolDesc m_desc;
  cudnnTensorDescriptor_t m_x = nullptr, m_y = nullptr;
  cudnnPoolingDescriptor_t m_pool = nullptr;
  const void* m_saved_x = nullptr;  // x and y of the last training forward, for backward
  const void* m_saved_y = nullptr;
};

// bf16 through the f32 plan, on f32 copies the plan owns: x and y persist from forward to
// backward (the f32 plan's backward reads them); dy and dx are separate.
class WidenedPoolPlan final : public nn::PoolPlan {
 public:
  explicit WidenedPoolPlan(const nn::PoolDesc& d)
      : m_type(detail::kernel_type(d.dtype)),
        m_x_count(static_cast<size_t>(d.n * d.c * d.h * d.w)),
        m_y_count(static_cast<size_t>(d.output().numel())) {
    nn::PoolDesc f = d;
    f.dtype = nn::DType::f32;
    m_inner = std::make_unique<CudnnPoolPlan>(std::make_unique<const detail::PoolDescriptors>(f));
    m_x = detail::DeviceFloats(m_x_count);
    m_dx = detail::DeviceFloats(m_x_count);
    m_y = detail::DeviceFloats(m_y_count);
    m_dy = detail::DeviceFloats(m_y_count);
  }

  void forward(nn::Stream& s, const void* x, void* y, bool train) override {
    const cudaStream_t st = raw(s);
    kernels::convert(st, x, m_type, m_x.data(), 0, m_x_count);
    m_inner->forward(s, m_x.data(), m_y.data(), train);
    kernels::convert(st, m_y.data(), 0, y, m_type, m_y_count);
  }

  void backward(nn::Stream& s, const void* dy, void* dx) override {
    if (dx == nullptr) return;
    const cudaStream_t st = raw(s);
    kernels::convert(st, dy, m_type, m_dy.data(), 0, m_y_count);
    m_inner->backward(s, m_dy.data(), m_dx.data());
    kernels::convert(st, m_dx.data(), 0, dx, m_type, m_x_count);
  }

 private:
  int m_type;
  size_t m_x_count, m_y_count;
  std::unique_ptr<CudnnPoolPlan> m_inner;
  detail::DeviceFloats m_x, m_y, m_dx, m_dy;
};

}  // namespace

std::unique_ptr<nn::PoolPlan> make_cudnn_pool(const nn::PoolDesc& d) {
  auto cudnn = std::make_unique<const detail::PoolDescriptors>(d);  // checks d, bf16 included
  if (cudnn->widened()) return std::make_unique<WidenedPoolPlan>(d);
  return std::make_unique<CudnnPoolPlan>(std::move(cudnn));
}

}  // namespace squall::cuda
