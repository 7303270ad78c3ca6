#pragma once
// run.cpu_streams = async: the CPU backend behind asynchronous streams (cpu_stream.hpp).
// AsyncCpuBackend wraps a CpuBackend: every operation on a stream, plans' passes included,
// is queued whole on the stream's worker, where the wrapped backend runs it inline on the
// stream's own CpuStream. Queuing whole calls, not the calls they make inside, keeps a
// composite operation's temporaries (the widened copies of reduced-precision data, the
// plans' scratch) alive for as long as it runs. make_cpu_backend returns a bare CpuBackend
// for inline streams, so that the inline path is exactly what it was.
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/cpu/cpu_stream.hpp"

namespace squall::cpu {

class HostRanges;      // cpu_async_backend.cpp: what allocate_host handed out
class StreamRegistry;  // cpu_async_backend.cpp: the live streams, for synchronize_all

class AsyncCpuBackend : public Backend {
 public:
  // async false: every call goes straight to `inner` (a test double deriving from this class
  // runs either way, as the environment asks).
  AsyncCpuBackend(std::unique_ptr<CpuBackend> inner, bool async, StreamJitter jitter);
  ~AsyncCpuBackend() override;
  bool is_async() const { return m_async; }
  // The random delay each queued operation gets (max_us 0: none); summary.json reports it.
  const StreamJitter& jitter() const { return m_jitter; }
  // SQUALL_CPU_STREAM_JITTER=<max microseconds>[,seed] (seed 1 when not given).
  static StreamJitter jitter_from_environment();

  std::string name() const override;
  DeviceInfo device() const override;
  Layout blocked_layout_for(DType t) const override;
  bool fuses(DType t) const override;
  bool loss_without_gradient() const override { return m_b->loss_without_gradient(); }
  bool native_precision(DType t) const override;
  void set_reference_precision(bool on) override;
  int threads() const override;
  void bind_calling_thread(int threads) override;

  // ---- streams and events ----
  std::unique_ptr<Stream> create_stream() override;
  std::unique_ptr<Event> create_event() override;
  void record(Event& e, Stream& s) override;
  void wait(Stream& s, Event& e) override;
  void synchronize(Stream& s) override;
  void synchronize(Event& e) override;
  bool ready(Event& e) override;
  void synchronize_all() override;

  // ---- memory and copies ----
  using Backend::allocate;
  Buffer allocate(size_t count, DType dtype) override;
  Buffer allocate_host(size_t count, DType dtype) override;
  void copy_bytes_from_host(Stream& s, void* dst, const void* src, size_t bytes) override;
  void copy_bytes_to_host(Stream& s, void* dst, const void* src, size_t bytes) override;
  void copy_bytes(Stream& s, void* dst, const void* src, size_t bytes) override;
  void convert(Stream& s, const void* src, DType from, void* dst, DType to, size_t n) override;
  void permute_layout(Stream& s, DType t, const void* src, Layout from, void* dst, Layout to, int64_t n, int64_t c,
                      int64_t h, int64_t w) override;
  void permute_convert(Stream& s, const void* src, DType from, Layout from_layout, void* dst, DType to,
                       Layout to_layout, int64_t n, int64_t c, int64_t h, int64_t w) override;

  // ---- plans ----
  std::unique_ptr<ConvPlan> make_conv(const ConvDesc& d) override;
  std::unique_ptr<LinearPlan> make_linear(const LinearDesc& d) override;
  std::unique_ptr<PoolPlan> make_pool(const PoolDesc& d) override;
  std::unique_ptr<BatchNormPlan> make_batch_norm(const BatchNormDesc& d) override;

  // ---- element-wise ----
  using Backend::relu_forward;
  using Backend::relu_backward;
  using Backend::add;
  using Backend::dropout_forward;
  using Backend::multiply;
  using Backend::copy_strided;
  using Backend::global_avg_pool_forward;
  using Backend::global_avg_pool_backward;
  using Backend::bilinear_forward;
  using Backend::bilinear_backward;
  using Backend::softmax_cross_entropy;
  using Backend::argmax_channels;
  void fill(Stream& s, float* x, size_t n, float value) override;
  void relu_forward(Stream& s, DType t, const void* x, void* y, size_t n) override;
  void relu_backward(Stream& s, DType t, const void* y, const void* dy, void* dx, size_t n) override;
  void add(Stream& s, DType t, const void* a, const void* b, void* y, size_t n) override;
  void axpy(Stream& s, float alpha, const float* x, float* y, size_t n) override;
  void scale(Stream& s, float alpha, float* x, size_t n) override;
  void axpby(Stream& s, float alpha, const float* x, float beta, float* y, size_t n) override;
  void dropout_forward(Stream& s, DType t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed,
                       uint64_t offset) override;
  void multiply(Stream& s, DType t, const void* a, const void* b, void* y, size_t n) override;
  void copy_strided(Stream& s, DType t, void* dst, int64_t dst_stride, int64_t dst_offset, const void* src,
                    int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) override;
  void global_avg_pool_forward(Stream& s, DType t, const void* x, void* y, int64_t nc, int64_t hw) override;
  void global_avg_pool_backward(Stream& s, DType t, const void* dy, void* dx, int64_t nc, int64_t hw) override;
  void bilinear_forward(Stream& s, DType t, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                        int64_t ow) override;
  void bilinear_backward(Stream& s, DType t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w, int64_t oh,
                         int64_t ow) override;
  void softmax_cross_entropy(Stream& s, DType t, const void* logits, const int32_t* labels, const float* weights,
                             int64_t n, int64_t classes, int64_t hw, void* dlogits, float* loss,
                             const float* grad_scale) override;
  void argmax_channels(Stream& s, DType t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) override;
  void accumulate_confusion(Stream& s, const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
                            int32_t* confusion) override;

  // ---- optimizer arithmetic ----
  void sgd_step(Stream& s, float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
                float weight_decay, bool nesterov) override;
  void adam_step(Stream& s, float* w, const float* g, float* m, float* v, float* update, size_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step,
                 bool apply) override;
  void sum_squares(Stream& s, const float* x, size_t n, float* out) override;
  std::unique_ptr<TensorSet> make_tensor_set(std::vector<TensorRef> tensors) override;
  void sgd_update(Stream& s, TensorSet& set, float* velocity, const SgdArgs& a) override;
  void adam_update(Stream& s, TensorSet& set, float* m, float* v, const AdamArgs& a) override;
  void larc_scale(Stream& s, TensorSet& set, const LarcArgs& a) override;

 private:
  // Runs op(stream the inner backend knows) on s: queued on s's worker when async (the one
  // way every operation is made asynchronous), at once otherwise (no allocation, no hop).
  template <class Op>
  void run_on(Stream& s, Op op) {
    if (!m_async) return op(s);
    queue(s, std::function<void(Stream&)>(std::move(op)));
  }
  void queue(Stream& s, std::function<void(Stream&)> op);

  std::unique_ptr<CpuBackend> m_b;
  bool m_async;
  StreamJitter m_jitter;
  std::mutex m_mutex;
  uint64_t m_streams = 0;  // guarded by m_mutex
  std::shared_ptr<HostRanges> m_host;
  std::shared_ptr<StreamRegistry> m_registry;
};

}  // namespace squall::cpu
