#include "mpi/allreduce.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "mpi/stall.hpp"
#include "mpi/topology.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// One MPI call moves at most this many elements (MPI counts are int).
constexpr size_t k_max_call_elements = size_t{1} << 30;

MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

double clock_seconds(Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

// Waiting on MPI_Test without taking a core from the ranks that share it: spin for a few
// microseconds (a stage often ends that soon), then yield, then sleep in small steps once the
// wait is long (a late rank, not a slow transfer).
class Waiter {
 public:
  void progressed() { m_waiting = false; }
  void idle() {
    const auto now = Clock::now();
    if (!m_waiting) {
      m_waiting = true;
      m_since = now;
      return;
    }
    const double waited = std::chrono::duration<double>(now - m_since).count();
    if (waited < 20e-6) return;
    if (waited < 10e-3)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(waited < 1.0 ? 100 : 1000));
  }

 private:
  bool m_waiting = false;
  Clock::time_point m_since;
};

// Pipeline stages in the order a chunk goes through them.
enum Stage { k_reduce_scatter = 0, k_cross = 1, k_allgather = 2, k_done = 3 };

constexpr std::array<Level, 3> k_stage_level = {Level::node_reduce_scatter, Level::cross_allreduce,
                                                Level::node_allgather};

// One chunk of the buffer on its way through the stages.
struct Chunk {
  size_t offset = 0, count = 0;         // elements of the caller's buffer
  int stage = k_done;                   // current stage (active) or next one to issue
  bool active = false;                  // requests of `stage` are in flight
  Clock::time_point begin;              // when `stage` was issued
  std::vector<MPI_Request> requests;
  std::vector<int> counts, displs;      // per local rank: its shard of the chunk (node stages)
  std::byte* shard = nullptr;           // this rank's shard: scratch, or the buffer itself
  size_t shard_count = 0;
};

}  // namespace

size_t dtype_size(DType type) {
  switch (type) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType type) {
  switch (type) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

const char* level_name(Level level) {
  switch (level) {
    case Level::node_reduce_scatter: return "node_reduce_scatter";
    case Level::cross_allreduce: return "cross_allreduce";
    case Level::node_allgather: return "node_allgather";
    case Level::flat_allreduce: return "allreduce";
  }
  return "?";
}

void plain_allreduce_sum(const Communicator& comm, void* data, size_t count, DType type) {
  auto* bytes = static_cast<std::byte*>(data);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(count - done, k_max_call_elements);
    SQUALL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * dtype_size(type), static_cast<int>(n),
                                   mpi_type(type), MPI_SUM, native_handle(comm)));
    done += n;
  }
}

struct HierAllreduce::Impl {
  enum class Mode { none, flat, pipeline };

  AllreduceOptions options;
  Mode mode = Mode::none;
  StallWatch watch;
  LevelHook hook;

  int local_rank = 0, local_size = 1, nodes = 1;
  MPI_Comm flat = MPI_COMM_NULL, gate = MPI_COMM_NULL;  // flat mode: the sum, and the arrival barrier
  MPI_Comm rs = MPI_COMM_NULL, ag = MPI_COMM_NULL;      // node stages, one communicator each
  // Part p of every chunk is summed across nodes on parts[p - part_lo], among the ranks that
  // own it (one per node). This rank owns parts [part_lo, part_hi) of the P in a chunk.
  int P = 0, part_lo = 0, part_hi = 0;
  std::vector<MPI_Comm> parts;

  std::vector<Chunk> slots;                 // chunk c lives in slots[c % slots.size()]
  std::vector<std::vector<std::byte>> scratch;

  double total_s = 0;
  std::array<double, k_levels> level_s{};
  int64_t calls = 0;

  Impl(const Topology& topo, const AllreduceOptions& o) : options(o), watch(topo, o.stall_warn_s, o.stall_abort_s) {}

  bool node_stages() const { return local_size > 1; }
  bool cross_stage() const { return nodes > 1; }

  // First element of part p in a chunk of n elements: P balanced parts.
  size_t part_begin(int p, size_t n) const { return static_cast<size_t>(p) * n / static_cast<size_t>(P); }

