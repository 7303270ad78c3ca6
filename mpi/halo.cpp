// Halo exchanges over a communicator (mpi/halo.hpp).
#include "mpi/halo.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::mpi {
namespace {

using Clock = std::chrono::steady_clock;

double halo_seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string halo_mpi_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// "halo receive from rank 1 (tag 37, 4096 bytes)"
std::string halo_message_text(const HaloMessage& m, bool receive) {
  return std::string(receive ? "halo receive from rank " : "halo send to rank ") + std::to_string(m.peer) + " (tag " +
         std::to_string(m.tag) + ", " + std::to_string(m.bytes) + " bytes)";
}

}  // namespace

// One exchange: its messages (receives first), their requests, and when it started and ended.
// Until `done`, the requests belong to whoever drives them (the progress thread, or the
// caller's thread without one); `done` and the fields the waiter reads are written before
// `done` is set under Impl::mutex.
struct HaloExchanger::Pending {
  std::vector<HaloMessage> messages;
  size_t receives = 0;
  std::vector<MPI_Request> requests;
  std::vector<char> finished;
  size_t left = 0;
  Clock::time_point started, completed;
  bool done = false;
  std::string error;  // the first failure
  double bytes_sent = 0, bytes_received = 0;

  bool is_receive(size_t i) const { return i < receives; }
  void fail(size_t i, const std::string& why) {
    if (error.empty()) error = halo_message_text(messages[i], is_receive(i)) + ": " + why;
  }
  // Request i has completed (rc: what the call that completed it returned).
  void settle(size_t i, int rc, const MPI_Status& status) {
    finished[i] = 1;
    --left;
    if (rc != MPI_SUCCESS) {
      int cls = rc;
      MPI_Error_class(rc, &cls);
      if (is_receive(i) && cls == MPI_ERR_TRUNCATE)
        fail(i, "the message is longer than the " + std::to_string(messages[i].bytes) + " bytes expected (" +
                    halo_mpi_text(rc) + ")");
      else
        fail(i, "MPI failed: " + halo_mpi_text(rc));
      // Open MPI frees a request that failed; a library that keeps it leaves it to us.
      if (requests[i] != MPI_REQUEST_NULL) MPI_Request_free(&requests[i]);
      requests[i] = MPI_REQUEST_NULL;
      return;
    }
    if (!is_receive(i)) return;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (static_cast<size_t>(count) != messages[i].bytes)
      fail(i, "the message carries " + std::to_string(count) + " bytes, the buffer expects " +
                  std::to_string(messages[i].bytes));
  }
  // Posts every request (receives first, so that a sender's eager data finds its buffer).
  void post(MPI_Comm comm) {
    requests.assign(messages.size(), MPI_REQUEST_NULL);
    finished.assign(messages.size(), 0);
    left = messages.size();
    for (size_t i = 0; i < messages.size(); ++i) {
      const HaloMessage& m = messages[i];
      const int count = static_cast<int>(m.bytes), tag = static_cast<int>(m.tag);
      const int rc = is_receive(i) ? MPI_Irecv(m.data, count, MPI_BYTE, m.peer, tag, comm, &requests[i])
                                   : MPI_Isend(m.data, count, MPI_BYTE, m.peer, tag, comm, &requests[i]);
      if (rc != MPI_SUCCESS) {
        fail(i, std::string(is_receive(i) ? "MPI_Irecv" : "MPI_Isend") + " failed: " + halo_mpi_text(rc));
        requests[i] = MPI_REQUEST_NULL;
        finished[i] = 1;
        --left;
      }
    }
  }
  // Tests every request still open once; whether all are complete.
  bool test() {
    for (size_t i = 0; i < requests.size() && left > 0; ++i) {
      if (finished[i]) continue;
      int flag = 0;
      MPI_Status status{};
      const int rc = MPI_Test(&requests[i], &flag, &status);
      if (rc != MPI_SUCCESS || flag) settle(i, rc, status);
    }
    return left == 0;
  }
  // Blocks until every request is complete (the caller's thread, without a progress thread).
  void complete() {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (finished[i]) continue;
      MPI_Status status{};
      const int rc = MPI_Wait(&requests[i], &status);
      settle(i, rc, status);
    }
  }
};

