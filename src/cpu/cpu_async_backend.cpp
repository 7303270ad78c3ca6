// run.cpu_streams = async (cpu_async_backend.hpp): the asynchronous streams' events, the host
// ranges whose copies may be asynchronous, and every operation queued through run_on.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "src/core/error.hpp"
#include "src/cpu/cpu_async_backend.hpp"

namespace squall::cpu {

// The host ranges allocate_host handed out: copies to and from them are asynchronous, copies
// to and from any other host memory complete before the call returns (Backend's contract).
class HostRanges {
 public:
  void add(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_ranges[reinterpret_cast<uintptr_t>(p)] = bytes;
  }
  void remove(const void* p) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_ranges.erase(reinterpret_cast<uintptr_t>(p));
  }
  bool contains(const void* p, size_t bytes) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(m_mutex);
    auto it = m_ranges.upper_bound(a);
    if (it == m_ranges.begin()) return false;
    --it;
    return a + bytes <= it->first + it->second;
  }

 private:
  mutable std::mutex m_mutex;
  std::map<uintptr_t, size_t> m_ranges;  // start -> bytes
};

// The live streams, for synchronize_all.
class StreamRegistry {
 public:
  void add(StreamWorker* w) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_workers.insert(w);
  }
  void remove(StreamWorker* w) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_workers.erase(w);
  }
  // Every stream is waited for before the first error (if any) is rethrown.
  void synchronize_all() {
    std::lock_guard<std::mutex> lock(m_mutex);
    std::exception_ptr first;
    for (StreamWorker* w : m_workers) {
      try {
        w->synchronize();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

 private:
  std::mutex m_mutex;
  std::set<StreamWorker*> m_workers;
};

namespace {

class AsyncStream final : public Stream {
 public:
  AsyncStream(std::unique_ptr<Stream> inner, int omp_threads, StreamJitter jitter,
              std::shared_ptr<StreamRegistry> registry)
      : m_inner(std::move(inner)), m_worker(omp_threads, jitter), m_registry(std::move(registry)) {
    m_registry->add(&m_worker);
  }
  ~AsyncStream() override { m_registry->remove(&m_worker); }  // then m_worker drains and stops
  Stream& inner() { return *m_inner; }
  StreamWorker& worker() { return m_worker; }

 private:
  std::unique_ptr<Stream> m_inner;  // the CpuStream the operations run on
  StreamWorker m_worker;
  std::shared_ptr<StreamRegistry> m_registry;
};

// The last point recorded on an event (none yet: complete, as an unrecorded cudaEvent_t).
// Recorded by one host thread while another may poll it: hence the lock.
class AsyncEvent final : public Event {
 public:
  void set(std::shared_ptr<StreamMarker> m) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_marker = std::move(m);
  }
  std::shared_ptr<StreamMarker> get() const {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_marker;
  }

 private:
  mutable std::mutex m_mutex;
  std::shared_ptr<StreamMarker> m_marker;
};

AsyncStream& as_async(Stream& s) { return static_cast<AsyncStream&>(s); }
AsyncEvent& as_async(Event& e) { return static_cast<AsyncEvent&>(e); }

// Queues op(inner stream) on s's worker (the plans' passes; the backend's calls go through
// AsyncCpuBackend::run_on).
template <class Op>
void enqueue(Stream& s, Op op) {
  AsyncStream& a = as_async(s);
  Stream* inner = &a.inner();
  a.worker().enqueue([inner, op = std::move(op)]() mutable { op(*inner); });
}

// Plans: the wrapped plan is shared with the queued passes, so that a plan dropped while its
// work is queued lives until that work has run.
// Convolution and linear plans have the same three passes: one wrapper serves both.
template <class Plan>
class AsyncWeightedPlan : public Plan {
 public:
  explicit AsyncWeightedPlan(std::unique_ptr<Plan> p) : m_p(std::move(p)) {}
  void forward(Stream& s, const void* x, const float* w, const float* b, void* y) override {
    enqueue(s, [p = m_p, x, w, b, y](Stream& in) { p->forward(in, x, w, b, y); });
  }
  void backward_data(Stream& s, const void* dy, const float* w, void* dx) override {
    enqueue(s, [p = m_p, dy, w, dx](Stream& in) { p->backward_data(in, dy, w, dx); });
  }
  void backward_weights(Stream& s, const void* x, const void* dy, float* dw, float* db) override {
    enqueue(s, [p = m_p, x, dy, dw, db](Stream& in) { p->backward_weights(in, x, dy, dw, db); });
  }

 protected:
  std::shared_ptr<Plan> m_p;
};

// A convolution's weight mirror is the wrapped plan's (its memory, written by queued updates).
class AsyncConvPlan final : public AsyncWeightedPlan<ConvPlan> {
 public:
  using AsyncWeightedPlan<ConvPlan>::AsyncWeightedPlan;
  WeightMirror weight_mirror() const override { return m_p->weight_mirror(); }
  // Binding only stores pointers (read by later queued forwards): done at once.
  void bind_batch_norm(const float* gamma, const float* beta, const float* mean, const float* var) override {
    m_p->bind_batch_norm(gamma, beta, mean, var);
  }
  void forward_mirrored(Stream& s, const void* x, const float* w, const float* b, void* y) override {
    enqueue(s, [p = m_p, x, w, b, y](Stream& in) { p->forward_mirrored(in, x, w, b, y); });
  }
  void forward_unchanged(Stream& s, const void* x, const float* w, const float* b, void* y,
                         uint64_t version) override {
    enqueue(s, [p = m_p, x, w, b, y, version](Stream& in) { p->forward_unchanged(in, x, w, b, y, version); });
  }
};

class AsyncPoolPlan final : public PoolPlan {
 public:
  explicit AsyncPoolPlan(std::unique_ptr<PoolPlan> p) : m_p(std::move(p)) {}
  void forward(Stream& s, const void* x, void* y, bool train) override {
    enqueue(s, [p = m_p, x, y, train](Stream& in) { p->forward(in, x, y, train); });
  }
  void backward(Stream& s, const void* dy, void* dx) override {
    enqueue(s, [p = m_p, dy, dx](Stream& in) { p->backward(in, dy, dx); });
  }

 private:
  std::shared_ptr<PoolPlan> m_p;
};

class AsyncBatchNormPlan final : public BatchNormPlan {
 public:
  explicit AsyncBatchNormPlan(std::unique_ptr<BatchNormPlan> p) : m_p(std::move(p)) {}
  void forward(Stream& s, const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool train) override {
    enqueue(s, [p = m_p, x, gamma, beta, running_mean, running_var, y, train](Stream& in) {
      p->forward(in, x, gamma, beta, running_mean, running_var, y, train);
    });
  }
  void backward(Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                float* dbeta) override {
    enqueue(s, [p = m_p, x, dy, gamma, dx, dgamma, dbeta](Stream& in) {
      p->backward(in, x, dy, gamma, dx, dgamma, dbeta);
    });
  }

 private:
  std::shared_ptr<BatchNormPlan> m_p;
};

}  // namespace

AsyncCpuBackend::AsyncCpuBackend(std::unique_ptr<CpuBackend> inner, bool async, StreamJitter jitter)
    : m_b(std::move(inner)), m_async(async), m_jitter(jitter), m_host(std::make_shared<HostRanges>()),
      m_registry(std::make_shared<StreamRegistry>()) {}

AsyncCpuBackend::~AsyncCpuBackend() = default;

void AsyncCpuBackend::queue(Stream& s, std::function<void(Stream&)> op) {
  AsyncStream& a = as_async(s);
  Stream* inner = &a.inner();
  a.worker().enqueue([inner, op = std::move(op)] { op(*inner); });
}

std::string AsyncCpuBackend::name() const {
  return m_b->name();
}

DeviceInfo AsyncCpuBackend::device() const {
  return m_b->device();
}

Layout AsyncCpuBackend::blocked_layout_for(DType t) const { return m_b->blocked_layout_for(t); }
bool AsyncCpuBackend::fuses(DType t) const { return m_b->fuses(t); }
bool AsyncCpuBackend::native_precision(DType t) const { return m_b->native_precision(t); }
void AsyncCpuBackend::set_reference_precision(bool on) { m_b->set_reference_precision(on); }

int AsyncCpuBackend::threads() const {
  return m_b->threads();
}

void AsyncCpuBackend::bind_calling_thread(int threads) {
  m_b->bind_calling_thread(threads);
}

std::unique_ptr<Stream> AsyncCpuBackend::create_stream() {
  if (!m_async) return m_b->create_stream();
  StreamJitter jitter = m_jitter;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    jitter.seed = m_jitter.seed + 0x9e3779b97f4a7c15ull * ++m_streams;  // its own delays, reproducibly
  }
  return std::make_unique<AsyncStream>(m_b->create_stream(), omp_get_max_threads(), jitter, m_registry);
}

