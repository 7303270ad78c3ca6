// The asynchronous centre's shards and its clients (mpi/async_centre.hpp).
#include "mpi/async_centre.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "src/core/clock.hpp"
#include "src/core/error.hpp"

namespace squall::mpi {
namespace {

constexpr int k_request = 1;  // client -> shard: a push, a finish
constexpr int k_reply = 2;    // shard -> client: the newest values of the shard

enum Kind : int64_t { push = 0, finish_push = 1, finish_only = 2, settle_push = 3 };

// Every message starts with this; a request's floats are the delta's slice, a reply's the
// shard's values.
struct Header {
  int64_t node = 0;        // request: the pushing node
  int64_t kind = 0;        // request: Kind
  int64_t outer_steps = 0;  // reply: the shard's outer steps when it answered
  int64_t staleness = 0;    // reply: the push's tau on this shard
  int64_t slowest = 0;      // reply: the fewest pushes of any node when it answered
  double lr = 0;            // request: the node's inner rate
};

// The looks for a push's answers made back to back before the leader sleeps between them.
constexpr int k_quick_looks = 32;

}  // namespace

size_t async_shard_first(size_t n, int shards, int s) {
  return n * static_cast<size_t>(s) / static_cast<size_t>(shards);
}

int64_t async_staleness(int64_t since, int nodes) {
  const int64_t beyond = since - (nodes - 1);
  return beyond > 0 ? (beyond + nodes - 1) / nodes : 0;
}

struct AsyncCentre::Impl {
  Communicator leaders;  // collectives of the callers
  Communicator wire;     // a duplicate: requests and replies only
  AsyncCentreOptions options;
  size_t n = 0;
  int nodes = 1, node = 0;
  std::vector<double> shares;  // per node
  std::vector<float> base;     // the centre this node last took (whole)

  // This rank's shard, owned by its thread (the mutex for state() and restore()).
  std::mutex mutex;
  size_t lo = 0, hi = 0;
  std::vector<float> x, b, acc;
  int64_t steps = 0, arrivals = 0, finals = 0;
  std::vector<int64_t> pushes;
  int64_t total = 0;                // pushes applied, every node's
  std::vector<int64_t> base_pushes;  // per node: `total` when it last took the centre
  int64_t staleness(int64_t since) const { return async_staleness(since, nodes); }
  struct Pending {
    int node;
    int64_t need;  // the pushes every node must have made (-1: none)
    bool final;
    int64_t staleness;
  };
  std::vector<Pending> pending;
  std::atomic<bool> stop{false};
  std::atomic<double> serve_cpu{0};  // the thread's CPU seconds, as it last measured them
  std::thread thread;
  std::string failure;  // the thread's error, reported by the next call

  void serve();
  void handle(int source, std::vector<char>& message);
  void answer_ready();
  PushResult exchange(const float* model, float lr, float* centre_out, Kind kind);
};

void AsyncCentre::Impl::serve() {
  const MPI_Comm comm = native_handle(wire);
  std::vector<char> message;
  const auto sleep = std::chrono::duration<double>(options.poll_s);
  try {
    while (!stop.load(std::memory_order_relaxed)) {
      int flag = 0;
      MPI_Status st;
      SQUALL_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, k_request, comm, &flag, &st));
      if (!flag) {
        std::this_thread::sleep_for(sleep);
        continue;
      }
      int bytes = 0;
      SQUALL_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &bytes));
      message.resize(static_cast<size_t>(bytes));
      SQUALL_MPI_CHECK(MPI_Recv(message.data(), bytes, MPI_BYTE, st.MPI_SOURCE, k_request, comm, MPI_STATUS_IGNORE));
      std::lock_guard<std::mutex> lock(mutex);
      handle(st.MPI_SOURCE, message);
      answer_ready();
      serve_cpu.store(thread_cpu_seconds(), std::memory_order_relaxed);
      // Every node has finished and been answered: nothing more will come.
      if (finals == nodes && pending.empty()) return;
    }
    serve_cpu.store(thread_cpu_seconds(), std::memory_order_relaxed);
  } catch (const std::exception& e) {
    fatal(std::string("asynchronous centre, shard ") + std::to_string(node) + ": " + e.what(), __FILE__, __LINE__);
  }
}

