#pragma once
// The Kernels interface: the operations that run on a Device (device.hpp), each on the
// Stream it is given: the plans made once for a shape (convolution, linear, pooling, batch
// norm), element-wise and data-movement operations, the loss and metric kernels, and the
// fused optimizer updates. Their f32 forms are free functions below the class, so that no
// backend repeats them (docs/design.md, "Backends").
//
// Heavy operations are "plans" made once for a shape (oneDNN primitives, cuDNN descriptors
// and algorithm choice, workspace) and then run every step.
//
// Gradient convention: backward calls OVERWRITE their outputs (dx, dw, db); summing the
// gradients of a tensor used twice (a residual branch) is the graph's job.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/core/error.hpp"
#include "src/nn/device.hpp"
#include "src/nn/tensor.hpp"

namespace squall::nn {

class TileComm;  // src/nn/spatial.hpp

// Precision (docs/design.md, "Precision"): parameters, gradients and optimizer state are
// f32 everywhere. Activations and their gradients are of one DType per model, the `dtype`
// of the plan descriptions and of the element-wise calls below: f32, or bf16/f16 for mixed
// precision. Plans take f32 parameters and convert them to the activation type themselves
// (weights in forward, weight gradients back to f32 in backward), and every operation on
// reduced-precision data computes and accumulates in f32.

// ---- operation descriptions ---------------------------------------------------------------

// A plan's own copy of a parameter tensor, in the form it computes with (docs/design.md,
// "Weight mirrors"): the tensor's f32 values rounded to `dtype`, stored as `dtype`, or as f32
// when `widened` (the CPU reference's rounded copy); a filter [k, c, r, s] in [k, r, s, c]
// order when `nhwc` (k, c and rs = r * s name the permutation), else in the tensor's order.
// The fused updates write it with the weights when a TensorRef carries it.
struct WeightMirror {
  void* data = nullptr;  // null: the tensor has none
  DType dtype = DType::f32;
  bool widened = false;
  bool nhwc = false;
  int64_t k = 0, c = 0, rs = 0;
  size_t count() const { return static_cast<size_t>(k * c * rs); }
  size_t bytes() const { return count() * (widened ? sizeof(float) : dtype_size(dtype)); }
};

struct ConvDesc {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input
  int64_t k = 1;                        // output channels
  int64_t r = 1, s = 1;                 // kernel height, width
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  bool bias = true;
  bool transposed = false;              // transposed convolution (weights [c, k, r, s])
  int64_t out_pad_h = 0, out_pad_w = 0; // transposed only: extra rows/cols at the end
  DType dtype = DType::f32;             // x, y, dx, dy (w, b, dw, db are f32)
  Layout layout = Layout::nchw;         // x, dx (w and dw are [k, c, r, s] always)
  // y, dy: the input's layout unless set (a blocked graph keeps a tensor whose channels do not
  // fill whole blocks in NCHW, so a convolution may read one layout and write another).
  std::optional<Layout> out_layout;
  Layout y_layout() const { return out_layout.value_or(layout); }
  bool backward = true;                 // false: forward only (a backend may then make no backward plan)
  // Where Capabilities::fuses: what the output goes through before it is written
  // (docs/design.md, "Inference"): forward only, a batch norm in eval mode folded into the
  // weights and bias (ConvPlan::bind_batch_norm names its tensors); then a ReLU, in training
  // plans too (the caller masks dy by y > 0 before their backward).
  bool fold_batch_norm = false;
  float bn_eps = 1e-5f;
  bool relu = false;
  Shape output() const;                 // [n, k, p, q]
  Shape weight() const;                 // [k, c, r, s], or [c, k, r, s] when transposed
};

// A plan with weights and a bias: a convolution or a linear layer. Three passes.
class WeightedPlan {
 public:
  virtual ~WeightedPlan() = default;
  virtual void forward(Stream&, const void* x, const float* w, const float* b, void* y) = 0;
  // Uses the reduced-precision copy of w that forward made (w must not change in between).
  virtual void backward_data(Stream&, const void* dy, const float* w, void* dx) = 0;
  virtual void backward_weights(Stream&, const void* x, const void* dy, float* dw, float* db) = 0;
};

class ConvPlan : public WeightedPlan {
 public:
  // The copy of w the plan computes with when it keeps one (the reduced-precision or NHWC
  // filter; none when it computes with w as given), for the fused updates to keep current.
  virtual WeightMirror weight_mirror() const { return {}; }
  // forward, when the caller vouches that weight_mirror() holds w's current values (an
  // update wrote it and nothing has written w since): the weights are not copied again. The
  // CUDA plan copies anyway while its stream is being captured, since a replay cannot know.
  virtual void forward_mirrored(Stream& s, const void* x, const float* w, const float* b, void* y) {
    forward(s, x, w, b, y);
  }
  // forward, when the caller vouches that w, b and the bound batch norm's tensors hold what
  // they held at the last forward_unchanged with the same `version` (RunMode::weights_version):
  // a plan may reuse the weights it derived from them then. The default derives them again.
  virtual void forward_unchanged(Stream& s, const void* x, const float* w, const float* b, void* y,
                                 uint64_t version) {
    (void)version;
    forward(s, x, w, b, y);
  }
  // ConvDesc::fold_batch_norm: the batch norm's scale, shift and running statistics ([k]
  // each), read at every forward (they change between evaluations), and never written.
  virtual void bind_batch_norm(const float* gamma, const float* beta, const float* mean, const float* var) {
    (void)gamma, (void)beta, (void)mean, (void)var;
    throw Error("conv: this plan folds no batch norm");
  }
};

// y[n, out] = x[n, in] · w[out, in]^T + b[out]
struct LinearDesc {
  int64_t n = 1, in = 1, out = 1;
  bool bias = true;
  DType dtype = DType::f32;  // x, y, dx, dy
};

using LinearPlan = WeightedPlan;

// A block of elements [outer][rows][count], the last dimension contiguous, at strides (in
// elements) of its own in source and destination: element (o, r, j) is
// src[src_offset + o * src_outer + r * src_row + j], and the same in dst with dst_*.
struct BlockCopy {
  int64_t outer = 1, rows = 1, count = 0;
  int64_t src_offset = 0, src_outer = 0, src_row = 0;
  int64_t dst_offset = 0, dst_outer = 0, dst_row = 0;
  int64_t elements() const { return outer * rows * count; }
};

enum class PoolKind { max, average };  // average excludes padding from the count

struct PoolDesc {
  int64_t n = 1, c = 1, h = 1, w = 1;
  int64_t r = 2, s = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  PoolKind kind = PoolKind::max;
  DType dtype = DType::f32;  // x, y, dx, dy
  Layout layout = Layout::nchw;
  Shape output() const;
};

class PoolPlan {
 public:
  virtual ~PoolPlan() = default;
  // train: keep what backward needs (the argmax for max pooling) in the plan's workspace.
  virtual void forward(Stream&, const void* x, void* y, bool train) = 0;
  virtual void backward(Stream&, const void* dy, void* dx) = 0;
};

struct BatchNormDesc {
  int64_t n = 1, c = 1, h = 1, w = 1;
  float eps = 1e-5f;
  float momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch (PyTorch's)
  DType dtype = DType::f32;  // x, y, dx, dy (gamma, beta, running statistics are f32)
  Layout layout = Layout::nchw;
  // y = max(normalised x, 0), and backward takes the ReLU's output gradient as dy, keeping only
  // where the normalised x was positive (recomputed from x, as forward computed it).
  bool relu = false;
  // A sample split across ranks (src/nn/spatial.hpp): the tensor is this rank's tile, and the
  // statistics are the whole group's: training's forward merges the ranks' per-channel counts,
  // means and squared deviations (TileComm::merge_moments), backward sums the two per-channel
  // sums its dx needs (TileComm::sum), each on the thread that runs the pass. Null: not split.
  TileComm* group = nullptr;
};

class BatchNormPlan {
 public:
  virtual ~BatchNormPlan() = default;
  // train: normalise with batch statistics, keep them for backward, update running stats
  // (unbiased variance, as PyTorch). eval: normalise with the running statistics.
  virtual void forward(Stream&, const void* x, const float* gamma, const float* beta,
                       float* running_mean, float* running_var, void* y, bool train) = 0;
  virtual void backward(Stream&, const void* x, const void* dy, const float* gamma,
                        void* dx, float* dgamma, float* dbeta) = 0;
};

// ---- fused multi-tensor updates -----------------------------------------------------------

// One parameter tensor of a fused update: its weights and gradient (backend memory), its
// size, and whether weight decay applies to it. A TensorSet's optimizer state buffers
// (momentum, moments) hold every tensor back to back in this order. sgd_update and
// adam_update also write `mirror` (when it has data) from the new weights, in the same pass.
struct TensorRef {
  float* w = nullptr;
  float* g = nullptr;
  size_t n = 0;
  bool decay = true;
  WeightMirror mirror{};
};

// Throws squall::Error naming `who` when t's mirror (if any) cannot be t's copy: not k * c * rs
// = n elements, or not of a float type (src/nn/weight_mirror.cpp).
void check_weight_mirror(const TensorRef& t, const char* who);

// A list of tensors prepared once for fused updates (on CUDA: the table uploaded to device
// memory, and the per-tensor norm and scratch space), so that one launch updates them all.
class TensorSet {
 public:
  virtual ~TensorSet() = default;
  virtual const std::vector<TensorRef>& tensors() const = 0;
  size_t total() const {
    size_t t = 0;
    for (const auto& r : tensors()) t += r.n;
    return t;
  }
};

// SGD (PyTorch semantics): g' = g + wd w; v = momentum v + g'; step = nesterov ? g' +
// momentum v : v; w -= lr step. Velocity must start at zero.
struct SgdArgs {
  float lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
};

// Adam family (PyTorch semantics, bias-corrected with `step` >= 1). adam: coupled decay
// (wd w added to g before the moments); adamw: decoupled (w -= lr wd w); lamb: AdamW's
// direction u = m_hat / (sqrt(v_hat) + eps) + wd w scaled per tensor by the trust ratio
// ||w|| / ||u|| (1 when either is 0), norms computed on the device.
struct AdamArgs {
  enum class Kind { adam, adamw, lamb } kind = Kind::adam;
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  int64_t step = 1;
};

// LARC (apex semantics), applied to the gradients before the inner optimizer: per tensor,
// g += wd w, then g *= factor with local = eta ||w|| / (||g|| + wd ||w||) (norms of the
// gradient before the decay is added), factor = clip ? min(local / lr, 1) : local, and 1
// when either norm is 0. Norms stay on the device.
struct LarcArgs {
  float lr = 0, eta = 0.001f, weight_decay = 0;
  bool clip = false;
};

// ---- the kernels ------------------------------------------------------------------------

class Kernels {
 public:
  virtual ~Kernels() = default;

