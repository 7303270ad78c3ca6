#pragma once
// A Backend that is the CPU backend, except that it writes down every convolution, pooling and
// batch-norm description a graph's layers ask it to plan. Graph::build on it is a real build
// (the CPU backend makes the plans and holds the memory), so what it records is exactly what
// the same model would ask of the CUDA backend, without a GPU.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/nn/backend.hpp"

namespace squall::test {

class RecordingBackend final : public nn::Backend {
 public:
  // threads: the CPU backend's team size (1 keeps it off cores the other tests use).
  explicit RecordingBackend(int threads = 1) : m_cpu(nn::make_cpu_backend(threads)) {}

  // What the layers asked for since construction (or clear()), in the order they asked.
  const std::vector<nn::ConvDesc>& convs() const { return m_convs; }
  const std::vector<nn::PoolDesc>& pools() const { return m_pools; }
  const std::vector<nn::BatchNormDesc>& batch_norms() const { return m_batch_norms; }
  void clear() {
    m_convs.clear();
    m_pools.clear();
    m_batch_norms.clear();
  }

  // ---- the recorded plans ----
  std::unique_ptr<nn::ConvPlan> make_conv(const nn::ConvDesc& d) override {
    m_convs.push_back(d);
    return m_cpu->make_conv(d);
  }
  std::unique_ptr<nn::PoolPlan> make_pool(const nn::PoolDesc& d) override {
    m_pools.push_back(d);
    return m_cpu->make_pool(d);
  }
  std::unique_ptr<nn::BatchNormPlan> make_batch_norm(const nn::BatchNormDesc& d) override {
    m_batch_norms.push_back(d);
    return m_cpu->make_batch_norm(d);
  }
  std::unique_ptr<nn::LinearPlan> make_linear(const nn::LinearDesc& d) override { return m_cpu->make_linear(d); }

  // ---- everything else: the CPU backend's ----
  std::string name() const override { return m_cpu->name(); }
  nn::DeviceInfo device() const override { return m_cpu->device(); }
  bool host_accessible() const override { return m_cpu->host_accessible(); }
  std::unique_ptr<nn::Stream> create_stream() override { return m_cpu->create_stream(); }
  std::unique_ptr<nn::Event> create_event() override { return m_cpu->create_event(); }
  void record(nn::Event& e, nn::Stream& s) override { m_cpu->record(e, s); }
  void wait(nn::Stream& s, nn::Event& e) override { m_cpu->wait(s, e); }
  void synchronize(nn::Stream& s) override { m_cpu->synchronize(s); }
  void synchronize(nn::Event& e) override { m_cpu->synchronize(e); }
  bool ready(nn::Event& e) override { return m_cpu->ready(e); }
  void synchronize_all() override { m_cpu->synchronize_all(); }
  int threads() const override { return m_cpu->threads(); }
  void bind_calling_thread(int threads) override { m_cpu->bind_calling_thread(threads); }

  using nn::Backend::allocate;
  nn::Buffer allocate(size_t count, nn::DType t) override { return m_cpu->allocate(count, t); }
  nn::Buffer allocate_host(size_t count, nn::DType t) override { return m_cpu->allocate_host(count, t); }
  void copy_bytes_from_host(nn::Stream& s, void* dst, const void* src, size_t bytes) override {
    m_cpu->copy_bytes_from_host(s, dst, src, bytes);
  }
  void copy_bytes_to_host(nn::Stream& s, void* dst, const void* src, size_t bytes) override {
    m_cpu->copy_bytes_to_host(s, dst, src, bytes);
  }
  void copy_bytes(nn::Stream& s, void* dst, const void* src, size_t bytes) override {
    m_cpu->copy_bytes(s, dst, src, bytes);
  }
  void convert(nn::Stream& s, const void* src, nn::DType from, void* dst, nn::DType to, size_t n) override {
    m_cpu->convert(s, src, from, dst, to, n);
  }
  void permute_layout(nn::Stream& s, nn::DType t, const void* src, nn::Layout from, void* dst, nn::Layout to,
                      int64_t n, int64_t c, int64_t h, int64_t w) override {
    m_cpu->permute_layout(s, t, src, from, dst, to, n, c, h, w);
  }

