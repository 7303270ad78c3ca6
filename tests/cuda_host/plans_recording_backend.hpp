#pragma once
// The CPU backend, except that it writes down every convolution, pooling and
// batch-norm description a graph's layers ask it to plan. Graph::build on it is a real build
// (the CPU backend makes the plans and holds the memory), so what it records is exactly what
// the same model would ask of the CUDA backend, without a GPU.
//
// It also tallies the work as the CUDA backend would enqueue it (tests/cuda_host/
// test_plans_traffic.cpp): per kind, the launches (a kernel, or a cudaMemcpyAsync) and the
// bytes they read and write, from the arguments of each call and, for the plans, from what
// cuda/conv.cpp and cuda/linear.cpp launch besides the library's own calls (the weight copies
// and the bias kernels). cuDNN's and cuBLAS's calls are counted as one launch each, their
// bytes not at all: what squall's own kernels and copies move is what the tally is for.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/nn/backend.hpp"

namespace squall::test {

struct Traffic {
  size_t launches = 0;
  double bytes = 0;
};
using TrafficTable = std::map<std::string, Traffic>;

// `launches` launches of kind `what`, moving `bytes` between them.
inline void note(TrafficTable& t, const std::string& what, double bytes, size_t launches = 1) {
  t[what].launches += launches;
  t[what].bytes += bytes;
}

namespace detail {

inline double size_of(nn::DType t) { return static_cast<double>(nn::dtype_size(t)); }

// The CUDA convolution plan's launches around cuDNN's (cuda/conv.cpp): a weight copy in the
// activations' type and order when the plan keeps one, squall's bias kernels there.
class TallyingConvPlan final : public nn::ConvPlan {
 public:
  TallyingConvPlan(std::unique_ptr<nn::ConvPlan> inner, const nn::ConvDesc& d, TrafficTable& t)
      : m_inner(std::move(inner)), m_d(d), m_t(t) {
    m_copy = d.dtype != nn::DType::f32 || d.layout == nn::Layout::nhwc;
    m_w = static_cast<double>(d.weight().numel());
    m_y = static_cast<double>(d.output().numel());
  }
  void forward(nn::Stream& s, const void* x, const float* w, const float* b, void* y) override {
    if (m_copy) note(m_t, "conv weights to the plan's copy", m_w * (4 + size_of(m_d.dtype)));
    after_forward(b);
    m_inner->forward(s, x, w, b, y);
  }
  // The copy is the optimizer's now (see the update's tally).
  void forward_mirrored(nn::Stream& s, const void* x, const float* w, const float* b, void* y) override {
    after_forward(b);
    m_inner->forward_mirrored(s, x, w, b, y);
  }
  // The CUDA plan's copy (cuda/conv.cpp) has the activations' type; the CPU plan's is wider,
  // so the tally's bytes are the CUDA one's, the memory the CPU plan's.
  nn::WeightMirror weight_mirror() const override { return m_inner->weight_mirror(); }
  void backward_data(nn::Stream& s, const void* dy, const float* w, void* dx) override {
    if (dx != nullptr) note(m_t, "cuDNN/cuBLAS calls", 0);
    m_inner->backward_data(s, dy, w, dx);
  }
  void backward_weights(nn::Stream& s, const void* x, const void* dy, float* dw, float* db) override {
    note(m_t, "cuDNN/cuBLAS calls", 0);
    if (m_copy) note(m_t, "conv weight gradient from the plan's copy", m_w * (4 + size_of(m_d.dtype)));
    if (m_d.bias && db != nullptr) {
      if (m_copy) note(m_t, "bias gradient (2 passes)", m_y * size_of(m_d.dtype), 2);
      else note(m_t, "cuDNN/cuBLAS calls", 0);
    }
    m_inner->backward_weights(s, x, dy, dw, db);
  }

 private:
  void after_forward(const float* b) {
    note(m_t, "cuDNN/cuBLAS calls", 0);
    if (!m_d.bias || b == nullptr) return;
    if (m_copy) note(m_t, "bias add", 2 * m_y * size_of(m_d.dtype));
    else note(m_t, "cuDNN/cuBLAS calls", 0);
  }