  // Plans made after this call at reduced precision are the reference emulation even where
  // the hardware has the type (train.cpu_precision = reference; Capabilities::ForType::native
  // says which); a no-op where there is none.
  virtual void set_reference_precision(bool on) = 0;

  // ---- plans ----
  virtual std::unique_ptr<ConvPlan> make_conv(const ConvDesc&) = 0;
  virtual std::unique_ptr<LinearPlan> make_linear(const LinearDesc&) = 0;
  virtual std::unique_ptr<PoolPlan> make_pool(const PoolDesc&) = 0;
  virtual std::unique_ptr<BatchNormPlan> make_batch_norm(const BatchNormDesc&) = 0;

  // ---- types and layouts ----
  // Element type conversion (f32 <-> bf16 / f16, round to nearest even); n elements.
  virtual void convert(Stream&, const void* src, DType from, void* dst, DType to, size_t n) = 0;
  // A 4-D tensor [n, c, h, w] of type t copied from one memory order to the other (a plain
  // copy when from == to); src and dst must not overlap.
  virtual void permute_layout(Stream&, DType t, const void* src, Layout from, void* dst, Layout to, int64_t n,
                              int64_t c, int64_t h, int64_t w) = 0;
  // Both in one pass: [n, c, h, w] of type `from` in memory order `from_layout` to type `to`
  // in `to_layout` (the f32 NCHW batch into bf16 NHWC activations), each element converted as
  // convert does; src and dst must not overlap.
  virtual void permute_convert(Stream&, const void* src, DType from, Layout from_layout, void* dst, DType to,
                               Layout to_layout, int64_t n, int64_t c, int64_t h, int64_t w) = 0;

