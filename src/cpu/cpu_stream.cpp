// CPU streams (cpu_stream.hpp): the worker thread behind an asynchronous one, its markers and
// events, the registry of live workers, the host ranges, and the lifetime of queued passes.
#include "src/cpu/cpu_stream.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "src/core/error.hpp"

namespace squall::cpu {

namespace {
thread_local const StreamWorker* t_current_worker = nullptr;  // the worker this thread is, if any
}  // namespace

void StreamMarker::signal(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_done = true;
    m_error = std::move(error);
  }
  m_changed.notify_all();
}

void StreamMarker::wait() const {
  std::unique_lock<std::mutex> lock(m_mutex);
  m_changed.wait(lock, [this] { return m_done; });
}

bool StreamMarker::done() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_done;
}

std::exception_ptr StreamMarker::error() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_error;
}

StreamWorker::StreamWorker(int omp_threads, StreamJitter jitter)
    : m_jitter(jitter), m_rng(jitter.seed), m_thread([this, omp_threads] { run(omp_threads); }) {}

StreamWorker::~StreamWorker() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stopping = true;
  }
  m_queued.notify_all();
  m_thread.join();
}

void StreamWorker::push(Job job) {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_jobs.push_back(std::move(job));
  }
  m_queued.notify_one();
}

void StreamWorker::enqueue(std::function<void()> op) { push(Job{std::move(op), nullptr}); }

std::shared_ptr<StreamMarker> StreamWorker::mark() {
  auto marker = std::make_shared<StreamMarker>();
  push(Job{nullptr, marker});
  return marker;
}

void StreamWorker::wait_for(std::shared_ptr<StreamMarker> marker) {
  // Markers are only ever made by work queued before this call (on whatever stream), and a
  // marker is signalled even after an error, so waits cannot form a cycle or hang.
  if (marker && !marker->done()) enqueue([marker] { marker->wait(); });
}

void StreamWorker::synchronize() {
  mark()->wait();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    error = std::exchange(m_error, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

bool StreamWorker::is_current() const { return t_current_worker == this; }

void StreamWorker::delay() {
  if (m_jitter.max_us <= 0) return;
  std::uniform_int_distribution<int> us(0, m_jitter.max_us);
  std::this_thread::sleep_for(std::chrono::microseconds(us(m_rng)));
}

void StreamWorker::run(int omp_threads) {
  // nthreads-var is per thread: the worker's kernels get the creator's share of the cores.
  omp_set_num_threads(omp_threads > 0 ? omp_threads : 1);
  t_current_worker = this;
  for (;;) {
    Job job;
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(m_mutex);
      m_queued.wait(lock, [this] { return m_stopping || !m_jobs.empty(); });
      if (m_jobs.empty()) return;  // stopping, and everything queued has run
      job = std::move(m_jobs.front());
      m_jobs.pop_front();
      error = m_error;
    }
    delay();
    if (job.marker) {
      job.marker->signal(error);
      continue;
    }
    if (error) continue;  // skipped: an earlier operation failed
    try {
      job.op();
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (!m_error) m_error = std::current_exception();
    }
  }
}

void StreamRegistry::add(StreamWorker* w) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_workers.insert(w);
}

void StreamRegistry::remove(StreamWorker* w) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_workers.erase(w);
}

void StreamRegistry::synchronize_all() {
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

void HostRanges::add(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_ranges[reinterpret_cast<uintptr_t>(p)] = bytes;
}

void HostRanges::remove(const void* p) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_ranges.erase(reinterpret_cast<uintptr_t>(p));
}

bool HostRanges::contains(const void* p, size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_ranges.upper_bound(a);
  if (it == m_ranges.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

CpuStream::CpuStream(dnnl::engine& engine, std::unique_ptr<StreamWorker> worker,
                     std::shared_ptr<StreamRegistry> registry)
    : m_dnnl(engine), m_worker(std::move(worker)), m_registry(std::move(registry)) {
  if (m_worker && m_registry) m_registry->add(m_worker.get());
}

CpuStream::~CpuStream() {
  if (m_worker && m_registry) m_registry->remove(m_worker.get());
  m_worker.reset();  // runs what is queued, then stops
}

void CpuStream::FreeScratch::operator()(void* p) const { std::free(p); }

void* CpuStream::scratch(size_t bytes) {
  if (bytes > m_scratch_bytes || !m_scratch) {
    constexpr size_t k_page = 4096;
    const size_t rounded = (std::max<size_t>(bytes, 1) + k_page - 1) / k_page * k_page;
    m_scratch.reset();  // the old one first: the peak is the larger, not both
    m_scratch.reset(std::aligned_alloc(k_page, rounded));
    if (!m_scratch) throw Error("cpu stream: cannot allocate a scratchpad of " + std::to_string(rounded) + " bytes");
    m_scratch_bytes = rounded;
  }
  return m_scratch.get();
}

void CpuEvent::set(std::shared_ptr<StreamMarker> m) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_marker = std::move(m);
}

std::shared_ptr<StreamMarker> CpuEvent::get() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_marker;
}

std::shared_ptr<void> QueuedWork::ticket() {
  std::shared_ptr<Count> count = m_count;
  {
    std::lock_guard<std::mutex> lock(count->mutex);
    ++count->pending;
  }
  return std::shared_ptr<void>(count.get(), [count](void*) {
    std::lock_guard<std::mutex> lock(count->mutex);
    if (--count->pending == 0) count->zero.notify_all();
  });
}

QueuedWork::~QueuedWork() {
  std::unique_lock<std::mutex> lock(m_count->mutex);
  m_count->zero.wait(lock, [this] { return m_count->pending == 0; });
}

// SQUALL_CPU_STREAM_JITTER=<max microseconds>[,seed]: a random delay before each queued
// operation, the same sequence for the same seed (default 1).
StreamJitter jitter_from_environment() {
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
