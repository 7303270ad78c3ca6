#pragma once
// The learners of a group and the threads that drive them (docs/design.md, "The learner
// group"). On the CPU backend each learner runs on a worker thread of its own with a share
// of the group's cores; a lone learner of a one-rank job runs on the caller's thread.
#include <functional>
#include <memory>
#include <vector>

#include "src/parallel/learner.hpp"

namespace squall::parallel {

class ReplicaSet {
 public:
  // `learners` replicas built from `setup`; threads: compute threads for the whole set;
  // threaded: worker threads even for one learner (a job of several ranks: the caller's
  // thread then drives the allreduce while the learners compute).
  ReplicaSet(const LearnerSetup& setup, int threads, int learners, bool threaded);
  ~ReplicaSet();
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;

  int size() const { return static_cast<int>(m_learners.size()); }
  Learner& operator[](int j) { return *m_learners[static_cast<size_t>(j)]; }
  const Learner& operator[](int j) const { return *m_learners[static_cast<size_t>(j)]; }
  auto begin() const { return m_learners.begin(); }
  auto end() const { return m_learners.end(); }
  bool threaded() const;

  // `work` on every learner, each on its own thread (or the caller's), then waits; the
  // first exception is rethrown after every learner has finished.
  void run(const std::function<void(Learner&)>& work);
  // start() hands the work out and returns (`work` must outlive wait()); finished() says
  // whether every learner is done; wait() blocks until they are and rethrows.
  void start(const std::function<void(Learner&)>& work);
  bool finished();
  void wait();

  // The auto-tuner: one more learner (built on its own worker thread), or one less.
  Learner& add();
  void remove();

 private:
  class Pool;
  int threads_per_learner() const;
  std::vector<std::function<void()>> tasks_for(const std::function<void(Learner&)>& work);
  std::unique_ptr<Learner> build(int index);

  const LearnerSetup& m_setup;
  int m_threads;
  std::unique_ptr<Pool> m_pool;
  std::vector<std::unique_ptr<Learner>> m_learners;
};

}  // namespace squall::parallel