  std::unique_ptr<nn::ConvPlan> m_inner;
  nn::ConvDesc m_d;
  TrafficTable& m_t;
  bool m_copy = false;
  double m_w = 0, m_y = 0;
};

// cuda/linear.cpp: at bf16/f16 forward converts the weights into the plan's copy and the bias
// is squall's kernels; at f32 it is cuBLAS throughout.
class TallyingLinearPlan final : public nn::LinearPlan {
 public:
  TallyingLinearPlan(std::unique_ptr<nn::LinearPlan> inner, const nn::LinearDesc& d, TrafficTable& t)
      : m_inner(std::move(inner)), m_d(d), m_t(t) {}
  void forward(nn::Stream& s, const void* x, const float* w, const float* b, void* y) override {
    const bool reduced = m_d.dtype != nn::DType::f32;
    const double weights = static_cast<double>(m_d.in * m_d.out), out = static_cast<double>(m_d.n * m_d.out);
    if (reduced) note(m_t, "linear weights to the plan's copy", weights * (4 + size_of(m_d.dtype)));
    note(m_t, "cuDNN/cuBLAS calls", 0);
    if (m_d.bias && b != nullptr) {
      if (reduced) note(m_t, "bias add", 2 * out * size_of(m_d.dtype));
      else note(m_t, "cuDNN/cuBLAS calls", 0);
    }
    m_inner->forward(s, x, w, b, y);
  }
  void backward_data(nn::Stream& s, const void* dy, const float* w, void* dx) override {
    if (dx != nullptr) note(m_t, "cuDNN/cuBLAS calls", 0);
    m_inner->backward_data(s, dy, w, dx);
  }
  void backward_weights(nn::Stream& s, const void* x, const void* dy, float* dw, float* db) override {
    note(m_t, "cuDNN/cuBLAS calls", 0);
    if (m_d.bias && db != nullptr) {
      if (m_d.dtype != nn::DType::f32) note(m_t, "bias gradient (2 passes)", static_cast<double>(m_d.n * m_d.out) * size_of(m_d.dtype), 2);
      else note(m_t, "cuDNN/cuBLAS calls", 0);
    }
    m_inner->backward_weights(s, x, dy, dw, db);
  }

 private:
  std::unique_ptr<nn::LinearPlan> m_inner;
  nn::LinearDesc m_d;
  TrafficTable& m_t;
};

// Pooling and batch norm: the library's calls (bf16 pooling's f32 copies included as calls).
class TallyingPoolPlan final : public nn::PoolPlan {
 public:
  TallyingPoolPlan(std::unique_ptr<nn::PoolPlan> inner, TrafficTable& t) : m_inner(std::move(inner)), m_t(t) {}
  void forward(nn::Stream& s, const void* x, void* y, bool train) override {
    ++m_t["cuDNN/cuBLAS calls"].launches;
    m_inner->forward(s, x, y, train);
  }
  void backward(nn::Stream& s, const void* dy, void* dx) override {
    ++m_t["cuDNN/cuBLAS calls"].launches;
    m_inner->backward(s, dy, dx);
  }

 private:
  std::unique_ptr<nn::PoolPlan> m_inner;
  TrafficTable& m_t;
};

class TallyingBatchNormPlan final : public nn::BatchNormPlan {
 public:
  TallyingBatchNormPlan(std::unique_ptr<nn::BatchNormPlan> inner, TrafficTable& t)
      : m_inner(std::move(inner)), m_t(t) {}
  void forward(nn::Stream& s, const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool train) override {
    ++m_t["cuDNN/cuBLAS calls"].launches;
    m_inner->forward(s, x, gamma, beta, running_mean, running_var, y, train);
  }
  void backward(nn::Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                float* dbeta) override {
    ++m_t["cuDNN/cuBLAS calls"].launches;
    m_inner->backward(s, x, dy, gamma, dx, dgamma, dbeta);
  }

 private:
  std::unique_ptr<nn::BatchNormPlan> m_inner;
  TrafficTable& m_t;
};

}  // namespace detail

// What it does not tally (streams, events, the allocations and the calls that move no bytes
// on the CUDA backend either) is the CPU backend's, inherited.
class RecordingBackend final : public cpu::CpuBackend {
  using Cpu = cpu::CpuBackend;

 public:
  // threads: the CPU backend's team size (1 keeps it off cores the other tests use). Its
  // reduced-precision plans are the reference emulation on every CPU: they keep a copy of
  // their weights (the rounded weights, a weight mirror) as the CUDA plans do, where oneDNN's
  // native bf16 plans, on a CPU with bf16 arithmetic, keep none and would record other work.
  explicit RecordingBackend(int threads = 1) : Cpu(threads) { Cpu::set_reference_precision(true); }

  // What the layers asked for since construction (or clear()), in the order they asked.
  const std::vector<nn::ConvDesc>& convs() const { return m_convs; }
  const std::vector<nn::PoolDesc>& pools() const { return m_pools; }
  const std::vector<nn::BatchNormDesc>& batch_norms() const { return m_batch_norms; }
  void clear() {
    m_convs.clear();
    m_pools.clear();
    m_batch_norms.clear();
  }
  // The work tallied since construction (or clear_traffic()), by kind.
  const TrafficTable& traffic() const { return m_traffic; }
  void clear_traffic() { m_traffic.clear(); }

