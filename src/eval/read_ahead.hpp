#pragma once
// Work a thread does for a loop while the loop computes (reading the next batch; predict also
// writing the finished files): start() hands it over, wait() takes its end and rethrows its
// error, and the destructor waits as well, so that a loop left by an exception leaves no thread
// using what the loop owns.
#include <future>
#include <utility>

namespace squall::eval {

class ReadAhead {
 public:
  ReadAhead() = default;
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  ~ReadAhead() {
    if (m_work.valid()) m_work.wait();
  }

  // `work` runs on its own thread; the work before it must have been waited for.
  template <class F>
  void start(F&& work) {
    m_work = std::async(std::launch::async, std::forward<F>(work));
  }
  // Waits for the work started last (nothing when none is in flight); rethrows its error.
  void wait() {
    if (m_work.valid()) m_work.get();
  }

 private:
  std::future<void> m_work;
};

}  // namespace squall::eval
