// The learners of a group and their worker threads (src/parallel/replica_set.hpp).
#include "src/parallel/replica_set.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "src/core/error.hpp"

namespace squall::parallel {

// One worker thread per learner. run() hands task i to worker i and waits for all; the first
// exception is rethrown on the caller's thread after every task has finished, so no worker
// is left touching memory.
class ReplicaSet::Pool {
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

ReplicaSet::ReplicaSet(const LearnerSetup& setup, int threads, int learners, bool threaded)
    : m_setup(setup), m_threads(threads), m_pool(std::make_unique<Pool>()) {
  for (int j = 0; j < learners; ++j) {
    if (threaded) m_pool->resize(static_cast<size_t>(j + 1));
    m_learners.push_back(build(j));
  }
}

ReplicaSet::~ReplicaSet() {
  m_pool.reset();  // the workers end before the learners they drive
}

bool ReplicaSet::threaded() const { return m_pool->size() > 0; }

int ReplicaSet::threads_per_learner() const { return std::max(1, m_threads / std::max(1, size())); }

// Built on the thread that will run it, with its share of the cores: CPU kernels size their
// thread teams when their plans are made.
std::unique_ptr<Learner> ReplicaSet::build(int index) {
  std::unique_ptr<Learner> l;
  nn::Backend& backend = *m_setup.backend;
  auto make = [&] {
    backend.bind_calling_thread(threaded() ? threads_per_learner() : m_threads);  // (index learners so far)
    l = std::make_unique<Learner>(m_setup, index);
  };
  if (m_pool->size() > static_cast<size_t>(index)) {
    std::vector<std::function<void()>> tasks(static_cast<size_t>(index + 1), [] {});
    tasks[static_cast<size_t>(index)] = make;
    m_pool->run(tasks);
  } else {
    make();
  }
  return l;
}

std::vector<std::function<void()>> ReplicaSet::tasks_for(const std::function<void(Learner&)>& work) {
  const int threads = threads_per_learner();
  nn::Backend& backend = *m_setup.backend;
  std::vector<std::function<void()>> tasks;
  for (auto& l : m_learners) {
    Learner* raw = l.get();
    tasks.emplace_back([raw, threads, &work, &backend] {
      backend.bind_calling_thread(threads);
      work(*raw);
    });
  }
  return tasks;
}

void ReplicaSet::run(const std::function<void(Learner&)>& work) {
  if (!threaded()) {
    work(*m_learners[0]);
    return;
  }
  m_pool->run(tasks_for(work));
}

void ReplicaSet::start(const std::function<void(Learner&)>& work) { m_pool->start(tasks_for(work)); }
bool ReplicaSet::finished() { return m_pool->finished(); }
void ReplicaSet::wait() { m_pool->wait(); }

Learner& ReplicaSet::add() {
  const int index = size();
  if (!threaded()) m_pool->resize(1);  // learner 0 moves from the caller to a worker
  m_pool->resize(static_cast<size_t>(index + 1));
  m_learners.push_back(build(index));
  return *m_learners.back();
}

void ReplicaSet::remove() {
  if (size() <= 1) throw Error("learner group: cannot remove the last learner");
  m_learners.pop_back();
  m_pool->resize(static_cast<size_t>(size()));
}

}  // namespace squall::parallel