void AsyncCentre::Impl::handle(int source, std::vector<char>& message) {
  Header h;
  if (message.size() < sizeof(h)) throw Error("a request of " + std::to_string(message.size()) + " bytes from node " + std::to_string(source));
  std::memcpy(&h, message.data(), sizeof(h));
  const int k = static_cast<int>(h.node);
  if (k != source || k < 0 || k >= nodes) throw Error("a request of node " + std::to_string(h.node) + " from rank " + std::to_string(source));
  int64_t tau = 0;
  if (h.kind == push || h.kind == finish_push || h.kind == settle_push) {
    const size_t count = hi - lo;
    if (message.size() != sizeof(h) + count * sizeof(float))
      throw Error("a push of node " + std::to_string(k) + " carries " + std::to_string(message.size() - sizeof(h)) +
                  " bytes, the shard holds " + std::to_string(count) + " floats");
    const float* d = reinterpret_cast<const float*>(message.data() + sizeof(h));
    tau = staleness(total - base_pushes[static_cast<size_t>(k)]);
    const double w = 1.0 / (1.0 + static_cast<double>(tau));
    const auto step = static_cast<float>(options.lr * w * shares[static_cast<size_t>(k)]);
    const auto into = static_cast<float>(h.lr > 0 ? w * shares[static_cast<size_t>(k)] / h.lr : 0.0);
    for (size_t i = 0; i < count; ++i) {
      x[i] -= step * d[i];
      acc[i] += into * d[i];
    }
    ++pushes[static_cast<size_t>(k)];
    ++total;
    if (++arrivals == nodes) {  // one outer step: the momentum, delayed to it
      arrivals = 0;
      ++steps;
      const auto mu = static_cast<float>(options.momentum);
      if (mu != 0) {
        const auto scale = static_cast<float>(options.lr * options.momentum * h.lr);
        for (size_t i = 0; i < count; ++i) {
          const float before = b[i];
          b[i] = mu * b[i] + acc[i];
          x[i] -= scale * (options.nesterov ? b[i] : before);
        }
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
    }
  }
  const bool final = h.kind == finish_push || h.kind == finish_only;
  if (final) ++finals;
  // A settling push waits for every node's as many pushes (a bound of 0 for it alone).
  const int64_t need = h.kind == settle_push          ? pushes[static_cast<size_t>(k)]
                       : options.max_staleness >= 0 ? pushes[static_cast<size_t>(k)] - options.max_staleness
                                                    : -1;
  pending.push_back({k, need, final, tau});
}

void AsyncCentre::Impl::answer_ready() {
  const MPI_Comm comm = native_handle(wire);
  const int64_t slowest = *std::min_element(pushes.begin(), pushes.end());
  std::vector<char> reply(sizeof(Header) + (hi - lo) * sizeof(float));
  std::memcpy(reply.data() + sizeof(Header), x.data(), (hi - lo) * sizeof(float));
  std::vector<Pending> waiting;
  for (const Pending& p : pending) {
    const bool ready = p.final ? finals == nodes : (p.need < 0 || slowest >= p.need);
    if (!ready) {
      waiting.push_back(p);
      continue;
    }
    Header h;
    h.node = p.node;
    h.outer_steps = steps;
    h.staleness = p.staleness;
    h.slowest = slowest;
    std::memcpy(reply.data(), &h, sizeof(h));
    base_pushes[static_cast<size_t>(p.node)] = total;
    // The client posted its receive before its request: a send that completes.
    SQUALL_MPI_CHECK(MPI_Send(reply.data(), static_cast<int>(reply.size()), MPI_BYTE, p.node, k_reply, comm));
  }
  pending = std::move(waiting);
}

PushResult AsyncCentre::Impl::exchange(const float* model, float lr, float* centre_out, Kind kind) {
  const MPI_Comm comm = native_handle(wire);
  const double t0 = steady_seconds(), cpu0 = thread_cpu_seconds();
  std::vector<std::vector<char>> requests(static_cast<size_t>(nodes)), replies(static_cast<size_t>(nodes));
  std::vector<MPI_Request> handles;
  handles.reserve(2 * static_cast<size_t>(nodes));
  for (int s = 0; s < nodes; ++s) {
    const size_t a = async_shard_first(n, nodes, s), z = async_shard_first(n, nodes, s + 1);
    replies[static_cast<size_t>(s)].resize(sizeof(Header) + (z - a) * sizeof(float));
    handles.emplace_back();
    SQUALL_MPI_CHECK(MPI_Irecv(replies[static_cast<size_t>(s)].data(), static_cast<int>(replies[static_cast<size_t>(s)].size()),
                               MPI_BYTE, s, k_reply, comm, &handles.back()));
  }
  for (int s = 0; s < nodes; ++s) {
    const size_t a = async_shard_first(n, nodes, s), z = async_shard_first(n, nodes, s + 1);
    const bool with_delta = kind != finish_only;
    std::vector<char>& m = requests[static_cast<size_t>(s)];
    m.resize(sizeof(Header) + (with_delta ? (z - a) * sizeof(float) : 0));
    Header h;
    h.node = node;
    h.kind = kind;
    h.lr = lr;
    std::memcpy(m.data(), &h, sizeof(h));
    if (with_delta) {
      auto* d = reinterpret_cast<float*>(m.data() + sizeof(h));
      for (size_t i = a; i < z; ++i) d[i - a] = base[i] - model[i];
    }
    handles.emplace_back();
    SQUALL_MPI_CHECK(MPI_Isend(m.data(), static_cast<int>(m.size()), MPI_BYTE, s, k_request, comm, &handles.back()));
  }
  // Tests the answers until they have all come: a few looks back to back (an answer on one box
  // comes in microseconds), then sleeps that double from 50 us to 500 us between looks. A look
  // costs the leader's CPU, which on a node held to a CPU quota is the quota its learners train
  // on: looking back to back for the first thousand looks of a 25 ms wait took 1.7 ms of CPU a
  // push (bench/RESULTS.md, "A paced run trains its samples"); a sleep adds at most 500 us to a
  // wait. Past the stall limit the job ends, naming the shards still silent.
  std::chrono::microseconds nap(50);
  for (int idle = 0;; ++idle) {
    int done = 0;
    SQUALL_MPI_CHECK(MPI_Testall(static_cast<int>(handles.size()), handles.data(), &done, MPI_STATUSES_IGNORE));
    if (done) break;
    const double waited = steady_seconds() - t0;
    if (options.stall_abort_s > 0 && waited > options.stall_abort_s) {
      std::string silent;
      for (int s = 0; s < nodes; ++s) {
        int answered = 0;
        SQUALL_MPI_CHECK(MPI_Test(&handles[static_cast<size_t>(s)], &answered, MPI_STATUS_IGNORE));
        if (!answered) silent += (silent.empty() ? "" : ", ") + std::to_string(s);
      }
      fatal("asynchronous outer steps: node " + std::to_string(node) + " has waited " +
                std::to_string(static_cast<int64_t>(waited)) + " s (the stall limit) for the centre's shards on " +
                "node(s) " + silent + (kind == push ? "" : ", which answer once every node has pushed") +
                ": a node has stopped, or its leader has",
            __FILE__, __LINE__);
    }
    if (idle < k_quick_looks) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(2 * nap, std::chrono::microseconds(500));
    }
  }
  PushResult r;
  r.outer_steps = INT64_MAX;
  r.slowest_pushes = INT64_MAX;
  for (int s = 0; s < nodes; ++s) {
    const size_t a = async_shard_first(n, nodes, s), z = async_shard_first(n, nodes, s + 1);
    Header h;
    std::memcpy(&h, replies[static_cast<size_t>(s)].data(), sizeof(h));
    r.staleness = std::max(r.staleness, h.staleness);
    r.outer_steps = std::min(r.outer_steps, h.outer_steps);
    r.slowest_pushes = std::min(r.slowest_pushes, h.slowest);
    std::memcpy(base.data() + a, replies[static_cast<size_t>(s)].data() + sizeof(Header), (z - a) * sizeof(float));
  }
  if (centre_out != nullptr) std::copy(base.begin(), base.end(), centre_out);
  r.waited_s = steady_seconds() - t0;
  r.waited_cpu_s = thread_cpu_seconds() - cpu0;
  return r;
}