  // ---- element-wise and data movement; n = element count ----
  // The calls that take a DType work on activations of that type (f32, bf16 or f16); the
  // others on f32 only. The f32 forms of the typed calls are the free functions below.
  virtual void fill(Stream&, float* x, size_t n, float value) = 0;
  virtual void relu_forward(Stream&, DType, const void* x, void* y, size_t n) = 0;
  virtual void relu_backward(Stream&, DType, const void* y, const void* dy, void* dx, size_t n) = 0;
  virtual void add(Stream&, DType, const void* a, const void* b, void* y, size_t n) = 0;  // y = a + b
  virtual void axpy(Stream&, float alpha, const float* x, float* y, size_t n) = 0;        // y += alpha x
  virtual void scale(Stream&, float alpha, float* x, size_t n) = 0;                       // x *= alpha
  // y = alpha x + beta y (the averaging steps: one pass instead of a scale and an axpy).
  virtual void axpby(Stream&, float alpha, const float* x, float beta, float* y, size_t n) = 0;
  // Dropout: mask[i] = (u_i >= p) / (1 - p) from a counter-based RNG (seed, offset + i),
  // y = x * mask (x, y and mask of the DType). Backward: dx = dy * mask. u_i = top 24 bits
  // of mix64(mix64(seed) + offset + i) / 2^24 (mix64: splitmix64's finaliser), the same on
  // every backend.
  virtual void dropout_forward(Stream&, DType, const void* x, void* y, void* mask, size_t n, float p,
                               uint64_t seed, uint64_t offset) = 0;
  virtual void multiply(Stream&, DType, const void* a, const void* b, void* y, size_t n) = 0;  // y = a * b
  // Copies per sample: dst[i, dst_offset + j] = src[i, src_offset + j] for j < count, i < rows
  // (strides, offsets and count in elements).
  virtual void copy_strided(Stream&, DType, void* dst, int64_t dst_stride, int64_t dst_offset,
                            const void* src, int64_t src_stride, int64_t src_offset, int64_t rows,
                            int64_t count) = 0;
  // A block of elements copied, or added (accumulate: dst += src, in f32 for bf16/f16), between
  // two tensors of the type: the halos of a split sample (src/nn/layers/halo.hpp) packed,
  // unpacked and their gradients returned.
  virtual void copy_block(Stream&, DType, void* dst, const void* src, const BlockCopy& block, bool accumulate) = 0;
  // Global average pooling [n, c, h, w] -> [n, c], and its backward.
  virtual void global_avg_pool_forward(Stream&, DType, const void* x, void* y, int64_t nc, int64_t hw) = 0;
  virtual void global_avg_pool_backward(Stream&, DType, const void* dy, void* dx, int64_t nc, int64_t hw) = 0;
  // Bilinear resize [n, c, h, w] -> [n, c, oh, ow], align_corners = false (PyTorch default).
  virtual void bilinear_forward(Stream&, DType, const void* x, void* y, int64_t nc, int64_t h, int64_t w,
                                int64_t oh, int64_t ow) = 0;
  virtual void bilinear_backward(Stream&, DType, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w,
                                 int64_t oh, int64_t ow) = 0;