  int next_stage(int stage) const {
    for (int s = stage + 1; s < k_done; ++s) {
      if ((s == k_reduce_scatter || s == k_allgather) && !node_stages()) continue;
      if (s == k_cross && !cross_stage()) continue;
      return s;
    }
    return k_done;
  }

  void report(Level level, Clock::time_point begin, Clock::time_point end, size_t bytes) {
    level_s[static_cast<size_t>(level)] += std::chrono::duration<double>(end - begin).count();
    if (hook) hook(level_name(level), clock_seconds(begin), clock_seconds(end), bytes);
  }

  // Tests `request` until it completes, keeping the watchdog awake.
  void wait(MPI_Request& request) {
    Waiter waiter;
    for (;;) {
      int done = 0;
      SQUALL_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done) return;
      watch.poll();
      waiter.idle();
    }
  }

  void sum_flat(std::byte* data, size_t count, DType type) {
    // The nonblocking barrier is where a missing rank is waited for, under the watchdog; the
    // blocking allreduce after it uses the library's fastest algorithm.
    MPI_Request request = MPI_REQUEST_NULL;
    SQUALL_MPI_CHECK(MPI_Ibarrier(gate, &request));
    wait(request);
    // In pieces: for a buffer of 32 MiB or more Open MPI 4.1 takes a temporary buffer as large
    // from malloc, which glibc then maps afresh on every call (its mmap threshold stops
    // growing at 32 MiB), and faulting those pages in made one 64 MiB sum ten times slower
    // than four 16 MiB ones here (bench/RESULTS.md).
    const size_t esize = dtype_size(type);
    const size_t chunk = std::clamp(options.flat_chunk_bytes / esize, size_t{1}, k_max_call_elements);
    for (size_t done = 0; done < count;) {
      const size_t n = std::min(count - done, chunk);
      const auto begin = Clock::now();
      SQUALL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + done * esize, static_cast<int>(n), mpi_type(type),
                                     MPI_SUM, flat));
      report(Level::flat_allreduce, begin, Clock::now(), n * esize);
      done += n;
    }
  }

  void start_chunk(Chunk& k, std::byte* data, size_t offset, size_t count, size_t esize, size_t slot) {
    k.offset = offset;
    k.count = count;
    k.active = false;
    k.stage = next_stage(-1);
    if (node_stages()) {
      k.counts.resize(static_cast<size_t>(local_size));
      k.displs.resize(static_cast<size_t>(local_size));
      for (int j = 0; j < local_size; ++j) {
        const size_t lo = part_begin(j * P / local_size, count), hi = part_begin((j + 1) * P / local_size, count);
        k.counts[static_cast<size_t>(j)] = static_cast<int>(hi - lo);
        k.displs[static_cast<size_t>(j)] = static_cast<int>(lo);
      }
      k.shard = scratch[slot].data();
      k.shard_count = static_cast<size_t>(k.counts[static_cast<size_t>(local_rank)]);
    } else {
      k.shard = data + offset * esize;
      k.shard_count = count;
    }
  }

  void issue(Chunk& k, std::byte* data, DType type) {
    const MPI_Datatype t = mpi_type(type);
    const size_t esize = dtype_size(type);
    std::byte* chunk = data + k.offset * esize;
    k.requests.clear();
    k.begin = Clock::now();
    switch (k.stage) {
      case k_reduce_scatter:
        k.requests.emplace_back();
        SQUALL_MPI_CHECK(MPI_Ireduce_scatter(chunk, k.shard, k.counts.data(), t, MPI_SUM, rs, &k.requests.back()));
        break;
      case k_cross: {
        const size_t base = part_begin(part_lo, k.count);
        for (int p = part_lo; p < part_hi; ++p) {
          const size_t lo = part_begin(p, k.count), n = part_begin(p + 1, k.count) - lo;
          if (n == 0) continue;  // every owner of the part sees the same empty part
          k.requests.emplace_back();
          SQUALL_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, k.shard + (lo - base) * esize, static_cast<int>(n), t,
                                          MPI_SUM, parts[static_cast<size_t>(p - part_lo)], &k.requests.back()));
        }
        break;
      }
      case k_allgather:
        k.requests.emplace_back();
        SQUALL_MPI_CHECK(MPI_Iallgatherv(k.shard, static_cast<int>(k.shard_count), t, chunk, k.counts.data(),
                                         k.displs.data(), t, ag, &k.requests.back()));
        break;
    }
    k.active = true;
  }

  // Chunks enter in order, at most max_inflight at once. Each stage has its own
  // communicator and is issued strictly in chunk order on every rank, which is what MPI
  // requires of nonblocking collectives sharing a communicator; different stages (and so
  // different levels) of different chunks run at the same time.
  void sum_pipeline(std::byte* data, size_t count, DType type) {
    const size_t esize = dtype_size(type);
    const size_t chunk = std::clamp(options.chunk_bytes / esize, size_t{1}, k_max_call_elements);
    const size_t chunks = (count + chunk - 1) / chunk;
    const size_t inflight = std::min(static_cast<size_t>(options.max_inflight), chunks);
    if (slots.size() < inflight) slots.resize(inflight);
    if (node_stages()) {
      // A shard holds at most (its parts) * chunk / P elements, plus one for the rounding.
      const size_t shard_max = static_cast<size_t>(part_hi - part_lo) * chunk / static_cast<size_t>(P) + 1;
      if (scratch.size() < slots.size()) scratch.resize(slots.size());
      for (auto& s : scratch)
        if (s.size() < shard_max * esize) s.resize(shard_max * esize);
    }
    const size_t nslots = slots.size();

    std::array<size_t, 3> next_issue{};  // per stage: the chunk whose turn it is
    size_t admitted = 0, retired = 0;
    Waiter waiter;
    while (retired < chunks) {
      bool progress = false;
      for (; admitted < chunks && admitted < retired + inflight; ++admitted, progress = true)
        start_chunk(slots[admitted % nslots], data, admitted * chunk, std::min(chunk, count - admitted * chunk),
                    esize, admitted % nslots);
      for (size_t c = retired; c < admitted; ++c) {
        Chunk& k = slots[c % nslots];
        if (k.active) {
          int done = 0;
          SQUALL_MPI_CHECK(MPI_Testall(static_cast<int>(k.requests.size()), k.requests.data(), &done,
                                       MPI_STATUSES_IGNORE));
          if (!done) continue;
          const size_t bytes = (k.stage == k_cross ? k.shard_count : k.count) * esize;
          report(k_stage_level[static_cast<size_t>(k.stage)], k.begin, Clock::now(), bytes);
          k.active = false;
          k.stage = next_stage(k.stage);
          progress = true;
        }
        if (k.stage != k_done && next_issue[static_cast<size_t>(k.stage)] == c) {
          ++next_issue[static_cast<size_t>(k.stage)];
          issue(k, data, type);
          progress = true;
        }
      }
      while (retired < admitted && slots[retired % nslots].stage == k_done) ++retired;
      watch.poll();
      if (progress)
        waiter.progressed();
      else
        waiter.idle();
    }
  }
};

