// CpuBackend's device: construction, capabilities, streams and events, memory and copies.
// Memory is host memory, 256-byte aligned as Device::allocate promises on every backend (a
// cudaMalloc'd block's alignment; more than a cache line or an AVX-512 load needs, so that
// views the graph aligns to 256 bytes are aligned in memory on the CPU too), recycled through
// the size-keyed pool (src/nn/size_pool.hpp) so that a plan rebuilt for the same shapes does
// not go back to the system allocator.
#include "src/cpu/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "src/core/error.hpp"
#include "src/cpu/cpu_info.hpp"
#include "src/cpu/cpu_stream.hpp"

namespace squall::cpu {

namespace {

constexpr size_t k_alignment = 256;

// Host memory from the size-keyed pool: sizes rounded to whole 256-byte blocks, an empty
// buffer still a real block so that data() is never null for a valid Buffer.
SizePool::Source aligned_host_memory() {
  return SizePool::Source{
      [](size_t bytes) { return std::max<size_t>(k_alignment, (bytes + k_alignment - 1) / k_alignment * k_alignment); },
      [](size_t bytes) { return std::aligned_alloc(k_alignment, bytes); },
      [](void* p) { std::free(p); }};
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : m_threads(options.threads > 0 ? options.threads : std::min(omp_get_max_threads(), hardware_threads())),
      m_async(options.async_streams),
      m_jitter(!options.async_streams ? StreamJitter{} : options.jitter ? *options.jitter : jitter_from_environment()),
      m_engine(dnnl::engine::kind::cpu, 0),
      m_pool(std::make_shared<SizePool>(aligned_host_memory())) {
  if (options.threads < 0)
    throw Error("cpu backend: thread count must be >= 0, got " + std::to_string(options.threads));
  // oneDNN's CPU runtime is OpenMP here, so this one call sizes both our loops and its kernels.
  // Always set: OpenMP's own default counts every visible core, even under a cgroup quota.
  omp_set_num_threads(m_threads);
}

CpuBackend::~CpuBackend() = default;

void CpuBackend::bind_calling_thread(int threads) {
  // OpenMP's nthreads-var is per thread: this sizes the teams this thread's kernels start.
  omp_set_num_threads(std::max(1, threads));
}

DeviceInfo CpuBackend::info() const {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = cpu_model_name() + " (" + std::to_string(m_threads) + " threads)";
  d.cpu_streams = m_async ? "async" : "inline";
  d.cpu_stream_jitter_us = m_jitter.max_us;
  return d;
}

Capabilities CpuBackend::capabilities() const {
  Capabilities c;
  c.host_accessible = true;
  c.can_capture = false;
  c.threads = m_threads;
  c.loss_without_gradient = true;
  c.f32 = {true, true, blocked_layout()};
  c.bf16 = {native_precision(DType::bf16), false, Layout::nchw};
  c.f16 = {native_precision(DType::f16), false, Layout::nchw};
  return c;
}

// ---- streams and events ----

std::unique_ptr<Stream> CpuBackend::create_stream() {
  if (!m_async) return std::make_unique<CpuStream>(m_engine, nullptr, nullptr);
  StreamJitter jitter = m_jitter;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    jitter.seed = m_jitter.seed + 0x9e3779b97f4a7c15ull * ++m_streams;  // its own delays, reproducibly
  }
  // The worker's kernels get the creating thread's share of the cores (bind_calling_thread).
  return std::make_unique<CpuStream>(m_engine, std::make_unique<StreamWorker>(omp_get_max_threads(), jitter),
                                     m_registry);
}

std::unique_ptr<Event> CpuBackend::create_event() { return std::make_unique<CpuEvent>(); }

void CpuBackend::record(Event& e, Stream& s) {
  StreamWorker* w = cpu_stream(s).worker();
  static_cast<CpuEvent&>(e).set(w != nullptr ? w->mark() : nullptr);
}

void CpuBackend::wait(Stream& s, Event& e) {
  if (StreamWorker* w = cpu_stream(s).worker()) w->wait_for(static_cast<CpuEvent&>(e).get());
}

void CpuBackend::synchronize(Stream& s) {
  if (StreamWorker* w = cpu_stream(s).worker()) return w->synchronize();
  dnnl_stream(s).wait();
}

void CpuBackend::synchronize(Event& e) {
  if (auto m = static_cast<CpuEvent&>(e).get()) {
    m->wait();
    if (auto error = m->error()) std::rethrow_exception(error);
  }
}

bool CpuBackend::ready(Event& e) {
  auto m = static_cast<CpuEvent&>(e).get();
  return !m || m->done();
}

void CpuBackend::synchronize_all() { m_registry->synchronize_all(); }

void CpuBackend::begin_capture(Stream&) { throw Error("the cpu backend cannot capture work"); }
std::unique_ptr<Captured> CpuBackend::end_capture(Stream&) { throw Error("the cpu backend cannot capture work"); }
void CpuBackend::replay(Captured&, Stream&) { throw Error("the cpu backend cannot replay work"); }

// ---- memory and copies ----

Buffer CpuBackend::allocate_memory(size_t count, DType dtype) {
  return pooled_buffer(m_pool, count, dtype, [](size_t bytes) {
    throw Error("cpu backend: out of host memory allocating " + std::to_string(bytes) + " bytes");
  });
}

Buffer CpuBackend::allocate_host(size_t count, DType dtype) {
  Buffer inner = allocate_memory(count, dtype);
  if (!m_async) return inner;
  // Listed while it lives: copies to and from it may then be asynchronous.
  void* p = inner.raw();
  m_host->add(p, std::max<size_t>(inner.bytes(), 1));
  std::shared_ptr<void> owner(p, [inner, host = m_host](void* q) { host->remove(q); });
  return Buffer(p, count, dtype, std::move(owner));
}

namespace {

// A copy of a batch (megabytes: a climate batch is 7 MB) by the whole team, each thread a
// contiguous share, rather than by one thread while the others wait for the next primitive.
void copy_large(void* dst, const void* src, size_t bytes) {
  constexpr size_t k_min = size_t{1} << 20;
  if (bytes < k_min) {
    std::memcpy(dst, src, bytes);
    return;
  }
#pragma omp parallel
  {
    const auto threads = static_cast<size_t>(omp_get_num_threads()), t = static_cast<size_t>(omp_get_thread_num());
    const size_t share = (bytes / threads + 63) / 64 * 64;  // whole cache lines
    const size_t begin = std::min(bytes, t * share), end = std::min(bytes, begin + share);
    if (end > begin) std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  }
}

}  // namespace

void CpuBackend::copy_bytes_from_host(Stream& s, void* dst, const void* src, size_t bytes) {
  run_on(s, [=] {
    if (bytes && dst != src) copy_large(dst, src, bytes);
  });
  if (cpu_stream(s).queues() && !m_host->contains(src, bytes)) synchronize(s);  // the caller may reuse src at once
}

void CpuBackend::copy_bytes_to_host(Stream& s, void* dst, const void* src, size_t bytes) {
  run_on(s, [=] {
    if (bytes && dst != src) copy_large(dst, src, bytes);
  });
  if (cpu_stream(s).queues() && !m_host->contains(dst, bytes)) synchronize(s);  // the caller may read dst at once
}

void CpuBackend::copy_bytes(Stream& s, void* dst, const void* src, size_t bytes) {
  run_on(s, [=] {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  });
}

}  // namespace squall::cpu