  // ---- loss and metrics ----
  // Softmax cross-entropy over the channel axis, per sample and per pixel (hw = 1 for
  // classification), computed in f32 from logits of the DType. labels: int32 class per
  // (sample, pixel); a label < 0 is ignored. weights: per-class weights or nullptr. Writes
  // dlogits (of the DType: the gradient of the mean loss, times *grad_scale when grad_scale
  // is not null, the loss scale of fp16 training, read from device memory so that a
  // captured pass sees its current value) and the mean loss (unscaled) to loss[0], device
  // memory: it stays on the device until read. A label >= classes is an error: the CPU
  // backend throws squall::Error naming it; the CUDA backend writes NaN to the loss.
  // Where Capabilities::loss_without_gradient, dlogits may be null: the loss alone, the same value.
  virtual void softmax_cross_entropy(Stream&, DType, const void* logits, const int32_t* labels,
                                     const float* class_weights, int64_t n, int64_t classes,
                                     int64_t hw, void* dlogits, float* loss, const float* grad_scale) = 0;
  // Per sample/pixel argmax over channels into int32 predictions.
  virtual void argmax_channels(Stream&, DType, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) = 0;
  // confusion[label * classes + pred] += 1 for each of n (label, pred) pairs with
  // 0 <= label < classes (others are ignored); confusion is int32 device memory.
  virtual void accumulate_confusion(Stream&, const int32_t* labels, const int32_t* pred, size_t n,
                                    int64_t classes, int32_t* confusion) = 0;

