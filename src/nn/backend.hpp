#pragma once
// The Backend interface: memory, streams and the operations layers are built from.
//
// Execution model (what lets the CUDA backend fit without change):
//  - every call takes the Stream it runs on; a learner owns one stream. Calls on one stream
//    run in order; the CPU backend runs them synchronously on the calling thread (with its
//    own thread pool inside), the CUDA backend enqueues them and returns at once;
//  - pointers are backend memory (device memory for CUDA); the host only touches it through
//    copy_from_host / copy_to_host / synchronize: no host round-trips on the hot path;
//  - heavy operations are "plans" made once for a shape (oneDNN primitives, cuDNN
//    descriptors and algorithm choice, workspace) and then run every step.
//
// Gradient convention: backward calls OVERWRITE their outputs (dx, dw, db); summing the
// gradients of a tensor used twice (a residual branch) is the graph's job.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "src/nn/tensor.hpp"

namespace squall::nn {

class Stream {
 public:
  virtual ~Stream() = default;
};

// An owning allocation of backend memory, returned to the backend's pool when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(float* data, size_t count, std::shared_ptr<void> owner)
      : m_data(data), m_count(count), m_owner(std::move(owner)) {}
  float* data() const { return m_data; }
  size_t count() const { return m_count; }  // floats
  Tensor view(const Shape& s, size_t offset = 0) const { return Tensor{m_data + offset, s}; }

 private:
  float* m_data = nullptr;
  size_t m_count = 0;
  std::shared_ptr<void> m_owner;
};

// ---- operation descriptions ---------------------------------------------------------------

struct ConvDesc {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input
  int64_t k = 1;                        // output channels
  int64_t r = 1, s = 1;                 // kernel height, width
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  bool bias = true;
  bool transposed = false;              // transposed convolution (weights [c, k, r, s])
  int64_t out_pad_h = 0, out_pad_w = 0; // transposed only: extra rows/cols at the end
  Shape output() const;                 // [n, k, p, q]
  Shape weight() const;                 // [k, c, r, s], or [c, k, r, s] when transposed
};

class ConvPlan {
 public:
  virtual ~ConvPlan() = default;
  virtual void forward(Stream&, const float* x, const float* w, const float* b, float* y) = 0;
  virtual void backward_data(Stream&, const float* dy, const float* w, float* dx) = 0;
  virtual void backward_weights(Stream&, const float* x, const float* dy, float* dw, float* db) = 0;
};

// y[n, out] = x[n, in] · w[out, in]^T + b[out]
struct LinearDesc {
  int64_t n = 1, in = 1, out = 1;
  bool bias = true;
};

class LinearPlan {
 public:
  virtual ~LinearPlan() = default;
  virtual void forward(Stream&, const float* x, const float* w, const float* b, float* y) = 0;
  virtual void backward_data(Stream&, const float* dy, const float* w, float* dx) = 0;
  virtual void backward_weights(Stream&, const float* x, const float* dy, float* dw, float* db) = 0;
};

enum class PoolKind { max, average };  // average excludes padding from the count

struct PoolDesc {
  int64_t n = 1, c = 1, h = 1, w = 1;
  int64_t r = 2, s = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  PoolKind kind = PoolKind::max;
  Shape output() const;
};

class PoolPlan {
 public:
  virtual ~PoolPlan() = default;
  // train: keep what backward needs (the argmax for max pooling) in the plan's workspace.
  virtual void forward(Stream&, const float* x, float* y, bool train) = 0;
  virtual void backward(Stream&, const float* dy, float* dx) = 0;
};

struct BatchNormDesc {
  int64_t n = 1, c = 1, h = 1, w = 1;
  float eps = 1e-5f;
  float momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch (PyTorch's)
};

class BatchNormPlan {
 public:
  virtual ~BatchNormPlan() = default;
  // train: normalise with batch statistics, keep them for backward, update running stats
  // (unbiased variance, as PyTorch). eval: normalise with the running statistics.
  virtual void forward(Stream&, const float* x, const float* gamma, const float* beta,
                       float* running_mean, float* running_var, float* y, bool train) = 0;
  virtual void backward(Stream&, const float* x, const float* dy, const float* gamma,
                        float* dx, float* dgamma, float* dbeta) = 0;
};

// ---- the backend -------------------------------------------------------------------------

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"

  virtual std::unique_ptr<Stream> create_stream() = 0;
  // Compute threads this backend may use in all (CPU: its OpenMP team size).
  virtual int threads() const { return 1; }
  // Binds the calling thread to `threads` compute threads (CPU: sets its own OpenMP team
  // size, so that several learners on their own threads share the cores instead of each
  // taking all of them). Call on the thread before it builds plans. No-op where streams
  // carry the parallelism (CUDA).
  virtual void bind_calling_thread(int threads) { (void)threads; }
  virtual void synchronize(Stream&) = 0;
  virtual Buffer allocate(size_t count) = 0;  // floats, 64-byte aligned, uninitialised
  virtual void copy_from_host(Stream&, float* dst, const float* src, size_t count) = 0;
  virtual void copy_to_host(Stream&, float* dst, const float* src, size_t count) = 0;
  virtual void copy(Stream&, float* dst, const float* src, size_t count) = 0;

