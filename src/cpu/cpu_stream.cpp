// The worker thread behind an asynchronous CPU stream (cpu_stream.hpp).
#include "src/cpu/cpu_stream.hpp"

#include <omp.h>

#include <chrono>
#include <utility>

namespace squall::cpu {

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

void StreamWorker::delay() {
  if (m_jitter.max_us <= 0) return;
  std::uniform_int_distribution<int> us(0, m_jitter.max_us);
  std::this_thread::sleep_for(std::chrono::microseconds(us(m_rng)));
}

void StreamWorker::run(int omp_threads) {
  // nthreads-var is per thread: the worker's kernels get the creator's share of the cores.
  omp_set_num_threads(omp_threads > 0 ? omp_threads : 1);
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

}  // namespace squall::cpu