  // ---- optimizer arithmetic ----
  // out[0] = sum of x[i]^2 (accumulated in double), device memory.
  virtual void sum_squares(Stream&, const float* x, size_t n, float* out) = 0;
  // Fused updates: one launch (or two, where a norm must be complete first) for all tensors.
  virtual std::unique_ptr<TensorSet> make_tensor_set(std::vector<TensorRef> tensors) = 0;
  virtual void sgd_update(Stream&, TensorSet&, float* velocity, const SgdArgs&) = 0;
  virtual void adam_update(Stream&, TensorSet&, float* m, float* v, const AdamArgs&) = 0;
  virtual void larc_scale(Stream&, TensorSet&, const LarcArgs&) = 0;
};

// ---- f32 forms of the typed calls ---------------------------------------------------------

inline void relu_forward(Kernels& k, Stream& s, const float* x, float* y, size_t n) {
  k.relu_forward(s, DType::f32, x, y, n);
}
inline void relu_backward(Kernels& k, Stream& s, const float* y, const float* dy, float* dx, size_t n) {
  k.relu_backward(s, DType::f32, y, dy, dx, n);
}
inline void add(Kernels& k, Stream& s, const float* a, const float* b, float* y, size_t n) {
  k.add(s, DType::f32, a, b, y, n);
}
inline void dropout_forward(Kernels& k, Stream& s, const float* x, float* y, float* mask, size_t n, float p,
                            uint64_t seed, uint64_t offset) {
  k.dropout_forward(s, DType::f32, x, y, mask, n, p, seed, offset);
}
inline void multiply(Kernels& k, Stream& s, const float* a, const float* b, float* y, size_t n) {
  k.multiply(s, DType::f32, a, b, y, n);
}
inline void copy_strided(Kernels& k, Stream& s, float* dst, int64_t dst_stride, int64_t dst_offset, const float* src,
                         int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  k.copy_strided(s, DType::f32, dst, dst_stride, dst_offset, src, src_stride, src_offset, rows, count);
}
inline void global_avg_pool_forward(Kernels& k, Stream& s, const float* x, float* y, int64_t nc, int64_t hw) {
  k.global_avg_pool_forward(s, DType::f32, x, y, nc, hw);
}
inline void global_avg_pool_backward(Kernels& k, Stream& s, const float* dy, float* dx, int64_t nc, int64_t hw) {
  k.global_avg_pool_backward(s, DType::f32, dy, dx, nc, hw);
}
inline void bilinear_forward(Kernels& k, Stream& s, const float* x, float* y, int64_t nc, int64_t h, int64_t w,
                             int64_t oh, int64_t ow) {
  k.bilinear_forward(s, DType::f32, x, y, nc, h, w, oh, ow);
}
inline void bilinear_backward(Kernels& k, Stream& s, const float* dy, float* dx, int64_t nc, int64_t h, int64_t w,
                              int64_t oh, int64_t ow) {
  k.bilinear_backward(s, DType::f32, dy, dx, nc, h, w, oh, ow);
}
inline void softmax_cross_entropy(Kernels& k, Stream& s, const float* logits, const int32_t* labels,
                                  const float* class_weights, int64_t n, int64_t classes, int64_t hw, float* dlogits,
                                  float* loss) {
  k.softmax_cross_entropy(s, DType::f32, logits, labels, class_weights, n, classes, hw, dlogits, loss, nullptr);
}
inline void argmax_channels(Kernels& k, Stream& s, const float* x, int32_t* out, int64_t n, int64_t c, int64_t hw) {
  k.argmax_channels(s, DType::f32, x, out, n, c, hw);
}

}  // namespace squall::nn