struct HaloExchanger::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int64_t tag_ub = 32767;  // the least MPI promises
  bool threaded = false;
  std::chrono::duration<double> poll{20e-6};

  mutable std::mutex mutex;
  std::condition_variable wake;      // the progress thread: new work, a waiter, stop
  std::condition_variable finished;  // the waiters: an exchange completed
  std::deque<std::shared_ptr<Pending>> incoming;  // started, not yet posted by the thread
  int64_t in_flight = 0;  // started and not yet done
  int waiters = 0;
  bool stop = false;
  HaloTotals totals;
  std::thread thread;
  // Without a progress thread: the exchanges not completed yet (the destructor completes them).
  std::vector<std::weak_ptr<Pending>> open;

  void loop();
  void run_loop() {
    try {
      loop();
    } catch (const std::exception& e) {
      fatal(std::string("halo progress thread: ") + e.what(), __FILE__, __LINE__);
    }
  }
  void mark_done(Pending& p) {
    std::lock_guard<std::mutex> lock(mutex);
    p.done = true;
    --in_flight;
    finished.notify_all();
  }
};

// The progress thread: posts what start() hands it, tests every exchange in flight, and marks
// each done (with the time) as its last request completes. Between rounds it sleeps `poll`
// unless a caller waits (then it only yields: the caller has nothing else to do) or new work
// arrives; with nothing in flight it sleeps until start() or the destructor wakes it.
void HaloExchanger::Impl::loop() {
  std::vector<std::shared_ptr<Pending>> active;
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    if (active.empty()) wake.wait(lock, [&] { return stop || !incoming.empty(); });
    if (active.empty() && incoming.empty() && stop) return;
    std::deque<std::shared_ptr<Pending>> fresh;
    fresh.swap(incoming);
    lock.unlock();
    for (auto& p : fresh) {
      p->post(comm);
      active.push_back(std::move(p));
    }
    for (size_t i = 0; i < active.size();) {
      Pending& p = *active[i];
      if (p.test()) {
        p.completed = Clock::now();
        mark_done(p);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    lock.lock();
    if (active.empty()) continue;
    if (waiters > 0) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    } else {
      wake.wait_for(lock, poll, [&] { return waiters > 0 || !incoming.empty(); });
    }
  }
}

HaloExchanger::HaloExchanger(const Communicator& comm, HaloOptions options) : m_impl(std::make_shared<Impl>()) {
  Impl& s = *m_impl;
  SQUALL_MPI_CHECK(MPI_Comm_dup(native_handle(comm), &s.comm));
  SQUALL_MPI_CHECK(MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN));
  SQUALL_MPI_CHECK(MPI_Comm_rank(s.comm, &s.rank));
  SQUALL_MPI_CHECK(MPI_Comm_size(s.comm, &s.size));
  int* ub = nullptr;
  int flag = 0;
  SQUALL_MPI_CHECK(MPI_Comm_get_attr(s.comm, MPI_TAG_UB, &ub, &flag));
  if (flag && ub != nullptr) s.tag_ub = *ub;
  int level = MPI_THREAD_SINGLE;
  SQUALL_MPI_CHECK(MPI_Query_thread(&level));
  // Below MPI_THREAD_MULTIPLE the thread's MPI calls could not run beside the caller's: the
  // caller's thread makes them all (mpi/halo.hpp, "Progress").
  s.threaded = options.progress_thread && level == MPI_THREAD_MULTIPLE;
  s.poll = std::chrono::duration<double>(std::max(0.0, options.poll_s));
  if (s.threaded) s.thread = std::thread([impl = m_impl.get()] { impl->run_loop(); });
}

HaloExchanger::~HaloExchanger() {
  Impl& s = *m_impl;
  if (s.threaded) {
    {
      std::unique_lock<std::mutex> lock(s.mutex);
      s.finished.wait(lock, [&] { return s.in_flight == 0; });
      s.stop = true;
    }
    s.wake.notify_all();
    s.thread.join();
  } else {
    for (auto& weak : s.open)
      if (auto p = weak.lock(); p && !p->done) {
        p->complete();
        p->completed = Clock::now();
        s.mark_done(*p);
      }
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&s.comm);  // destructors never throw or abort
}

int HaloExchanger::rank() const { return m_impl->rank; }
int HaloExchanger::size() const { return m_impl->size; }
bool HaloExchanger::threaded() const { return m_impl->threaded; }
int64_t HaloExchanger::max_tag() const { return m_impl->tag_ub; }