HierAllreduce::HierAllreduce(const Topology& topo, AllreduceOptions options) {
  if (options.chunk_bytes == 0 || options.flat_chunk_bytes == 0 || options.max_inflight < 1 || options.max_parts < 1 ||
      !(options.stall_warn_s > 0) || !(options.stall_abort_s > 0))
    throw Error("allreduce options: the chunk sizes, max_inflight, max_parts and the stall times must be positive");
  m_impl = std::make_unique<Impl>(topo, options);
  Impl& s = *m_impl;
  s.local_rank = topo.local_rank();
  s.local_size = topo.local_size();
  s.nodes = topo.nodes();
  MPI_Comm world = native_handle(topo.world());

  // P: the smallest number of parts every node size divides, so that each part has one owner
  // per node. With equal node sizes P is that size and the owners of part p are the cross
  // communicator of local rank p.
  const std::vector<int> sizes = topo.world().allgather(topo.local_size());
  const std::set<int> distinct(sizes.begin(), sizes.end());
  int64_t lcm = 1;
  for (int k : distinct) lcm = std::min<int64_t>(std::lcm(lcm, int64_t{k}), int64_t{INT_MAX});
  const bool single_level = s.nodes == 1 || *distinct.rbegin() == 1;

  if (topo.world_size() == 1) {
    s.mode = Impl::Mode::none;
  } else if ((single_level && options.flat_single_level) || lcm > options.max_parts) {
    if (!single_level) {
      std::string list;
      for (int k : distinct) list += (list.empty() ? "" : ", ") + std::to_string(k);
      log::info("allreduce: nodes of " + list + " ranks need " + std::to_string(lcm) +
                " parts per chunk (more than " + std::to_string(options.max_parts) +
                "); summing with one MPI_Allreduce over the job instead");
    }
    s.mode = Impl::Mode::flat;
    SQUALL_MPI_CHECK(MPI_Comm_dup(world, &s.flat));
    SQUALL_MPI_CHECK(MPI_Comm_dup(world, &s.gate));
  } else {
    s.mode = Impl::Mode::pipeline;
    s.P = static_cast<int>(lcm);
    s.part_lo = s.local_rank * s.P / s.local_size;
    s.part_hi = (s.local_rank + 1) * s.P / s.local_size;
    if (s.node_stages()) {
      SQUALL_MPI_CHECK(MPI_Comm_dup(native_handle(topo.node_comm()), &s.rs));
      SQUALL_MPI_CHECK(MPI_Comm_dup(native_handle(topo.node_comm()), &s.ag));
    }
    if (s.cross_stage()) {
      if (distinct.size() == 1) {
        s.parts.resize(1);
        SQUALL_MPI_CHECK(MPI_Comm_dup(native_handle(topo.cross_comm()), &s.parts[0]));
      } else {
        s.parts.resize(static_cast<size_t>(s.part_hi - s.part_lo));
        for (int p = 0; p < s.P; ++p) {
          const bool mine = p >= s.part_lo && p < s.part_hi;
          MPI_Comm comm = MPI_COMM_NULL;
          SQUALL_MPI_CHECK(MPI_Comm_split(world, mine ? 0 : MPI_UNDEFINED, topo.rank(), &comm));
          if (mine) s.parts[static_cast<size_t>(p - s.part_lo)] = comm;
        }
      }
    }
  }
  for (MPI_Comm c : {s.flat, s.gate, s.rs, s.ag})
    if (c != MPI_COMM_NULL) SQUALL_MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
  for (MPI_Comm c : s.parts) SQUALL_MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
}

