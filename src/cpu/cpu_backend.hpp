#pragma once
// The CPU backend: the reference implementation of squall::nn::Backend (a Device and its
// Kernels). Heavy kernels come from oneDNN (convolution, inner product, pooling, batch
// normalisation); element-wise work is OpenMP-parallel loops. Every kernel and plan pass runs
// its whole body through its stream (cpu_stream.hpp): inline on the calling thread by
// default, or queued on the stream's worker (run.cpu_streams = async). Its methods are
// defined across src/cpu/*.cpp by concern.
#include <memory>
#include <mutex>
#include <optional>

#include <oneapi/dnnl/dnnl.hpp>

#include "src/cpu/cpu_options.hpp"
#include "src/cpu/cpu_stream.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/size_pool.hpp"

namespace squall::cpu {

using namespace squall::nn;

// Below this many elements a CPU kernel's OpenMP loop runs serially: waking the team costs
// more than the work.
constexpr int64_t k_parallel_min = 16384;

// Test doubles derive from it and add what they observe to the calls they override.
class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads) : CpuBackend(CpuBackendOptions{threads, false, std::nullopt}) {}
  explicit CpuBackend(const CpuBackendOptions& options);
  ~CpuBackend() override;
  dnnl::engine& engine() { return m_engine; }
  static dnnl::stream& dnnl_stream(Stream& s) { return cpu_stream(s).dnnl(); }

  // ---- the device: cpu_backend.cpp ----
  std::string name() const override { return "cpu"; }
  DeviceInfo info() const override;
  // bf16 natively through oneDNN's bf16 primitives (convolutions) where the CPU has bf16
  // arithmetic (cpu_info.hpp, dnn_has_bf16) and set_reference_precision is off; f16, and
  // bf16 elsewhere, the reference (cpu_precision.cpp). The blocked layout is the block
  // oneDNN's convolutions choose on this CPU (nchw8c on AVX2, nchw16c on AVX-512;
  // cpu_conv.cpp asks a probe primitive once), f32 only: reduced-precision plans compute
  // through f32 copies and stay NCHW.
  Capabilities capabilities() const override;
  void bind_calling_thread(int threads) override;
  std::unique_ptr<Stream> create_stream() override;
  std::unique_ptr<Event> create_event() override;
  void record(Event&, Stream&) override;
  void wait(Stream&, Event&) override;
  void synchronize(Stream&) override;
  void synchronize(Event&) override;
  bool ready(Event&) override;
  void synchronize_all() override;
  // Nothing to capture on the CPU (Capabilities::can_capture is false): these throw.
  void begin_capture(Stream&) override;
  std::unique_ptr<Captured> end_capture(Stream&) override;
  void abandon_capture(Stream&) override {}
  void replay(Captured&, Stream&) override;
  Buffer allocate_memory(size_t count, DType dtype) override;
  Buffer allocate_host(size_t count, DType dtype) override;
  void copy_bytes_from_host(Stream&, void* dst, const void* src, size_t bytes) override;
  void copy_bytes_to_host(Stream&, void* dst, const void* src, size_t bytes) override;
  void copy_bytes(Stream&, void* dst, const void* src, size_t bytes) override;

  // ---- the kernels ----
  void set_reference_precision(bool on) override { m_reference_precision = on; }
  // oneDNN plans: cpu_conv.cpp, cpu_linear.cpp, cpu_pool.cpp, cpu_batch_norm.cpp
  std::unique_ptr<ConvPlan> make_conv(const ConvDesc&) override;
  std::unique_ptr<LinearPlan> make_linear(const LinearDesc&) override;
  std::unique_ptr<PoolPlan> make_pool(const PoolDesc&) override;
  std::unique_ptr<BatchNormPlan> make_batch_norm(const BatchNormDesc&) override;
  // cpu_elementwise.cpp, cpu_layout.cpp
  void convert(Stream&, const void* src, DType from, void* dst, DType to, size_t n) override;
  void permute_layout(Stream&, DType t, const void* src, Layout from, void* dst, Layout to, int64_t n, int64_t c,
                      int64_t h, int64_t w) override;
  void permute_convert(Stream&, const void* src, DType from, Layout from_layout, void* dst, DType to,
                       Layout to_layout, int64_t n, int64_t c, int64_t h, int64_t w) override;
  // element-wise, resampling, loss: cpu_elementwise.cpp, cpu_loss.cpp
  void fill(Stream&, float* x, size_t n, float value) override;
  void axpy(Stream&, float alpha, const float* x, float* y, size_t n) override;
  void scale(Stream&, float alpha, float* x, size_t n) override;
  void axpby(Stream&, float alpha, const float* x, float beta, float* y, size_t n) override;
  void accumulate_confusion(Stream&, const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
                            int32_t* confusion) override;
  // The typed calls: f32 runs the loops below directly; bf16/f16 widen their inputs to f32,
  // run the same loops and round the outputs (cpu_precision.cpp).
  void relu_forward(Stream&, DType, const void* x, void* y, size_t n) override;
  void relu_backward(Stream&, DType, const void* y, const void* dy, void* dx, size_t n) override;
  void add(Stream&, DType, const void* a, const void* b, void* y, size_t n) override;
  void dropout_forward(Stream&, DType, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed,
                       uint64_t offset) override;
  void multiply(Stream&, DType, const void* a, const void* b, void* y, size_t n) override;
  void copy_block(Stream&, DType, void* dst, const void* src, const BlockCopy& block, bool accumulate) override;
  void copy_strided(Stream&, DType, void* dst, int64_t dst_stride, int64_t dst_offset, const void* src,
                    int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) override;
  void global_avg_pool_forward(Stream&, DType, const void* x, void* y, int64_t nc, int64_t hw) override;
  void global_avg_pool_backward(Stream&, DType, const void* dy, void* dx, int64_t nc, int64_t hw) override;
  void bilinear_forward(Stream&, DType, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                        int64_t ow) override;
  void bilinear_backward(Stream&, DType, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w, int64_t oh,
                         int64_t ow) override;
  void softmax_cross_entropy(Stream&, DType, const void* logits, const int32_t* labels, const float* class_weights,
                             int64_t n, int64_t classes, int64_t hw, void* dlogits, float* loss,
                             const float* grad_scale) override;
  void argmax_channels(Stream&, DType, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) override;
  // optimizer arithmetic: cpu_optim.cpp (the fused forms loop over the tensors with the
  // single-range ones below)
  void sum_squares(Stream&, const float* x, size_t n, float* out) override;
  std::unique_ptr<TensorSet> make_tensor_set(std::vector<TensorRef> tensors) override;
  void sgd_update(Stream&, TensorSet&, float* velocity, const SgdArgs&) override;
  void adam_update(Stream&, TensorSet&, float* m, float* v, const AdamArgs&) override;
  void larc_scale(Stream&, TensorSet&, const LarcArgs&) override;

  // The single-range updates the fused ones are made of (and tests hold to PyTorch's):
  // SgdArgs' rule on one tensor; the Adam direction on one range: with apply, w is updated
  // (coupled or decoupled decay as `decoupled` says); without, u = m_hat / (sqrt(v_hat) +
  // eps) (+ wd w when decoupled) is written to `update` and w is left alone.
  void sgd_step(Stream&, float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
                float weight_decay, bool nesterov);
  void adam_step(Stream&, float* w, const float* g, float* m, float* v, float* update, size_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step, bool apply);

 private:
  // f32 loops: cpu_elementwise.cpp, cpu_loss.cpp
  void relu_forward_f32(Stream&, const float* x, float* y, size_t n);
  void relu_backward_f32(Stream&, const float* y, const float* dy, float* dx, size_t n);
  void add_f32(Stream&, const float* a, const float* b, float* y, size_t n);
  void dropout_forward_f32(Stream&, const float* x, float* y, float* mask, size_t n, float p, uint64_t seed,
                           uint64_t offset);
  void multiply_f32(Stream&, const float* a, const float* b, float* y, size_t n);
  void copy_strided_f32(Stream&, float* dst, int64_t dst_stride, int64_t dst_offset, const float* src,
                        int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count);
  void global_avg_pool_forward_f32(Stream&, const float* x, float* y, int64_t nc, int64_t hw);
  void global_avg_pool_backward_f32(Stream&, const float* dy, float* dx, int64_t nc, int64_t hw);
  void bilinear_forward_f32(Stream&, const float* x, float* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                            int64_t ow);
  void bilinear_backward_f32(Stream&, const float* dy, float* dx, int64_t nc, int64_t h, int64_t w, int64_t oh,
                             int64_t ow);
  void softmax_cross_entropy_f32(Stream&, const float* logits, const int32_t* labels, const float* class_weights,
                                 int64_t n, int64_t classes, int64_t hw, float* dlogits, float* loss,
                                 const float* grad_scale);
  void argmax_channels_f32(Stream&, const float* x, int32_t* out, int64_t n, int64_t c, int64_t hw);

  // The block the convolutions choose for f32 (cpu_conv.cpp: a probe primitive, once).
  Layout blocked_layout() const;
  // Whether plans of activation type t compute natively (Capabilities::ForType::native).
  bool native_precision(DType t) const;

  int m_threads;
  bool m_async;
  StreamJitter m_jitter;
  dnnl::engine m_engine;
  mutable std::once_flag m_blocked_once;  // blocked_layout: the probe runs once
  bool m_reference_precision = false;     // set_reference_precision
  mutable Layout m_blocked = Layout::nchw;
  std::shared_ptr<SizePool> m_pool;  // shared with every live Buffer's deleter
  // Asynchronous streams only:
  std::shared_ptr<StreamRegistry> m_registry = std::make_shared<StreamRegistry>();
  std::shared_ptr<HostRanges> m_host = std::make_shared<HostRanges>();
  std::mutex m_mutex;
  uint64_t m_streams = 0;  // streams made (each its own jitter seed); guarded by m_mutex
};