std::unique_ptr<Event> AsyncCpuBackend::create_event() {
  if (!m_async) return m_b->create_event();
  return std::make_unique<AsyncEvent>();
}

void AsyncCpuBackend::record(Event& e, Stream& s) {
  if (!m_async) return m_b->record(e, s);
  as_async(e).set(as_async(s).worker().mark());
}

void AsyncCpuBackend::wait(Stream& s, Event& e) {
  if (!m_async) return m_b->wait(s, e);
  as_async(s).worker().wait_for(as_async(e).get());
}

void AsyncCpuBackend::synchronize(Stream& s) {
  if (!m_async) return m_b->synchronize(s);
  as_async(s).worker().synchronize();
}

void AsyncCpuBackend::synchronize(Event& e) {
  if (!m_async) return m_b->synchronize(e);
  if (auto m = as_async(e).get()) {
    m->wait();
    if (auto error = m->error()) std::rethrow_exception(error);
  }
}

bool AsyncCpuBackend::ready(Event& e) {
  if (!m_async) return m_b->ready(e);
  auto m = as_async(e).get();
  return !m || m->done();
}

void AsyncCpuBackend::synchronize_all() {
  if (!m_async) return m_b->synchronize_all();
  m_registry->synchronize_all();
}

Buffer AsyncCpuBackend::allocate(size_t count, DType dtype) {
  return m_b->allocate(count, dtype);
}

