#include "mpi/allreduce.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
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

// bf16 on the wire: 2-byte elements, summed by bf16_sum (widened to f32, added, rounded to
// nearest even). Created on first use, after MPI_Init, and kept for the process.
inline float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

MPI_Datatype bf16_type() {
  static const MPI_Datatype t = [] {
    MPI_Datatype d;
    SQUALL_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &d));
    SQUALL_MPI_CHECK(MPI_Type_commit(&d));
    return d;
  }();
  return t;
}

// The sum for a type: MPI_SUM, or bf16_sum.
MPI_Op sum_op(DType type) {
  if (type != DType::bf16) return MPI_SUM;
  static const MPI_Op op = [] {
    MPI_Op o;
    SQUALL_MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &o));
    return o;
  }();
  return op;
}

MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::bf16: return bf16_type();
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

double clock_seconds(Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

// Waiting on MPI_Test without taking a core from the ranks that share it: spin for a few
// microseconds (a stage often ends that soon), then yield, and sleep (1 ms steps) only once
// the wait passes a second (a late rank, not a slow transfer). A transfer over a slow link
// takes tens of milliseconds and moves only while MPI_Test is called: sleeping in 0.1 ms
// steps after 10 ms made the 1 Gbit/s allreduce 2-3x slower (bench/RESULTS.md).
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
    if (waited < 1.0)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

 private:
  bool m_waiting = false;
  Clock::time_point m_since;
};

// Pipeline stages in the order a chunk goes through them.
enum Stage { k_reduce_scatter = 0, k_cross = 1, k_allgather = 2, k_done = 3 };

constexpr std::array<Level, 3> k_stage_level = {Level::node_reduce_scatter, Level::cross_allreduce,
                                                Level::node_allgather};

// The cross-node stage of one part of a chunk: a ring allreduce among the part's owners, one
// per node, by point-to-point messages. The part is cut into n blocks; in n-1 reduce-scatter
// steps each rank sends one block to its right neighbour and adds the block it receives from
// its left one, then in n-1 allgather steps the summed blocks travel once round the ring. Each
// rank sends 2(n-1)/n of the part, the least an allreduce can, and every step moves data in
// both directions of every link at once. (Open MPI's nonblocking MPI_Iallreduce on two ranks
// is a reduce then a broadcast: twice the time on a link, bench/RESULTS.md.)
struct Ring {
  MPI_Comm comm = MPI_COMM_NULL;
  int me = 0, n = 1, left = 0, right = 0;
  std::byte* data = nullptr;  // the part, in the shard
  size_t count = 0;           // elements
  int step = 0;               // 0 .. 2(n-1); 2(n-1) is done
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::vector<std::byte> incoming;  // a reduce-scatter step's received block

  size_t block_begin(int b) const { return static_cast<size_t>(b) * count / static_cast<size_t>(n); }
  bool done() const { return step == 2 * (n - 1); }
};

// One chunk of a sum on its way through the stages.
struct Chunk {
  int64_t op = 0;                       // the sum it belongs to (its ticket)
  std::byte* data = nullptr;            // its first element in the caller's buffer
  size_t count = 0;                     // elements
  DType type = DType::f32;
  int stage = k_done;                   // current stage (active) or next one to issue
  bool active = false;                  // requests of `stage` are in flight
  Clock::time_point begin;              // when `stage` was issued
  std::vector<MPI_Request> requests;    // node stages
  std::vector<Ring> rings;              // cross stage: one per non-empty part this rank owns
  size_t ring_count = 0;
  int tag = 0;                          // of the cross stage's messages
  std::vector<int> counts, displs;      // per local rank: its shard of the chunk (node stages)
  std::byte* shard = nullptr;           // this rank's shard: scratch, or the buffer itself
  size_t shard_count = 0;
};

// How one sum runs.
enum class Path {
  blocking,  // MPI_Allreduce over the job, in pieces: small sums, and every sum of a one-level job
  pipeline,  // chunks through the levels
};

// A sum started and not yet retired.
struct Op {
  int64_t id = 0;
  std::byte* data = nullptr;
  size_t count = 0;
  DType type = DType::f32;
  Path path = Path::blocking;
  MPI_Request gate = MPI_REQUEST_NULL;     // blocking, large: the arrival barrier
  size_t chunk = 0;                        // pipeline: elements per chunk
  size_t chunks = 0, chunks_done = 0;
  bool done = false;
  Clock::time_point begin_time;
};

}  // namespace

