#pragma once
// Work a thread does for a loop while the loop computes (reading the next batch; predict also
// writing the finished files): start() hands it over, wait() takes its end and rethrows its
// error, and the destructor waits as well, so that a loop left by an exception leaves no thread
// using what the loop owns.
//
// One thread serves every start() of a ReadAhead, made at the first: a new thread per batch
// (std::async) would start with none of the memory the readers keep per thread (the DeepCAM
// reader's buffer of a raw sample is thread_local), and fault it in again at every batch.
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace squall::eval {

class ReadAhead {
 public:
  ReadAhead() = default;
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  ~ReadAhead() {
    if (!m_thread.joinable()) return;
    {
      std::unique_lock<std::mutex> lock(m_mutex);
      m_idle.wait(lock, [this] { return !m_busy; });
      m_stop = true;
    }
    m_queued.notify_one();
    m_thread.join();
  }

  // `work` runs on the thread; the work before it must have been waited for.
  template <class F>
  void start(F&& work) {
    if (!m_thread.joinable()) m_thread = std::thread([this] { serve(); });
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_work = std::forward<F>(work);
      m_busy = true;
    }
    m_queued.notify_one();
  }
  // Waits for the work started last (nothing when none is in flight); rethrows its error.
  void wait() {
    std::unique_lock<std::mutex> lock(m_mutex);
    m_idle.wait(lock, [this] { return !m_busy; });
    if (m_error) std::rethrow_exception(std::exchange(m_error, nullptr));
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(m_mutex);
    while (true) {
      m_queued.wait(lock, [this] { return m_busy || m_stop; });
      if (m_stop && !m_busy) return;
      std::function<void()> work = std::move(m_work);
      m_work = nullptr;
      lock.unlock();
      std::exception_ptr error;
      try {
        work();
      } catch (...) {
        error = std::current_exception();
      }
      work = nullptr;  // what it captured goes before the loop is told it is done
      lock.lock();
      m_error = error;
      m_busy = false;
      m_idle.notify_all();
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_queued, m_idle;
  std::function<void()> m_work;  // guarded by m_mutex
  bool m_busy = false;           // work handed over and not finished
  bool m_stop = false;
  std::exception_ptr m_error;    // the last work's, until wait() takes it
  std::thread m_thread;          // last: made at the first start()
};

}  // namespace squall::eval