  // ---- the recorded plans ----
  std::unique_ptr<nn::ConvPlan> make_conv(const nn::ConvDesc& d) override {
    m_convs.push_back(d);
    return std::make_unique<detail::TallyingConvPlan>(Cpu::make_conv(d), d, m_traffic);
  }
  std::unique_ptr<nn::PoolPlan> make_pool(const nn::PoolDesc& d) override {
    m_pools.push_back(d);
    return std::make_unique<detail::TallyingPoolPlan>(Cpu::make_pool(d), m_traffic);
  }
  std::unique_ptr<nn::BatchNormPlan> make_batch_norm(const nn::BatchNormDesc& d) override {
    m_batch_norms.push_back(d);
    return std::make_unique<detail::TallyingBatchNormPlan>(Cpu::make_batch_norm(d), m_traffic);
  }
  std::unique_ptr<nn::LinearPlan> make_linear(const nn::LinearDesc& d) override {
    return std::make_unique<detail::TallyingLinearPlan>(Cpu::make_linear(d), d, m_traffic);
  }

  // ---- the tallied calls: the CPU backend's work, counted as the CUDA backend would do it ----
  void copy_bytes_from_host(nn::Stream& s, void* dst, const void* src, size_t bytes) override {
    if (bytes) note(m_traffic, "copies", static_cast<double>(bytes));
    Cpu::copy_bytes_from_host(s, dst, src, bytes);
  }
  void copy_bytes_to_host(nn::Stream& s, void* dst, const void* src, size_t bytes) override {
    if (bytes) note(m_traffic, "copies", static_cast<double>(bytes));
    Cpu::copy_bytes_to_host(s, dst, src, bytes);
  }
  void copy_bytes(nn::Stream& s, void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) note(m_traffic, "copies", 2.0 * static_cast<double>(bytes));
    Cpu::copy_bytes(s, dst, src, bytes);
  }
  void convert(nn::Stream& s, const void* src, nn::DType from, void* dst, nn::DType to, size_t n) override {
    if (n) note(m_traffic, from == to ? "copies" : "convert", static_cast<double>(n) * (detail::size_of(from) + detail::size_of(to)));
    Cpu::convert(s, src, from, dst, to, n);
  }
  void permute_layout(nn::Stream& s, nn::DType t, const void* src, nn::Layout from, void* dst, nn::Layout to,
                      int64_t n, int64_t c, int64_t h, int64_t w) override {
    if (n * c * h * w > 0) note(m_traffic, from == to ? "copies" : "permute", 2.0 * static_cast<double>(n * c * h * w) * detail::size_of(t));
    Cpu::permute_layout(s, t, src, from, dst, to, n, c, h, w);
  }
  void permute_convert(nn::Stream& s, const void* src, nn::DType from, nn::Layout from_layout, void* dst,
                       nn::DType to, nn::Layout to_layout, int64_t n, int64_t c, int64_t h, int64_t w) override {
    if (n * c * h * w > 0) note(m_traffic, "convert and permute", static_cast<double>(n * c * h * w) * (detail::size_of(from) + detail::size_of(to)));
    Cpu::permute_convert(s, src, from, from_layout, dst, to, to_layout, n, c, h, w);
  }