AsyncCentre::AsyncCentre(const Communicator& leaders, const float* initial, size_t n, double share,
                         AsyncCentreOptions options)
    : m_impl(std::make_unique<Impl>()) {
  Impl& m = *m_impl;
  m.leaders = leaders.split(0, leaders.rank());
  m.wire = leaders.split(0, leaders.rank());
  m.options = options;
  m.n = n;
  m.nodes = leaders.size();
  m.node = leaders.rank();
  std::vector<double> all(static_cast<size_t>(m.nodes), 0.0);
  all[static_cast<size_t>(m.node)] = share;
  m.leaders.allreduce_sum(std::span<double>(all));
  m.shares = all;
  m.base.assign(initial, initial + n);
  m.lo = async_shard_first(n, m.nodes, m.node);
  m.hi = async_shard_first(n, m.nodes, m.node + 1);
  m.x.assign(initial + m.lo, initial + m.hi);
  m.b.assign(m.hi - m.lo, 0.0f);
  m.acc.assign(m.hi - m.lo, 0.0f);
  m.pushes.assign(static_cast<size_t>(m.nodes), 0);
  m.base_pushes.assign(static_cast<size_t>(m.nodes), 0);
  m.thread = std::thread([&m] { m.serve(); });
}

AsyncCentre::~AsyncCentre() {
  m_impl->stop.store(true);
  if (m_impl->thread.joinable()) m_impl->thread.join();
}

