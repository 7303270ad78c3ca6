#pragma once
// Asynchronous CPU streams (run.cpu_streams = async): a stream is a worker thread that runs
// its queued work in order, so that the CPU backend keeps the execution model of a device
// backend (docs/design.md, "Backends"): a call returns once its work is queued, events are
// points in a stream's work, and the host sees results only after it synchronizes. This is
// a checking mode, not a fast path: it shows on the CPU the ordering bugs (a read before the
// writing stream is done, a missing event, a host wait too few) that a GPU shows first.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace squall::cpu {

// A point in one stream's work: signalled when the stream's worker reaches it, carrying the
// error the stream had met by then (if any), so that a host waiting on the point sees it.
class StreamMarker {
 public:
  void signal(std::exception_ptr error);
  void wait() const;  // blocks until signalled
  bool done() const;
  std::exception_ptr error() const;

 private:
  mutable std::mutex m_mutex;
  mutable std::condition_variable m_changed;
  bool m_done = false;
  std::exception_ptr m_error;
};

// How much random delay each queued operation gets before it runs (SQUALL_CPU_STREAM_JITTER).
struct StreamJitter {
  int max_us = 0;  // 0: none
  uint64_t seed = 0;
};

// One worker thread and its queue. After an operation throws, the worker skips the
// operations queued behind it (they would compute on garbage, and inline they would never
// have run) but still signals markers, so that no stream waiting on this one deadlocks; the
// error is rethrown by the next synchronize (and by a synchronize of any marker behind it).
class StreamWorker {
 public:
  // omp_threads: the OpenMP team size the worker's operations use (that of the thread that
  // created the stream: bind_calling_thread sets it per thread).
  StreamWorker(int omp_threads, StreamJitter jitter);
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;
  // Runs what is queued, then stops; an error nobody synchronized on is dropped.
  ~StreamWorker();

  void enqueue(std::function<void()> op);
  // A marker at the end of the work queued so far.
  std::shared_ptr<StreamMarker> mark();
  // Work queued after this call starts once `marker` is signalled (the host does not wait).
  void wait_for(std::shared_ptr<StreamMarker> marker);
  // The host waits for the work queued so far; rethrows (once) an error it met.
  void synchronize();

 private:
  struct Job {
    std::function<void()> op;               // compute, or a wait on another stream's marker
    std::shared_ptr<StreamMarker> marker;   // or a marker to signal
  };
  void push(Job job);
  void run(int omp_threads);
  void delay();

  std::mutex m_mutex;
  std::condition_variable m_queued;
  std::deque<Job> m_jobs;
  bool m_stopping = false;
  std::exception_ptr m_error;  // the first error not yet rethrown; guarded by m_mutex
  StreamJitter m_jitter;
  std::mt19937_64 m_rng;  // worker thread only
  std::thread m_thread;   // last: starts once the rest is initialised
};

}  // namespace squall::cpu