  virtual std::unique_ptr<ConvPlan> make_conv(const ConvDesc&) = 0;
  virtual std::unique_ptr<LinearPlan> make_linear(const LinearDesc&) = 0;
  virtual std::unique_ptr<PoolPlan> make_pool(const PoolDesc&) = 0;
  virtual std::unique_ptr<BatchNormPlan> make_batch_norm(const BatchNormDesc&) = 0;

  // Element-wise and data-movement operations; n = element count.
  virtual void fill(Stream&, float* x, size_t n, float value) = 0;
  virtual void relu_forward(Stream&, const float* x, float* y, size_t n) = 0;
  virtual void relu_backward(Stream&, const float* y, const float* dy, float* dx, size_t n) = 0;
  virtual void add(Stream&, const float* a, const float* b, float* y, size_t n) = 0;      // y = a + b
  virtual void axpy(Stream&, float alpha, const float* x, float* y, size_t n) = 0;        // y += alpha x
  virtual void scale(Stream&, float alpha, float* x, size_t n) = 0;                       // x *= alpha
  // Dropout: mask[i] = (u_i >= p) / (1 - p) from a counter-based RNG (seed, offset + i),
  // y = x * mask. Backward: dx = dy * mask.
  virtual void dropout_forward(Stream&, const float* x, float* y, float* mask, size_t n, float p,
                               uint64_t seed, uint64_t offset) = 0;
  virtual void multiply(Stream&, const float* a, const float* b, float* y, size_t n) = 0;  // y = a * b
  // Copies per sample: dst[i, dst_offset + j] = src[i, j] for j < count, i < rows.
  virtual void copy_strided(Stream&, float* dst, int64_t dst_stride, int64_t dst_offset,
                            const float* src, int64_t src_stride, int64_t src_offset, int64_t rows,
                            int64_t count) = 0;
  // Global average pooling [n, c, h, w] -> [n, c], and its backward.
  virtual void global_avg_pool_forward(Stream&, const float* x, float* y, int64_t nc, int64_t hw) = 0;
  virtual void global_avg_pool_backward(Stream&, const float* dy, float* dx, int64_t nc, int64_t hw) = 0;
  // Bilinear resize [n, c, h, w] -> [n, c, oh, ow], align_corners = false (PyTorch default).
  virtual void bilinear_forward(Stream&, const float* x, float* y, int64_t nc, int64_t h, int64_t w,
                                int64_t oh, int64_t ow) = 0;
  virtual void bilinear_backward(Stream&, const float* dy, float* dx, int64_t nc, int64_t h, int64_t w,
                                 int64_t oh, int64_t ow) = 0;
  // Softmax cross-entropy over the channel axis, per sample and per pixel (hw = 1 for
  // classification). labels: int32 class per (sample, pixel); a label < 0 is ignored.
  // weights: per-class weights or nullptr. Writes dlogits (already divided by the weight
  // sum, i.e. the gradient of the mean loss) and returns the mean loss on the host through
  // *loss after synchronize (the CUDA backend writes it to pinned memory).
  virtual void softmax_cross_entropy(Stream&, const float* logits, const int32_t* labels,
                                     const float* class_weights, int64_t n, int64_t classes,
                                     int64_t hw, float* dlogits, float* loss) = 0;
  // Per sample/pixel argmax over channels into int32 predictions.
  virtual void argmax_channels(Stream&, const float* x, int32_t* out, int64_t n, int64_t c, int64_t hw) = 0;
  // ---- optimizer arithmetic on flat parameter ranges (see src/nn/optim/) ----
  // SGD (PyTorch semantics): g' = g + wd w; v = momentum v + g'; step = nesterov ? g' +
  // momentum v : v; w -= lr step. velocity must start at zero.
  virtual void sgd_step(Stream&, float* w, const float* g, float* velocity, size_t n, float lr,
                        float momentum, float weight_decay, bool nesterov) = 0;
  // Adam direction (PyTorch semantics, bias-corrected with `step` >= 1): m, v updated in
  // place; u = m_hat / (sqrt(v_hat) + eps), plus wd w when decoupled (AdamW, LAMB). With
  // apply: w -= lr (u + (decoupled ? 0 : 0)) and, when decoupled, w -= lr wd w; without
  // apply: u is written to `update` and w is left alone (LAMB scales it by a trust ratio).
  // Coupled decay (plain Adam) adds wd w to g before the moments.
  virtual void adam_step(Stream&, float* w, const float* g, float* m, float* v, float* update,
                         size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                         bool decoupled, int64_t step, bool apply) = 0;
  // Sum of squares, returned to the host (synchronises the stream on a device backend).
  virtual double sum_squares(Stream&, const float* x, size_t n) = 0;

  virtual int32_t* allocate_labels(size_t count, Buffer& owner) = 0;  // int32 backend memory
  virtual void copy_labels_from_host(Stream&, int32_t* dst, const int32_t* src, size_t count) = 0;
  virtual void copy_labels_to_host(Stream&, int32_t* dst, const int32_t* src, size_t count) = 0;
};

// The CPU backend (the reference). threads: 0 = every core this process may use.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

}  // namespace squall::nn