  void fill(nn::Stream& s, float* x, size_t n, float value) override {
    note(m_traffic, "fill", 4.0 * static_cast<double>(n));
    Cpu::fill(s, x, n, value);
  }
  void relu_forward(nn::Stream& s, nn::DType t, const void* x, void* y, size_t n) override {
    note(m_traffic, "relu", 2.0 * static_cast<double>(n) * detail::size_of(t));
    Cpu::relu_forward(s, t, x, y, n);
  }
  void relu_backward(nn::Stream& s, nn::DType t, const void* y, const void* dy, void* dx, size_t n) override {
    note(m_traffic, "relu", 3.0 * static_cast<double>(n) * detail::size_of(t));
    Cpu::relu_backward(s, t, y, dy, dx, n);
  }
  void add(nn::Stream& s, nn::DType t, const void* a, const void* b, void* y, size_t n) override {
    note(m_traffic, "add", 3.0 * static_cast<double>(n) * detail::size_of(t));
    Cpu::add(s, t, a, b, y, n);
  }
  void axpy(nn::Stream& s, float alpha, const float* x, float* y, size_t n) override {
    note(m_traffic, "axpy, scale, axpby", 12.0 * static_cast<double>(n));
    Cpu::axpy(s, alpha, x, y, n);
  }
  void scale(nn::Stream& s, float alpha, float* x, size_t n) override {
    note(m_traffic, "axpy, scale, axpby", 8.0 * static_cast<double>(n));
    Cpu::scale(s, alpha, x, n);
  }
  void axpby(nn::Stream& s, float alpha, const float* x, float beta, float* y, size_t n) override {
    note(m_traffic, "axpy, scale, axpby", 12.0 * static_cast<double>(n));
    Cpu::axpby(s, alpha, x, beta, y, n);
  }
  void dropout_forward(nn::Stream& s, nn::DType t, const void* x, void* y, void* mask, size_t n, float p,
                       uint64_t seed, uint64_t offset) override {
    note(m_traffic, "dropout, multiply", 3.0 * static_cast<double>(n) * detail::size_of(t));
    Cpu::dropout_forward(s, t, x, y, mask, n, p, seed, offset);
  }
  void multiply(nn::Stream& s, nn::DType t, const void* a, const void* b, void* y, size_t n) override {
    note(m_traffic, "dropout, multiply", 3.0 * static_cast<double>(n) * detail::size_of(t));
    Cpu::multiply(s, t, a, b, y, n);
  }
  void copy_strided(nn::Stream& s, nn::DType t, void* dst, int64_t dst_stride, int64_t dst_offset, const void* src,
                    int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) override {
    if (rows > 0 && count > 0) note(m_traffic, "copy_strided (concat)", 2.0 * static_cast<double>(rows * count) * detail::size_of(t));
    Cpu::copy_strided(s, t, dst, dst_stride, dst_offset, src, src_stride, src_offset, rows, count);
  }
  void global_avg_pool_forward(nn::Stream& s, nn::DType t, const void* x, void* y, int64_t nc, int64_t hw) override {
    note(m_traffic, "global average pool", static_cast<double>(nc * hw + nc) * detail::size_of(t));
    Cpu::global_avg_pool_forward(s, t, x, y, nc, hw);
  }
  void global_avg_pool_backward(nn::Stream& s, nn::DType t, const void* dy, void* dx, int64_t nc,
                                int64_t hw) override {
    note(m_traffic, "global average pool", static_cast<double>(nc * hw + nc) * detail::size_of(t));
    Cpu::global_avg_pool_backward(s, t, dy, dx, nc, hw);
  }
  void bilinear_forward(nn::Stream& s, nn::DType t, const void* x, void* y, int64_t nc, int64_t h, int64_t w,
                        int64_t oh, int64_t ow) override {
    note(m_traffic, "bilinear", static_cast<double>(nc * (h * w + oh * ow)) * detail::size_of(t));
    Cpu::bilinear_forward(s, t, x, y, nc, h, w, oh, ow);
  }
  void bilinear_backward(nn::Stream& s, nn::DType t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w,
                         int64_t oh, int64_t ow) override {
    note(m_traffic, "bilinear", static_cast<double>(nc * (h * w + oh * ow)) * detail::size_of(t));
    Cpu::bilinear_backward(s, t, dy, dx, nc, h, w, oh, ow);
  }
  void softmax_cross_entropy(nn::Stream& s, nn::DType t, const void* logits, const int32_t* labels,
                             const float* class_weights, int64_t n, int64_t classes, int64_t hw, void* dlogits,
                             float* loss, const float* grad_scale) override {
    note(m_traffic, "loss (3 passes)", static_cast<double>(n * hw) * (2.0 * static_cast<double>(classes) * detail::size_of(t) + 4.0), 3);
    Cpu::softmax_cross_entropy(s, t, logits, labels, class_weights, n, classes, hw, dlogits, loss, grad_scale);
  }

  void sum_squares(nn::Stream& s, const float* x, size_t n, float* out) override {
    note(m_traffic, "sum of squares (2 passes)", 4.0 * static_cast<double>(n), 2);
    Cpu::sum_squares(s, x, n, out);
  }
  void sgd_update(nn::Stream& s, nn::TensorSet& t, float* velocity, const nn::SgdArgs& a) override {
    note(m_traffic, "optimizer", 20.0 * static_cast<double>(t.total()) + mirror_bytes(t));
    Cpu::sgd_update(s, t, velocity, a);
  }

 private:
  // What the CUDA update writes besides the weights: each mirror in the activations' type.
  static double mirror_bytes(const nn::TensorSet& t) {
    double bytes = 0;
    for (const auto& r : t.tensors())
      if (r.mirror.data != nullptr) bytes += static_cast<double>(r.mirror.count()) * detail::size_of(r.mirror.dtype);
    return bytes;
  }

  TrafficTable m_traffic;
  std::vector<nn::ConvDesc> m_convs;
  std::vector<nn::PoolDesc> m_pools;
  std::vector<nn::BatchNormDesc> m_batch_norms;
};

}  // namespace squall::test