Buffer AsyncCpuBackend::allocate_host(size_t count, DType dtype) {
  if (!m_async) return m_b->allocate_host(count, dtype);
  Buffer inner = m_b->allocate(count, dtype);
  void* p = inner.raw();
  m_host->add(p, std::max<size_t>(inner.bytes(), 1));
  std::shared_ptr<void> owner(p, [inner, host = m_host](void* q) { host->remove(q); });
  return Buffer(p, count, dtype, std::move(owner));
}

void AsyncCpuBackend::copy_bytes_from_host(Stream& s, void* dst, const void* src, size_t bytes) {
  run_on(s, [this, dst, src, bytes](Stream& in) { m_b->copy_bytes_from_host(in, dst, src, bytes); });
  if (m_async && !m_host->contains(src, bytes)) synchronize(s);  // the caller may reuse src at once
}

void AsyncCpuBackend::copy_bytes_to_host(Stream& s, void* dst, const void* src, size_t bytes) {
  run_on(s, [this, dst, src, bytes](Stream& in) { m_b->copy_bytes_to_host(in, dst, src, bytes); });
  if (m_async && !m_host->contains(dst, bytes)) synchronize(s);  // the caller may read dst at once
}

void AsyncCpuBackend::copy_bytes(Stream& s, void* dst, const void* src, size_t bytes) {
  run_on(s, [this, dst, src, bytes](Stream& in) { m_b->copy_bytes(in, dst, src, bytes); });
}

void AsyncCpuBackend::convert(Stream& s, const void* src, DType from, void* dst, DType to, size_t n) {
  run_on(s, [this, src, from, dst, to, n](Stream& in) { m_b->convert(in, src, from, dst, to, n); });
}

void AsyncCpuBackend::permute_layout(Stream& s, DType t, const void* src, Layout from, void* dst, Layout to, int64_t n, int64_t c,
    int64_t h, int64_t w) {
  run_on(s, [=, this](Stream& in) { m_b->permute_layout(in, t, src, from, dst, to, n, c, h, w); });
}

void AsyncCpuBackend::permute_convert(Stream& s, const void* src, DType from, Layout from_layout, void* dst, DType to,
                                      Layout to_layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  run_on(s, [=, this](Stream& in) {
    m_b->permute_convert(in, src, from, from_layout, dst, to, to_layout, n, c, h, w);
  });
}

std::unique_ptr<ConvPlan> AsyncCpuBackend::make_conv(const ConvDesc& d) {
  if (!m_async) return m_b->make_conv(d);
  return std::make_unique<AsyncConvPlan>(m_b->make_conv(d));
}

