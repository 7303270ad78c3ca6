#pragma once
// CPU streams. Every CPU kernel and plan pass runs its whole body through the stream it is
// given (run_on below): inline on the calling thread (run.cpu_streams = inline, the default
// and the fast one: every call has completed when it returns), or queued on the stream's own
// worker thread (run.cpu_streams = async), so that the CPU backend keeps the execution model
// of a device (docs/design.md, "Backends"): a call returns once its work is queued, events
// are points in a stream's work, and the host sees results only after it synchronizes. The
// asynchronous mode is a checking mode, not a fast path: it shows on the CPU the ordering
// bugs (a read before the writing stream is done, a missing event, a host wait too few)
// that a GPU shows first. Queuing a call's whole body, not the calls it makes inside, keeps
// a composite operation's temporaries (the widened copies of reduced-precision data, a
// plan's scratch) alive for as long as it runs; a call made from inside a queued body runs
// inline, on the worker, in its place.
#include <oneapi/dnnl/dnnl.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <map>
#include <thread>
#include <utility>

#include "src/cpu/cpu_options.hpp"
#include "src/nn/device.hpp"

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

// SQUALL_CPU_STREAM_JITTER=<max microseconds>[,seed] (seed 1 when not given); throws
// squall::UsageError for another form.
StreamJitter jitter_from_environment();

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
  // Whether the calling thread is this worker (a call made from inside queued work).
  bool is_current() const;

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

// The live workers of one backend, for synchronize_all.
class StreamRegistry {
 public:
  void add(StreamWorker* w);
  void remove(StreamWorker* w);
  // Every stream is waited for before the first error (if any) is rethrown.
  void synchronize_all();

 private:
  std::mutex m_mutex;
  std::set<StreamWorker*> m_workers;
};

// The host ranges allocate_host handed out: on asynchronous streams, copies to and from them
// are asynchronous; copies to and from any other host memory complete before the call
// returns (nn::Device's contract).
class HostRanges {
 public:
  void add(const void* p, size_t bytes);
  void remove(const void* p);
  bool contains(const void* p, size_t bytes) const;

 private:
  mutable std::mutex m_mutex;
  std::map<uintptr_t, size_t> m_ranges;  // start -> bytes
};

// A CPU stream: the oneDNN stream its primitives run on and, when asynchronous, the worker.
class CpuStream final : public nn::Stream {
 public:
  // worker: null for an inline stream; registry: where an asynchronous one is listed.
  CpuStream(dnnl::engine& engine, std::unique_ptr<StreamWorker> worker, std::shared_ptr<StreamRegistry> registry);
  ~CpuStream() override;
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  dnnl::stream& dnnl() { return m_dnnl; }
  StreamWorker* worker() { return m_worker.get(); }
  // Whether run() queues (an asynchronous stream, called from another thread than its worker).
  bool queues() const { return m_worker != nullptr && !m_worker->is_current(); }
  // The stream's scratchpad, at least `bytes` long (page-aligned), for the oneDNN primitives of
  // the call whose body is running on this stream: the plans of a stream run one after another,
  // so they share one scratchpad sized for the largest, where each plan owning its own would
  // hold the sum (the Winograd kernel's take 8 to 22 MiB each on the U-Net at batch 4). Valid
  // until the next call with more bytes; only a body running on this stream may call it.
  void* scratch(size_t bytes);
  // Runs f, the whole body of a call on this stream: now, or queued on the worker.
  template <class F>
  void run(F&& f) {
    if (!queues()) {
      f();
      return;
    }
    m_worker->enqueue(std::function<void()>(std::forward<F>(f)));
  }

 private:
  struct FreeScratch {
    void operator()(void* p) const;
  };
  dnnl::stream m_dnnl;
  std::unique_ptr<void, FreeScratch> m_scratch;
  size_t m_scratch_bytes = 0;
  std::unique_ptr<StreamWorker> m_worker;  // destroyed (drained) before the registry forgets it
  std::shared_ptr<StreamRegistry> m_registry;
};

inline CpuStream& cpu_stream(nn::Stream& s) { return static_cast<CpuStream&>(s); }

// A CPU kernel's body, run through its stream.
template <class F>
void run_on(nn::Stream& s, F&& f) {
  cpu_stream(s).run(std::forward<F>(f));
}

// The last point recorded on an event (none yet, or recorded on an inline stream: complete,
// as an unrecorded cudaEvent_t). Recorded by one host thread while another may poll it:
// hence the lock.
class CpuEvent final : public nn::Event {
 public:
  void set(std::shared_ptr<StreamMarker> m);
  std::shared_ptr<StreamMarker> get() const;

 private:
  mutable std::mutex m_mutex;
  std::shared_ptr<StreamMarker> m_marker;
};

// The passes an object (a plan) has queued on asynchronous streams and that have not run
// yet: its destructor waits for them, so that a plan dropped while its work is queued
// outlives that work. Declare it as the plan's last member (destroyed first).
class QueuedWork {
 public:
  QueuedWork() = default;
  QueuedWork(const QueuedWork&) = delete;
  QueuedWork& operator=(const QueuedWork&) = delete;
  ~QueuedWork();
  // run_on(s, f), holding the owner alive until f has run (or been skipped after an error).
  template <class F>
  void run(nn::Stream& s, F&& f) {
    CpuStream& cs = cpu_stream(s);
    if (!cs.queues()) {
      f();
      return;
    }
    cs.run([ticket = ticket(), f = std::forward<F>(f)]() mutable { f(); });
  }

 private:
  struct Count {
    std::mutex mutex;
    std::condition_variable zero;
    int64_t pending = 0;
  };
  std::shared_ptr<void> ticket();
  std::shared_ptr<Count> m_count = std::make_shared<Count>();
};

}  // namespace squall::cpu
