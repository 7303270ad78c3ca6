#pragma once
// The learner group's worker threads (src/train/learners.hpp), one per learner. Included by
// learners.cpp only: it defines the group's private nested class.
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "src/core/error.hpp"
#include "src/train/learners.hpp"

namespace squall::train {

// run() hands task i to worker i and waits for all; the first exception is rethrown on the
// caller's thread after every task has finished, so no worker is left touching memory.
class LearnerGroup::Pool {
 public:
  ~Pool() { resize(0); }

  size_t size() const { return m_workers.size(); }

  void resize(size_t n) {
    while (m_workers.size() > n) {
      {
        std::lock_guard lock(m_mutex);
        m_workers.back()->stop = true;
      }
      m_cv.notify_all();
      m_workers.back()->thread.join();
      m_workers.pop_back();
    }
    while (m_workers.size() < n) {
      auto w = std::make_unique<Worker>();
      Worker* raw = w.get();
      m_workers.push_back(std::move(w));
      raw->thread = std::thread([this, raw] { loop(*raw); });
    }
  }

  void run(const std::vector<std::function<void()>>& tasks) {
    start(tasks);
    wait();
  }

  // start() hands out the tasks and returns; wait() blocks until they are all done (the
  // caller may work in between: the SMA model sum overlaps the learners' passes).
  void start(const std::vector<std::function<void()>>& tasks) {
    SQUALL_CHECK(tasks.size() <= m_workers.size(), "learner pool: more tasks than workers");
    {
      std::lock_guard lock(m_mutex);
      SQUALL_CHECK(m_pending == 0, "learner pool: start() while tasks are running");
      for (size_t i = 0; i < tasks.size(); ++i) {
        m_workers[i]->task = tasks[i];
        m_workers[i]->error = nullptr;
      }
      m_pending = tasks.size();
      m_started = tasks.size();
    }
    m_cv.notify_all();
  }

  bool finished() {
    std::lock_guard lock(m_mutex);
    return m_pending == 0;
  }

  void wait() {
    std::unique_lock lock(m_mutex);
    m_done_cv.wait(lock, [&] { return m_pending == 0; });
    for (size_t i = 0; i < m_started; ++i)
      if (m_workers[i]->error) std::rethrow_exception(m_workers[i]->error);
  }

 private:
  struct Worker {
    std::thread thread;
    std::function<void()> task;
    std::exception_ptr error;
    bool stop = false;
  };

  void loop(Worker& w) {
    std::unique_lock lock(m_mutex);
    for (;;) {
      m_cv.wait(lock, [&] { return w.stop || w.task; });
      if (w.stop) return;
      auto task = std::move(w.task);
      w.task = nullptr;
      lock.unlock();
      std::exception_ptr error;
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      w.error = error;
      if (--m_pending == 0) m_done_cv.notify_all();
    }
  }

  std::vector<std::unique_ptr<Worker>> m_workers;
  std::mutex m_mutex;
  std::condition_variable m_cv, m_done_cv;
  size_t m_pending = 0, m_started = 0;
};

}  // namespace squall::train