std::unique_ptr<LinearPlan> AsyncCpuBackend::make_linear(const LinearDesc& d) {
  if (!m_async) return m_b->make_linear(d);
  return std::make_unique<AsyncWeightedPlan<LinearPlan>>(m_b->make_linear(d));
}

std::unique_ptr<PoolPlan> AsyncCpuBackend::make_pool(const PoolDesc& d) {
  if (!m_async) return m_b->make_pool(d);
  return std::make_unique<AsyncPoolPlan>(m_b->make_pool(d));
}

std::unique_ptr<BatchNormPlan> AsyncCpuBackend::make_batch_norm(const BatchNormDesc& d) {
  if (!m_async) return m_b->make_batch_norm(d);
  return std::make_unique<AsyncBatchNormPlan>(m_b->make_batch_norm(d));
}

void AsyncCpuBackend::fill(Stream& s, float* x, size_t n, float value) {
  run_on(s, [=, this](Stream& in) { m_b->fill(in, x, n, value); });
}

void AsyncCpuBackend::relu_forward(Stream& s, DType t, const void* x, void* y, size_t n) {
  run_on(s, [=, this](Stream& in) { m_b->relu_forward(in, t, x, y, n); });
}

void AsyncCpuBackend::relu_backward(Stream& s, DType t, const void* y, const void* dy, void* dx, size_t n) {
  run_on(s, [=, this](Stream& in) { m_b->relu_backward(in, t, y, dy, dx, n); });
}

void AsyncCpuBackend::add(Stream& s, DType t, const void* a, const void* b, void* y, size_t n) {
  run_on(s, [=, this](Stream& in) { m_b->add(in, t, a, b, y, n); });
}

void AsyncCpuBackend::axpy(Stream& s, float alpha, const float* x, float* y, size_t n) {
  run_on(s, [=, this](Stream& in) { m_b->axpy(in, alpha, x, y, n); });
}

void AsyncCpuBackend::scale(Stream& s, float alpha, float* x, size_t n) {
  run_on(s, [=, this](Stream& in) { m_b->scale(in, alpha, x, n); });
}

void AsyncCpuBackend::axpby(Stream& s, float alpha, const float* x, float beta, float* y, size_t n) {
  run_on(s, [=, this](Stream& in) { m_b->axpby(in, alpha, x, beta, y, n); });
}

void AsyncCpuBackend::dropout_forward(Stream& s, DType t, const void* x, void* y, void* mask, size_t n, float p, uint64_t seed,
    uint64_t offset) {
  run_on(s, [=, this](Stream& in) { m_b->dropout_forward(in, t, x, y, mask, n, p, seed, offset); });
}

void AsyncCpuBackend::multiply(Stream& s, DType t, const void* a, const void* b, void* y, size_t n) {
  run_on(s, [=, this](Stream& in) { m_b->multiply(in, t, a, b, y, n); });
}

void AsyncCpuBackend::copy_strided(Stream& s, DType t, void* dst, int64_t dst_stride, int64_t dst_offset, const void* src,
    int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  run_on(s, [=, this](Stream& in) {
    m_b->copy_strided(in, t, dst, dst_stride, dst_offset, src, src_stride, src_offset, rows, count);
  });
}

void AsyncCpuBackend::global_avg_pool_forward(Stream& s, DType t, const void* x, void* y, int64_t nc, int64_t hw) {
  run_on(s, [=, this](Stream& in) { m_b->global_avg_pool_forward(in, t, x, y, nc, hw); });
}

void AsyncCpuBackend::global_avg_pool_backward(Stream& s, DType t, const void* dy, void* dx, int64_t nc, int64_t hw) {
  run_on(s, [=, this](Stream& in) { m_b->global_avg_pool_backward(in, t, dy, dx, nc, hw); });
}

void AsyncCpuBackend::bilinear_forward(Stream& s, DType t, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh,
    int64_t ow) {
  run_on(s, [=, this](Stream& in) { m_b->bilinear_forward(in, t, x, y, nc, h, w, oh, ow); });
}

void AsyncCpuBackend::bilinear_backward(Stream& s, DType t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w, int64_t oh,
    int64_t ow) {
  run_on(s, [=, this](Stream& in) { m_b->bilinear_backward(in, t, dy, dx, nc, h, w, oh, ow); });
}

