#pragma once
// The CPU backend: the reference implementation of squall::nn::Backend. Heavy kernels come
// from oneDNN (convolution, inner product, pooling, batch normalisation); element-wise work
// is OpenMP-parallel loops. Calls run synchronously on the calling thread; a CpuStream
// carries the oneDNN stream. Its methods are defined across src/cpu/*.cpp by concern.
#include <memory>

#include <oneapi/dnnl/dnnl.hpp>

#include "src/nn/backend.hpp"

namespace squall::cpu {

using namespace squall::nn;

class MemoryPool;  // cpu_backend.cpp: recycles aligned allocations by size

class CpuStream : public Stream {
 public:
  explicit CpuStream(dnnl::engine& engine) : stream(engine) {}
  dnnl::stream stream;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads);
  std::string name() const override { return "cpu"; }
  int threads() const override { return m_threads; }
  void bind_calling_thread(int threads) override;
  dnnl::engine& engine() { return m_engine; }
  static dnnl::stream& dnnl_stream(Stream& s) { return static_cast<CpuStream&>(s).stream; }

  // memory and streams: cpu_backend.cpp
  std::unique_ptr<Stream> create_stream() override;
  void synchronize(Stream&) override;
  Buffer allocate(size_t count) override;
  void copy_from_host(Stream&, float* dst, const float* src, size_t count) override;
  void copy_to_host(Stream&, float* dst, const float* src, size_t count) override;
  void copy(Stream&, float* dst, const float* src, size_t count) override;
  int32_t* allocate_labels(size_t count, Buffer& owner) override;
  void copy_labels_from_host(Stream&, int32_t* dst, const int32_t* src, size_t count) override;
  void copy_labels_to_host(Stream&, int32_t* dst, const int32_t* src, size_t count) override;

  // oneDNN plans: cpu_conv.cpp, cpu_linear.cpp, cpu_pool.cpp, cpu_batch_norm.cpp
  std::unique_ptr<ConvPlan> make_conv(const ConvDesc&) override;
  std::unique_ptr<LinearPlan> make_linear(const LinearDesc&) override;
  std::unique_ptr<PoolPlan> make_pool(const PoolDesc&) override;
  std::unique_ptr<BatchNormPlan> make_batch_norm(const BatchNormDesc&) override;

  // element-wise, resampling, loss: cpu_elementwise.cpp, cpu_loss.cpp
  void fill(Stream&, float* x, size_t n, float value) override;
  void relu_forward(Stream&, const float* x, float* y, size_t n) override;
  void relu_backward(Stream&, const float* y, const float* dy, float* dx, size_t n) override;
  void add(Stream&, const float* a, const float* b, float* y, size_t n) override;
  void axpy(Stream&, float alpha, const float* x, float* y, size_t n) override;
  void scale(Stream&, float alpha, float* x, size_t n) override;
  void dropout_forward(Stream&, const float* x, float* y, float* mask, size_t n, float p, uint64_t seed,
                       uint64_t offset) override;
  void multiply(Stream&, const float* a, const float* b, float* y, size_t n) override;
  void copy_strided(Stream&, float* dst, int64_t dst_stride, int64_t dst_offset, const float* src,
                    int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) override;
  void global_avg_pool_forward(Stream&, const float* x, float* y, int64_t nc, int64_t hw) override;
  void global_avg_pool_backward(Stream&, const float* dy, float* dx, int64_t nc, int64_t hw) override;
  void bilinear_forward(Stream&, const float* x, float* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                        int64_t ow) override;
  void bilinear_backward(Stream&, const float* dy, float* dx, int64_t nc, int64_t h, int64_t w, int64_t oh,
                         int64_t ow) override;
  void softmax_cross_entropy(Stream&, const float* logits, const int32_t* labels, const float* class_weights,
                             int64_t n, int64_t classes, int64_t hw, float* dlogits, float* loss) override;
  void argmax_channels(Stream&, const float* x, int32_t* out, int64_t n, int64_t c, int64_t hw) override;

  // optimizer arithmetic: cpu_optim.cpp
  void sgd_step(Stream&, float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
                float weight_decay, bool nesterov) override;
  void adam_step(Stream&, float* w, const float* g, float* m, float* v, float* update, size_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step,
                 bool apply) override;
  double sum_squares(Stream&, const float* x, size_t n) override;

 private:
  int m_threads;
  dnnl::engine m_engine;
  std::shared_ptr<MemoryPool> m_pool;  // shared with every live Buffer's deleter
};

}  // namespace squall::cpu