  using nn::Backend::add;
  using nn::Backend::argmax_channels;
  using nn::Backend::bilinear_backward;
  using nn::Backend::bilinear_forward;
  using nn::Backend::copy_strided;
  using nn::Backend::dropout_forward;
  using nn::Backend::global_avg_pool_backward;
  using nn::Backend::global_avg_pool_forward;
  using nn::Backend::multiply;
  using nn::Backend::relu_backward;
  using nn::Backend::relu_forward;
  using nn::Backend::softmax_cross_entropy;
  void fill(nn::Stream& s, float* x, size_t n, float value) override { m_cpu->fill(s, x, n, value); }
  void relu_forward(nn::Stream& s, nn::DType t, const void* x, void* y, size_t n) override {
    m_cpu->relu_forward(s, t, x, y, n);
  }
  void relu_backward(nn::Stream& s, nn::DType t, const void* y, const void* dy, void* dx, size_t n) override {
    m_cpu->relu_backward(s, t, y, dy, dx, n);
  }
  void add(nn::Stream& s, nn::DType t, const void* a, const void* b, void* y, size_t n) override {
    m_cpu->add(s, t, a, b, y, n);
  }
  void axpy(nn::Stream& s, float alpha, const float* x, float* y, size_t n) override { m_cpu->axpy(s, alpha, x, y, n); }
  void scale(nn::Stream& s, float alpha, float* x, size_t n) override { m_cpu->scale(s, alpha, x, n); }
  void axpby(nn::Stream& s, float alpha, const float* x, float beta, float* y, size_t n) override {
    m_cpu->axpby(s, alpha, x, beta, y, n);
  }
  void dropout_forward(nn::Stream& s, nn::DType t, const void* x, void* y, void* mask, size_t n, float p,
                       uint64_t seed, uint64_t offset) override {
    m_cpu->dropout_forward(s, t, x, y, mask, n, p, seed, offset);
  }
  void multiply(nn::Stream& s, nn::DType t, const void* a, const void* b, void* y, size_t n) override {
    m_cpu->multiply(s, t, a, b, y, n);
  }
  void copy_strided(nn::Stream& s, nn::DType t, void* dst, int64_t dst_stride, int64_t dst_offset, const void* src,
                    int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) override {
    m_cpu->copy_strided(s, t, dst, dst_stride, dst_offset, src, src_stride, src_offset, rows, count);
  }
  void global_avg_pool_forward(nn::Stream& s, nn::DType t, const void* x, void* y, int64_t nc, int64_t hw) override {
    m_cpu->global_avg_pool_forward(s, t, x, y, nc, hw);
  }
  void global_avg_pool_backward(nn::Stream& s, nn::DType t, const void* dy, void* dx, int64_t nc,
                                int64_t hw) override {
    m_cpu->global_avg_pool_backward(s, t, dy, dx, nc, hw);
  }
  void bilinear_forward(nn::Stream& s, nn::DType t, const void* x, void* y, int64_t nc, int64_t h, int64_t w,
                        int64_t oh, int64_t ow) override {
    m_cpu->bilinear_forward(s, t, x, y, nc, h, w, oh, ow);
  }
  void bilinear_backward(nn::Stream& s, nn::DType t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w,
                         int64_t oh, int64_t ow) override {
    m_cpu->bilinear_backward(s, t, dy, dx, nc, h, w, oh, ow);
  }
  void softmax_cross_entropy(nn::Stream& s, nn::DType t, const void* logits, const int32_t* labels,
                             const float* class_weights, int64_t n, int64_t classes, int64_t hw, void* dlogits,
                             float* loss, const float* grad_scale) override {
    m_cpu->softmax_cross_entropy(s, t, logits, labels, class_weights, n, classes, hw, dlogits, loss, grad_scale);
  }
  void argmax_channels(nn::Stream& s, nn::DType t, const void* x, int32_t* out, int64_t n, int64_t c,
                       int64_t hw) override {
    m_cpu->argmax_channels(s, t, x, out, n, c, hw);
  }
  void accumulate_confusion(nn::Stream& s, const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
                            int32_t* confusion) override {
    m_cpu->accumulate_confusion(s, labels, pred, n, classes, confusion);
  }

  void sgd_step(nn::Stream& s, float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
                float weight_decay, bool nesterov) override {
    m_cpu->sgd_step(s, w, g, velocity, n, lr, momentum, weight_decay, nesterov);
  }
  void adam_step(nn::Stream& s, float* w, const float* g, float* m, float* v, float* update, size_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step,
                 bool apply) override {
    m_cpu->adam_step(s, w, g, m, v, update, n, lr, beta1, beta2, eps, weight_decay, decoupled, step, apply);
  }
  void sum_squares(nn::Stream& s, const float* x, size_t n, float* out) override { m_cpu->sum_squares(s, x, n, out); }
  std::unique_ptr<nn::TensorSet> make_tensor_set(std::vector<nn::TensorRef> tensors) override {
    return m_cpu->make_tensor_set(std::move(tensors));
  }
  void sgd_update(nn::Stream& s, nn::TensorSet& t, float* velocity, const nn::SgdArgs& a) override {
    m_cpu->sgd_update(s, t, velocity, a);
  }
  void adam_update(nn::Stream& s, nn::TensorSet& t, float* m, float* v, const nn::AdamArgs& a) override {
    m_cpu->adam_update(s, t, m, v, a);
  }
  void larc_scale(nn::Stream& s, nn::TensorSet& t, const nn::LarcArgs& a) override { m_cpu->larc_scale(s, t, a); }

 private:
  std::unique_ptr<nn::Backend> m_cpu;
  std::vector<nn::ConvDesc> m_convs;
  std::vector<nn::PoolDesc> m_pools;
  std::vector<nn::BatchNormDesc> m_batch_norms;
};

}  // namespace squall::test