// A plan description at f32: the inner plan of a reduced-precision one (cpu_precision.cpp).
template <class Desc>
Desc as_f32(Desc d) {
  d.dtype = DType::f32;
  return d;
}

// n elements converted as CpuBackend::convert converts them, on the calling thread alone
// (cpu_elementwise.cpp): for the operations that convert blocks they gather first.
void convert_elements(const void* src, DType from, void* dst, DType to, int64_t n);

// The bodies of convert, permute_layout and permute_convert, run now by the calling thread's
// team (cpu_elementwise.cpp, cpu_layout.cpp): what the CPU's own composite operations and
// plans call inside their bodies, which already run on their stream.
void convert_now(const void* src, DType from, void* dst, DType to, size_t n);
void permute_layout_now(DType t, const void* src, Layout from, void* dst, Layout to, int64_t n, int64_t c,
                        int64_t h, int64_t w);
void permute_convert_now(const void* src, DType from, Layout from_layout, void* dst, DType to, Layout to_layout,
                         int64_t n, int64_t c, int64_t h, int64_t w);

// Reduced-precision plans (cpu_precision.cpp): the f32 plan `inner` run on widened copies of
// bf16/f16 activations, with the weights rounded to the activation type first and the
// outputs (activations, and weight gradients) rounded to it after, so that the results are
// those of a GPU computing in that type with f32 accumulation, up to summation order.
std::unique_ptr<ConvPlan> make_reduced_conv(CpuBackend&, const ConvDesc&, std::unique_ptr<ConvPlan> inner);
std::unique_ptr<LinearPlan> make_reduced_linear(CpuBackend&, const LinearDesc&, std::unique_ptr<LinearPlan> inner);
std::unique_ptr<PoolPlan> make_reduced_pool(CpuBackend&, const PoolDesc&, std::unique_ptr<PoolPlan> inner);
std::unique_ptr<BatchNormPlan> make_reduced_batch_norm(CpuBackend&, const BatchNormDesc&,
                                                      std::unique_ptr<BatchNormPlan> inner);
// Batch norm on NHWC activations (cpu_layout.cpp): `nchw`, the same description in NCHW, run
// on permuted copies.
std::unique_ptr<BatchNormPlan> make_nhwc_batch_norm(CpuBackend&, const BatchNormDesc&,
                                                   std::unique_ptr<BatchNormPlan> nchw);

// What a convolution plan's forward runs (cpu_conv.cpp), for tests: oneDNN's implementation
// and whether the plan reorders its input or output activation around it (staged: the
// primitive computes in another layout than the tensor's). Empty for a plan that is not an
// f32/bf16 oneDNN plan of this backend.
struct ConvForwardInfo {
  std::string implementation;
  bool stages_x = false, stages_y = false;
};
ConvForwardInfo conv_forward_info(const ConvPlan&);

}  // namespace squall::cpu