size_t dtype_size(DType type) {
  switch (type) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::bf16: return 2;
  }
  return 0;
}

const char* dtype_name(DType type) {
  switch (type) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::bf16: return "bf16";
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
                                   mpi_type(type), sum_op(type), native_handle(comm)));
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
  MPI_Comm flat = MPI_COMM_NULL;  // blocking sums over the job (every mode)
  MPI_Comm gate = MPI_COMM_NULL;  // the arrival barriers in front of large blocking sums
  MPI_Comm rs = MPI_COMM_NULL, ag = MPI_COMM_NULL;      // node stages, one communicator each
  // Part p of every chunk is summed across nodes on parts[p - part_lo], among the ranks that
  // own it (one per node). This rank owns parts [part_lo, part_hi) of the P in a chunk.
  int P = 0, part_lo = 0, part_hi = 0;
  std::vector<MPI_Comm> parts;
  std::vector<int> part_rank, part_size;  // this rank's place in each, and their sizes

  // Sums in flight, oldest first; ids are consecutive. A sum leaves the front once done.
  std::deque<Op> ops;
  int64_t started = 0;        // sums started (the last ticket)
  int running = 0, max_running = 0;

  // The pipeline: chunks of every pipelined sum, numbered in the order their sums started.
  // Chunk c lives in slots[c % slots.size()] while in flight.
  std::vector<Chunk> slots;
  std::vector<std::vector<std::byte>> scratch;
  size_t chunk_seq_total = 0;              // chunks of every pipelined sum started so far
  size_t admitted = 0, retired = 0;        // chunk numbers
  std::array<size_t, 3> next_issue{};      // per stage: the chunk whose turn it is
  int64_t admit_op = 0;                    // the sum whose chunks are being admitted
  size_t admit_offset = 0;                 // elements of it admitted so far

  double total_s = 0;
  std::array<double, k_levels> level_s{};

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

  Op* find(int64_t id) {
    if (ops.empty() || id < ops.front().id || id > ops.back().id) return nullptr;
    return &ops[static_cast<size_t>(id - ops.front().id)];
  }
  // The first sum from number `id` on that takes `path` and is not done; moves `id` to it.
  Op* first_from(int64_t& id, Path path) {
    if (ops.empty()) return nullptr;
    id = std::max(id, ops.front().id);
    for (Op* op = find(id); op != nullptr; op = find(++id))
      if (!op->done && op->path == path) return op;
    return nullptr;
  }
  bool completed(int64_t id) {
    const Op* op = find(id);
    return op == nullptr || op->done;
  }

  void report(Level level, Clock::time_point begin, Clock::time_point end, size_t bytes) {
    level_s[static_cast<size_t>(level)] += std::chrono::duration<double>(end - begin).count();
    if (hook) hook(level_name(level), clock_seconds(begin), clock_seconds(end), bytes);
  }

  // A sum's pipeline unit: chunk_bytes, or less when that leaves fewer than max_inflight
  // chunks, so that a sum of a few MiB still keeps every level busy (never below
  // min_chunk_bytes, where per-message costs would dominate).
  size_t chunk_elements(const Op& op) const {
    const size_t esize = dtype_size(op.type);
    const size_t bytes = op.count * esize;
    const size_t spread = std::max(options.min_chunk_bytes, bytes / static_cast<size_t>(options.max_inflight));
    return std::clamp(std::min(options.chunk_bytes, spread) / esize, size_t{1}, k_max_call_elements);
  }

  void begin_op(Op& op) {
    op.begin_time = Clock::now();
    if (op.count == 0 || mode == Mode::none) {
      op.done = true;
      return;
    }
    const bool small = op.count * dtype_size(op.type) <= options.small_bytes;
    if (mode == Mode::flat || small) {
      op.path = Path::blocking;
      // A blocking MPI_Allreduce spins while it waits for a late rank, taking a core from the
      // learners that compute meanwhile (they share the rank's cores): a large sum first waits
      // for every rank at a nonblocking barrier, politely (Waiter). A small one goes straight
      // in: its latency is the point, and it is rarely waited for while learners compute.
      if (!small) SQUALL_MPI_CHECK(MPI_Ibarrier(gate, &op.gate));
    } else {
      op.path = Path::pipeline;
      op.chunk = chunk_elements(op);
      op.chunks = (op.count + op.chunk - 1) / op.chunk;
      chunk_seq_total += op.chunks;
    }
  }

  void finish(Op& op) {
    op.done = true;
    watch.leave(op.id);
    --running;
  }

  // The oldest sum in flight, when it is a blocking one: MPI_Allreduce in pieces. A blocking
  // sum waits until every sum started before it has completed, so that no rank sits in it
  // while another waits for this rank to drive an earlier sum's pipeline; blocking sums thus
  // also run in the order they were started, on every rank, and match. The pieces sidestep an allocator
  // effect: for a buffer of 32 MiB or more Open MPI 4.1 takes a temporary buffer as large
  // from malloc, which glibc then maps afresh on every call (its mmap threshold stops growing
  // at 32 MiB), and faulting those pages in made one 64 MiB sum ten times slower than four
  // 16 MiB ones here (bench/RESULTS.md).
  bool run_blocking(const Op* only = nullptr) {
    Op* op = nullptr;
    for (Op& o : ops)
      if (!o.done) {
        op = &o;
        break;
      }
    if (op == nullptr || op->path != Path::blocking || (only != nullptr && op != only)) return false;
    if (op->gate != MPI_REQUEST_NULL) {
      int arrived = 0;
      SQUALL_MPI_CHECK(MPI_Test(&op->gate, &arrived, MPI_STATUS_IGNORE));
      if (!arrived) return false;
    }
    const size_t esize = dtype_size(op->type);
    const size_t piece = std::clamp(options.flat_chunk_bytes / esize, size_t{1}, k_max_call_elements);
    for (size_t done = 0; done < op->count;) {
      const size_t n = std::min(op->count - done, piece);
      const auto begin = Clock::now();
      SQUALL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, op->data + done * esize, static_cast<int>(n),
                                     mpi_type(op->type), sum_op(op->type), flat));
      report(Level::flat_allreduce, begin, Clock::now(), n * esize);
      done += n;
    }
    finish(*op);
    return true;
  }

  void start_chunk(Chunk& k, const Op& op, size_t offset, size_t count, size_t slot) {
    const size_t esize = dtype_size(op.type);
    k.op = op.id;
    k.tag = static_cast<int>(admitted % 32768);  // MPI_TAG_UB is at least 32767; far fewer are in flight
    k.type = op.type;
    k.data = op.data + offset * esize;
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
      // A shard holds at most (its parts) * chunk / P elements, plus one for the rounding.
      const size_t shard_max = static_cast<size_t>(part_hi - part_lo) * count / static_cast<size_t>(P) + 1;
      if (scratch[slot].size() < shard_max * esize) scratch[slot].resize(shard_max * esize);
      k.shard = scratch[slot].data();
      k.shard_count = static_cast<size_t>(k.counts[static_cast<size_t>(local_rank)]);
    } else {
      k.shard = k.data;
      k.shard_count = count;
    }
  }

  // Posts step r.step of the ring: receive from the left, send to the right.
  void post_ring_step(Ring& r, const Chunk& k) {
    const MPI_Datatype t = mpi_type(k.type);
    const size_t esize = dtype_size(k.type);
    const bool scatter = r.step < r.n - 1;
    // Reduce-scatter step s sends block me-s and receives block me-s-1; allgather step s
    // sends block me+1-s and receives block me-s (indices mod n).
    const int s = scatter ? r.step : r.step - (r.n - 1);
    const int send_block = ((scatter ? r.me - s : r.me + 1 - s) % r.n + r.n) % r.n;
    const int recv_block = ((scatter ? r.me - s - 1 : r.me - s) % r.n + r.n) % r.n;
    const size_t send_lo = r.block_begin(send_block), send_n = r.block_begin(send_block + 1) - send_lo;
    const size_t recv_lo = r.block_begin(recv_block), recv_n = r.block_begin(recv_block + 1) - recv_lo;
    std::byte* into = r.data + recv_lo * esize;
    if (scatter) {
      if (r.incoming.size() < recv_n * esize) r.incoming.resize(recv_n * esize);
      into = r.incoming.data();
    }
    SQUALL_MPI_CHECK(MPI_Irecv(into, static_cast<int>(recv_n), t, r.left, k.tag, r.comm, &r.requests[0]));
    SQUALL_MPI_CHECK(MPI_Isend(r.data + send_lo * esize, static_cast<int>(send_n), t, r.right, k.tag, r.comm,
                               &r.requests[1]));
  }

  // Moves every ring of a chunk's cross stage on as far as its messages allow; true when all
  // are done.
  bool advance_rings(Chunk& k) {
    bool all_done = true;
    for (size_t i = 0; i < k.ring_count; ++i) {
      Ring& r = k.rings[i];
      while (!r.done()) {
        int done = 0;
        SQUALL_MPI_CHECK(MPI_Testall(2, r.requests, &done, MPI_STATUSES_IGNORE));
        if (!done) break;
        if (r.step < r.n - 1) {  // add the received block into ours
          const int s = r.step;
          const int b = ((r.me - s - 1) % r.n + r.n) % r.n;
          const size_t lo = r.block_begin(b), n = r.block_begin(b + 1) - lo;
          if (n > 0)
            SQUALL_MPI_CHECK(MPI_Reduce_local(r.incoming.data(), r.data + lo * dtype_size(k.type), static_cast<int>(n),
                                              mpi_type(k.type), sum_op(k.type)));
        }
        if (++r.step < 2 * (r.n - 1)) post_ring_step(r, k);
      }
      all_done = all_done && r.done();
    }
    return all_done;
  }

  void issue(Chunk& k) {
    const MPI_Datatype t = mpi_type(k.type);
    const size_t esize = dtype_size(k.type);
    k.requests.clear();
    k.begin = Clock::now();
    switch (k.stage) {
      case k_reduce_scatter:
        k.requests.emplace_back();
        SQUALL_MPI_CHECK(MPI_Ireduce_scatter(k.data, k.shard, k.counts.data(), t, sum_op(k.type), rs, &k.requests.back()));
        break;
      case k_cross: {
        const size_t base = part_begin(part_lo, k.count);
        k.ring_count = 0;  // the rings (and their buffers) are kept from chunk to chunk
        for (int p = part_lo; p < part_hi; ++p) {
          const size_t lo = part_begin(p, k.count), n = part_begin(p + 1, k.count) - lo;
          if (n == 0) continue;  // every owner of the part sees the same empty part
          if (k.rings.size() == k.ring_count) k.rings.emplace_back();
          Ring& r = k.rings[k.ring_count++];
          r.step = 0;
          r.comm = parts[static_cast<size_t>(p - part_lo)];
          r.me = part_rank[static_cast<size_t>(p - part_lo)];
          r.n = part_size[static_cast<size_t>(p - part_lo)];
          r.left = (r.me + r.n - 1) % r.n;
          r.right = (r.me + 1) % r.n;
          r.data = k.shard + (lo - base) * esize;
          r.count = n;
          post_ring_step(r, k);
        }
        break;
      }
      case k_allgather:
        k.requests.emplace_back();
        SQUALL_MPI_CHECK(MPI_Iallgatherv(k.shard, static_cast<int>(k.shard_count), t, k.data, k.counts.data(),
                                         k.displs.data(), t, ag, &k.requests.back()));
        break;
    }
    k.active = true;
  }

  // Chunks enter in order, at most max_inflight at once, whichever sum they belong to. Each
  // stage has its own communicator and is issued strictly in chunk order on every rank,
  // which is what MPI requires of nonblocking collectives sharing a communicator; different
  // stages (and so different levels) of different chunks run at the same time.
  bool progress_pipeline() {
    if (retired == chunk_seq_total) return false;
    const size_t inflight = static_cast<size_t>(options.max_inflight);
    if (slots.size() < inflight) {
      slots.resize(inflight);
      scratch.resize(inflight);
    }
    const size_t nslots = slots.size();
    bool moved = false;
    for (; admitted < chunk_seq_total && admitted < retired + nslots; ++admitted, moved = true) {
      Op* op = first_from(admit_op, Path::pipeline);
      const size_t n = std::min(op->chunk, op->count - admit_offset);
      start_chunk(slots[admitted % nslots], *op, admit_offset, n, admitted % nslots);
      admit_offset += n;
      if (admit_offset == op->count) {
        admit_offset = 0;
        ++admit_op;  // the next pipelined sum, if any, is found above
      }
    }
    for (size_t c = retired; c < admitted; ++c) {
      Chunk& k = slots[c % nslots];
      if (k.active) {
        int done = 0;
        if (k.stage == k_cross)
          done = advance_rings(k);
        else
          SQUALL_MPI_CHECK(MPI_Testall(static_cast<int>(k.requests.size()), k.requests.data(), &done,
                                       MPI_STATUSES_IGNORE));
        if (!done) continue;
        const size_t bytes = (k.stage == k_cross ? k.shard_count : k.count) * dtype_size(k.type);
        report(k_stage_level[static_cast<size_t>(k.stage)], k.begin, Clock::now(), bytes);
        k.active = false;
        k.stage = next_stage(k.stage);
        moved = true;
        if (k.stage == k_done) {
          Op* op = find(k.op);
          if (++op->chunks_done == op->chunks) finish(*op);
        }
      }
      if (k.stage != k_done && next_issue[static_cast<size_t>(k.stage)] == c) {
        ++next_issue[static_cast<size_t>(k.stage)];
        issue(k);
        moved = true;
      }
    }
    while (retired < admitted && slots[retired % nslots].stage == k_done) ++retired;
    return moved;
  }

  // One pass over everything in flight; true when something moved.
  bool progress() {
    bool moved = progress_pipeline();
    while (run_blocking()) moved = true;
    while (!ops.empty() && ops.front().done) ops.pop_front();
    return moved;
  }

  void drive_until(const std::function<bool()>& finished) {
    Waiter waiter;
    while (!finished()) {
      if (progress())
        waiter.progressed();
      else
        waiter.idle();
    }
  }
};