HierAllreduce::~HierAllreduce() {
  Impl& s = *m_impl;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* c : {&s.flat, &s.gate, &s.rs, &s.ag})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  for (MPI_Comm& c : s.parts)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
}

void HierAllreduce::sum(void* data, size_t count, DType type, std::string_view what) {
  Impl& s = *m_impl;
  s.watch.enter(++s.calls, what);
  const auto begin = Clock::now();
  auto* bytes = static_cast<std::byte*>(data);
  if (count > 0) {
    if (s.mode == Impl::Mode::flat) s.sum_flat(bytes, count, type);
    if (s.mode == Impl::Mode::pipeline) s.sum_pipeline(bytes, count, type);
  }
  s.watch.leave();
  s.total_s += std::chrono::duration<double>(Clock::now() - begin).count();
}

void HierAllreduce::set_level_hook(LevelHook hook) { m_impl->hook = std::move(hook); }
double HierAllreduce::seconds() const { return m_impl->total_s; }
double HierAllreduce::level_seconds(Level level) const { return m_impl->level_s[static_cast<size_t>(level)]; }
int64_t HierAllreduce::calls() const { return m_impl->calls; }
int HierAllreduce::parts() const { return m_impl->mode == Impl::Mode::pipeline ? m_impl->P : 0; }
const AllreduceOptions& HierAllreduce::options() const { return m_impl->options; }

const char* HierAllreduce::mode() const {
  switch (m_impl->mode) {
    case Impl::Mode::none: return "none";
    case Impl::Mode::flat: return "flat";
    case Impl::Mode::pipeline: return "pipeline";
  }
  return "?";
}

}  // namespace squall::mpi