void AsyncCpuBackend::softmax_cross_entropy(Stream& s, DType t, const void* logits, const int32_t* labels, const float* weights,
    int64_t n, int64_t classes, int64_t hw, void* dlogits, float* loss,
    const float* grad_scale) {
  run_on(s, [=, this](Stream& in) {
    m_b->softmax_cross_entropy(in, t, logits, labels, weights, n, classes, hw, dlogits, loss, grad_scale);
  });
}

void AsyncCpuBackend::argmax_channels(Stream& s, DType t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) {
  run_on(s, [=, this](Stream& in) { m_b->argmax_channels(in, t, x, out, n, c, hw); });
}

void AsyncCpuBackend::accumulate_confusion(Stream& s, const int32_t* labels, const int32_t* pred, size_t n, int64_t classes,
    int32_t* confusion) {
  run_on(s, [=, this](Stream& in) { m_b->accumulate_confusion(in, labels, pred, n, classes, confusion); });
}

void AsyncCpuBackend::sgd_step(Stream& s, float* w, const float* g, float* velocity, size_t n, float lr, float momentum,
    float weight_decay, bool nesterov) {
  run_on(s, [=, this](Stream& in) {
    m_b->sgd_step(in, w, g, velocity, n, lr, momentum, weight_decay, nesterov);
  });
}

void AsyncCpuBackend::adam_step(Stream& s, float* w, const float* g, float* m, float* v, float* update, size_t n, float lr,
    float beta1, float beta2, float eps, float weight_decay, bool decoupled, int64_t step,
    bool apply) {
  run_on(s, [=, this](Stream& in) {
    m_b->adam_step(in, w, g, m, v, update, n, lr, beta1, beta2, eps, weight_decay, decoupled, step, apply);
  });
}

void AsyncCpuBackend::sum_squares(Stream& s, const float* x, size_t n, float* out) {
  run_on(s, [=, this](Stream& in) { m_b->sum_squares(in, x, n, out); });
}

std::unique_ptr<TensorSet> AsyncCpuBackend::make_tensor_set(std::vector<TensorRef> tensors) {
  return m_b->make_tensor_set(std::move(tensors));
}

void AsyncCpuBackend::sgd_update(Stream& s, TensorSet& set, float* velocity, const SgdArgs& a) {
  run_on(s, [=, this, set = &set](Stream& in) { m_b->sgd_update(in, *set, velocity, a); });
}

void AsyncCpuBackend::adam_update(Stream& s, TensorSet& set, float* m, float* v, const AdamArgs& a) {
  run_on(s, [=, this, set = &set](Stream& in) { m_b->adam_update(in, *set, m, v, a); });
}

void AsyncCpuBackend::larc_scale(Stream& s, TensorSet& set, const LarcArgs& a) {
  run_on(s, [=, this, set = &set](Stream& in) { m_b->larc_scale(in, *set, a); });
}

// SQUALL_CPU_STREAM_JITTER=<max microseconds>[,seed]: a random delay before each queued
// operation, the same sequence for the same seed (default 1).
StreamJitter AsyncCpuBackend::jitter_from_environment() {
  StreamJitter j;
  j.seed = 1;
  const char* v = std::getenv("SQUALL_CPU_STREAM_JITTER");
  if (v == nullptr || *v == '\0') return j;
  const std::string text(v);
  try {
    size_t used = 0;
    j.max_us = std::stoi(text, &used);
    if (used < text.size()) {
      if (text[used] != ',') throw std::invalid_argument("separator");
      j.seed = std::stoull(text.substr(used + 1));
    }
  } catch (const std::exception&) {
    throw UsageError("SQUALL_CPU_STREAM_JITTER must be <max microseconds>[,<seed>], got \"" + text + "\"");
  }
  if (j.max_us < 0) throw UsageError("SQUALL_CPU_STREAM_JITTER must not be negative, got \"" + text + "\"");
  return j;
}

}  // namespace squall::cpu

namespace squall::nn {

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  auto inner = std::make_unique<squall::cpu::CpuBackend>(options.threads);
  if (!options.async_streams) return inner;
  return std::make_unique<squall::cpu::AsyncCpuBackend>(std::move(inner), true,
                                                       squall::cpu::AsyncCpuBackend::jitter_from_environment());
}

}  // namespace squall::nn