int AsyncCentre::nodes() const { return m_impl->nodes; }
int AsyncCentre::node() const { return m_impl->node; }
size_t AsyncCentre::size() const { return m_impl->n; }

PushResult AsyncCentre::push_pull(const float* model, float lr, float* centre_out) {
  return m_impl->exchange(model, lr, centre_out, push);
}

PushResult AsyncCentre::settle(const float* model, float lr, float* centre_out) {
  return m_impl->exchange(model, lr, centre_out, settle_push);
}

PushResult AsyncCentre::finish(const float* model, float lr, float* centre_out) {
  const PushResult r = m_impl->exchange(model, lr, centre_out, model != nullptr ? finish_push : finish_only);
  // Every shard has answered every node's finish: the threads end by themselves.
  if (m_impl->thread.joinable()) m_impl->thread.join();
  return r;
}

AsyncCentreState AsyncCentre::state() {
  Impl& m = *m_impl;
  m.leaders.barrier();  // every node's pushes answered: the shards are quiet
  AsyncCentreState s;
  std::vector<float> mine;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    s.outer_steps = m.steps;
    s.arrivals = m.arrivals;
    s.pushes = m.pushes;
    for (const auto* v : {&m.x, &m.b, &m.acc}) mine.insert(mine.end(), v->begin(), v->end());
  }
  // Every shard's three arrays, gathered in node order.
  const std::vector<std::string> parts = m.leaders.gather_strings(
      std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(float)), 0);
  std::string whole;
  for (const std::string& p : parts) whole += p;
  whole = m.leaders.broadcast_string(whole, 0);
  s.centre.resize(m.n);
  s.momentum.resize(m.n);
  s.accumulated.resize(m.n);
  size_t at = 0;
  for (int shard = 0; shard < m.nodes; ++shard) {
    const size_t a = async_shard_first(m.n, m.nodes, shard), z = async_shard_first(m.n, m.nodes, shard + 1);
    for (auto* v : {&s.centre, &s.momentum, &s.accumulated})
      for (size_t i = a; i < z; ++i) {
        std::memcpy(&(*v)[i], whole.data() + at, sizeof(float));
        at += sizeof(float);
      }
  }
  return s;
}

double AsyncCentre::serve_cpu_seconds() const { return m_impl->serve_cpu.load(std::memory_order_relaxed); }

void AsyncCentre::restore(const AsyncCentreState& s) {
  Impl& m = *m_impl;
  if (s.centre.size() != m.n || s.momentum.size() != m.n || s.accumulated.size() != m.n)
    throw Error("asynchronous centre: a state of " + std::to_string(s.centre.size()) + " values for a centre of " +
                std::to_string(m.n));
  if (s.pushes.size() != static_cast<size_t>(m.nodes))
    throw Error("asynchronous centre: a state of " + std::to_string(s.pushes.size()) + " nodes for a job of " +
                std::to_string(m.nodes));
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.x.assign(s.centre.begin() + static_cast<std::ptrdiff_t>(m.lo), s.centre.begin() + static_cast<std::ptrdiff_t>(m.hi));
    m.b.assign(s.momentum.begin() + static_cast<std::ptrdiff_t>(m.lo), s.momentum.begin() + static_cast<std::ptrdiff_t>(m.hi));
    m.acc.assign(s.accumulated.begin() + static_cast<std::ptrdiff_t>(m.lo),
                 s.accumulated.begin() + static_cast<std::ptrdiff_t>(m.hi));
    m.steps = s.outer_steps;
    m.arrivals = s.arrivals;
    m.pushes = s.pushes;
    m.total = 0;
    for (const int64_t p : s.pushes) m.total += p;
    // Every node starts again from the restored centre.
    m.base_pushes.assign(static_cast<size_t>(m.nodes), m.total);
  }
  m.base = s.centre;
  m.leaders.barrier();  // no node pushes before every shard holds the state
}

}  // namespace squall::mpi