HaloExchanger::Exchange HaloExchanger::start(const std::vector<HaloMessage>& sends,
                                             const std::vector<HaloMessage>& receives) {
  Impl& s = *m_impl;
  auto p = std::make_shared<Pending>();
  p->messages = receives;
  p->messages.insert(p->messages.end(), sends.begin(), sends.end());
  p->receives = receives.size();
  for (size_t i = 0; i < p->messages.size(); ++i) {
    const HaloMessage& m = p->messages[i];
    const std::string what = halo_message_text(m, p->is_receive(i));
    if (m.peer < 0 || m.peer >= s.size)
      throw Error(what + ": rank " + std::to_string(m.peer) + " is outside the communicator of " +
                  std::to_string(s.size) + " ranks");
    if (m.tag < 0 || m.tag > s.tag_ub)
      throw Error(what + ": tag " + std::to_string(m.tag) + " is outside [0, " + std::to_string(s.tag_ub) +
                  "] (MPI_TAG_UB of this MPI library)");
    if (m.bytes > static_cast<size_t>(INT_MAX))
      throw Error(what + ": more bytes than one MPI message carries (" + std::to_string(INT_MAX) + ")");
    if (m.bytes > 0 && m.data == nullptr) throw Error(what + ": no buffer");
    (p->is_receive(i) ? p->bytes_received : p->bytes_sent) += static_cast<double>(m.bytes);
  }
  p->started = Clock::now();
  if (s.threaded) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.incoming.push_back(p);
      ++s.in_flight;
    }
    s.wake.notify_one();
  } else {
    p->post(s.comm);
    std::erase_if(s.open, [](const std::weak_ptr<Pending>& w) { return w.expired(); });
    s.open.push_back(p);
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.in_flight;
  }
  return Exchange(m_impl, std::move(p));
}

void HaloExchanger::gather(const double* mine, size_t n, double* all) {
  Impl& s = *m_impl;
  if (n > static_cast<size_t>(INT_MAX) / static_cast<size_t>(s.size))
    throw Error("halo gather of " + std::to_string(n) + " values over " + std::to_string(s.size) +
                " ranks: more than MPI's int counts hold");
  const int rc =
      MPI_Allgather(mine, static_cast<int>(n), MPI_DOUBLE, all, static_cast<int>(n), MPI_DOUBLE, s.comm);
  if (rc != MPI_SUCCESS)
    throw Error("halo gather of " + std::to_string(n) + " values over " + std::to_string(s.size) +
                " ranks: MPI_Allgather failed: " + halo_mpi_text(rc));
}

HaloTotals HaloExchanger::totals() const {
  std::lock_guard<std::mutex> lock(m_impl->mutex);
  return m_impl->totals;
}

HaloExchanger::Exchange::Exchange(std::shared_ptr<Impl> impl, std::shared_ptr<Pending> pending)
    : m_impl(std::move(impl)), m_pending(std::move(pending)) {}

HaloExchanger::Exchange::Exchange(Exchange&&) noexcept = default;

HaloExchanger::Exchange& HaloExchanger::Exchange::operator=(Exchange&& other) noexcept {
  if (this != &other) {
    finish(false);
    m_impl = std::move(other.m_impl);
    m_pending = std::move(other.m_pending);
  }
  return *this;
}

HaloExchanger::Exchange::~Exchange() { finish(false); }

void HaloExchanger::Exchange::wait() { finish(true); }

bool HaloExchanger::Exchange::ready() {
  if (!m_pending) return true;
  {
    std::lock_guard<std::mutex> lock(m_impl->mutex);
    if (m_pending->done || m_impl->threaded) return m_pending->done;
  }
  return m_pending->test();
}

void HaloExchanger::Exchange::finish(bool throwing) {
  if (!m_pending) return;
  const std::shared_ptr<Pending> p = std::move(m_pending);
  m_pending.reset();
  Impl& s = *m_impl;
  const Clock::time_point begin = Clock::now();
  if (s.threaded) {
    std::unique_lock<std::mutex> lock(s.mutex);
    if (!p->done) {
      ++s.waiters;
      s.wake.notify_one();
      s.finished.wait(lock, [&] { return p->done; });
      --s.waiters;
    }
  } else {
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      done = p->done;  // the exchanger's destructor completed it
    }
    if (!done) {
      // Without a thread nothing stamps the moment the messages arrived: an exchange counts as
      // hidden from its start to this wait, and as exposed for as long as the wait blocks.
      p->complete();
      p->completed = Clock::now();
      s.mark_done(*p);
    }
  }
  const Clock::time_point end = Clock::now();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.totals.exposed_s += halo_seconds(end - begin);
    s.totals.hidden_s += std::max(0.0, halo_seconds(std::min(p->completed, begin) - p->started));
    ++s.totals.exchanges;
    s.totals.bytes_sent += p->bytes_sent;
    s.totals.bytes_received += p->bytes_received;
  }
  m_impl.reset();
  if (p->error.empty()) return;
  if (throwing) throw Error(p->error);
  log::warn("an exchange dropped without a wait failed: " + p->error);
}

}  // namespace squall::mpi