HierAllreduce::HierAllreduce(const Topology& topo, AllreduceOptions options) {
  if (options.chunk_bytes == 0 || options.min_chunk_bytes == 0 || options.flat_chunk_bytes == 0 || options.max_inflight < 1 || options.max_parts < 1 ||
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
  if (s.mode != Impl::Mode::none) {
    SQUALL_MPI_CHECK(MPI_Comm_dup(world, &s.flat));
    SQUALL_MPI_CHECK(MPI_Comm_dup(world, &s.gate));
  }
  for (MPI_Comm c : {s.flat, s.gate, s.rs, s.ag})
    if (c != MPI_COMM_NULL) SQUALL_MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
  for (MPI_Comm c : s.parts) {
    SQUALL_MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    int r = 0, n = 0;
    SQUALL_MPI_CHECK(MPI_Comm_rank(c, &r));
    SQUALL_MPI_CHECK(MPI_Comm_size(c, &n));
    s.part_rank.push_back(r);
    s.part_size.push_back(n);
  }
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

namespace {
// Adds the wall time of one public call to `total`.
class CallTimer {
 public:
  explicit CallTimer(double& total) : m_total(total), m_begin(Clock::now()) {}
  ~CallTimer() { m_total += std::chrono::duration<double>(Clock::now() - m_begin).count(); }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  double& m_total;
  Clock::time_point m_begin;
};
}  // namespace

HierAllreduce::Ticket HierAllreduce::start(void* data, size_t count, DType type, std::string_view what) {
  Impl& s = *m_impl;
  CallTimer timer(s.total_s);
  Op op;
  op.id = ++s.started;
  op.data = static_cast<std::byte*>(data);
  op.count = count;
  op.type = type;
  s.watch.enter(op.id, what);
  ++s.running;
  s.max_running = std::max(s.max_running, s.running);
  s.ops.push_back(op);
  Op& mine = s.ops.back();
  s.begin_op(mine);
  if (mine.done) {
    s.watch.leave(op.id);
    --s.running;
  } else if (mine.path == Path::pipeline) {
    s.progress_pipeline();
  } else if (mine.count * dtype_size(type) <= s.options.small_bytes) {
    // A small sum whose turn it is runs now: it takes microseconds. A large blocking one
    // waits for test() or wait(), so that start() returns at once.
    s.run_blocking(&mine);
  }
  return op.id;
}

bool HierAllreduce::test(Ticket ticket) {
  Impl& s = *m_impl;
  CallTimer timer(s.total_s);
  if (s.completed(ticket)) return true;
  s.progress();
  return s.completed(ticket);
}

void HierAllreduce::wait(Ticket ticket) {
  Impl& s = *m_impl;
  CallTimer timer(s.total_s);
  s.drive_until([&] { return s.completed(ticket); });
}

void HierAllreduce::wait_all() {
  Impl& s = *m_impl;
  CallTimer timer(s.total_s);
  s.drive_until([&] { return s.running == 0; });
  s.ops.clear();
}

void HierAllreduce::sum(void* data, size_t count, DType type, std::string_view what) { wait(start(data, count, type, what)); }

int HierAllreduce::in_flight() const { return m_impl->running; }
int HierAllreduce::max_in_flight() const { return m_impl->max_running; }

void HierAllreduce::set_level_hook(LevelHook hook) { m_impl->hook = std::move(hook); }
double HierAllreduce::seconds() const { return m_impl->total_s; }
double HierAllreduce::level_seconds(Level level) const { return m_impl->level_s[static_cast<size_t>(level)]; }
int64_t HierAllreduce::calls() const { return m_impl->started; }
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
