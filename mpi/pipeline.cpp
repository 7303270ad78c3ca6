// How a HierAllreduce moves its sums on (mpi/hier_impl.hpp): the chunk pipeline through the
// three levels (node reduce-scatter, the cross-node stage: rings of mpi/ring.hpp or recursive
// halving and doubling of mpi/halving_doubling.hpp, node allgather) and the blocking path
// (MPI_Allreduce over the job, in pieces).
#include <algorithm>

#include "mpi/check.hpp"
#include "mpi/hier_impl.hpp"

namespace squall::mpi {

using hier::Chunk;
using hier::Op;
using hier::Path;
using hier::k_allgather;
using hier::k_cross;
using hier::k_done;
using hier::k_reduce_scatter;
using wire::Clock;
using wire::k_max_call_elements;
using wire::mpi_type;
using wire::sum_op;

namespace {
constexpr std::array<Level, 3> k_stage_level = {Level::node_reduce_scatter, Level::cross_allreduce,
                                                Level::node_allgather};
}

int HierAllreduce::Impl::next_stage(int stage) const {
  for (int s = stage + 1; s < k_done; ++s) {
    if ((s == k_reduce_scatter || s == k_allgather) && !node_stages()) continue;
    if (s == k_cross && !cross_stage()) continue;
    return s;
  }
  return k_done;
}

Op* HierAllreduce::Impl::find(int64_t id) {
  if (ops.empty() || id < ops.front().id || id > ops.back().id) return nullptr;
  return &ops[static_cast<size_t>(id - ops.front().id)];
}

Op* HierAllreduce::Impl::first_from(int64_t& id, Path path) {
  if (ops.empty()) return nullptr;
  id = std::max(id, ops.front().id);
  for (Op* op = find(id); op != nullptr; op = find(++id))
    if (!op->done && op->path == path) return op;
  return nullptr;
}

bool HierAllreduce::Impl::completed(int64_t id) {
  const Op* op = find(id);
  return op == nullptr || op->done;
}

void HierAllreduce::Impl::report(Level level, Clock::time_point begin, Clock::time_point end, size_t bytes) {
  level_s[static_cast<size_t>(level)] += std::chrono::duration<double>(end - begin).count();
  if (hook) hook(level, wire::clock_seconds(begin), wire::clock_seconds(end), bytes);
}

// chunk_bytes, or less when that leaves fewer than max_inflight chunks, so that a sum of a
// few MiB still keeps every level busy (never below min_chunk_bytes, where per-message costs
// would dominate).
size_t HierAllreduce::Impl::chunk_elements(const Op& op) const {
  const size_t esize = dtype_size(op.type);
  const size_t bytes = op.count * esize;
  const size_t spread = std::max(options.min_chunk_bytes, bytes / static_cast<size_t>(options.max_inflight));
  return std::clamp(std::min(options.chunk_bytes, spread) / esize, size_t{1}, k_max_call_elements);
}

void HierAllreduce::Impl::begin_op(Op& op) {
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

void HierAllreduce::Impl::finish(Op& op) {
  op.done = true;
  watch.leave(op.id);
  --running;
}

// A blocking sum waits until every sum started before it has completed, so that no rank sits
// in it while another waits for this rank to drive an earlier sum's pipeline; blocking sums
// thus also run in the order they were started, on every rank, and match. The pieces
// sidestep an allocator effect: for a buffer of 32 MiB or more Open MPI 4.1 takes a temporary
// buffer as large from malloc, which glibc then maps afresh on every call (its mmap threshold
// stops growing at 32 MiB), and faulting those pages in made one 64 MiB sum ten times slower
// than four 16 MiB ones here (bench/RESULTS.md).
bool HierAllreduce::Impl::run_blocking(const Op* only) {
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
    SQUALL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, op->data + done * esize, static_cast<int>(n), mpi_type(op->type),
                                   sum_op(op->type), flat));
    report(Level::flat_allreduce, begin, Clock::now(), n * esize);
    done += n;
  }
  finish(*op);
  return true;
}

void HierAllreduce::Impl::start_chunk(Chunk& k, const Op& op, size_t offset, size_t count, size_t slot) {
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

// Each part takes the algorithm options.cross_node forces, or the cheaper for its bytes on
// options.cross_link. Every owner of a part sees the same part size and owner count, so they
// all choose the same.
void HierAllreduce::Impl::issue_cross(Chunk& k) {
  const size_t esize = dtype_size(k.type);
  const size_t base = part_begin(part_lo, k.count);
  k.ring_count = k.halving_count = 0;
  for (int p = part_lo; p < part_hi; ++p) {
    const size_t lo = part_begin(p, k.count), n = part_begin(p + 1, k.count) - lo;
    if (n == 0) continue;  // every owner of the part sees the same empty part
    const size_t i = static_cast<size_t>(p - part_lo);
    const CrossAlgorithm algorithm =
        choose_cross(static_cast<double>(n * esize), part_size[i], options.cross_link, options.cross_node);
    auto setup = [&](auto& sum) {
      sum.comm = parts[i];
      sum.me = part_rank[i];
      sum.n = part_size[i];
      sum.data = k.shard + (lo - base) * esize;
      sum.count = n;
      sum.type = k.type;
      sum.tag = k.tag;
      sum.begin();
    };
    if (algorithm == CrossAlgorithm::halving_doubling) {
      if (k.halvings.size() == k.halving_count) k.halvings.emplace_back();
      setup(k.halvings[k.halving_count++]);
      ++halving_parts;
    } else {
      if (k.rings.size() == k.ring_count) k.rings.emplace_back();
      setup(k.rings[k.ring_count++]);
      ++ring_parts;
    }
  }
}

bool HierAllreduce::Impl::advance_cross(Chunk& k) {
  bool all_done = true;
  for (size_t i = 0; i < k.ring_count; ++i) all_done = k.rings[i].advance() && all_done;
  for (size_t i = 0; i < k.halving_count; ++i) all_done = k.halvings[i].advance() && all_done;
  return all_done;
}

void HierAllreduce::Impl::issue(Chunk& k) {
  const MPI_Datatype t = mpi_type(k.type);
  k.requests.clear();
  k.begin = Clock::now();
  switch (k.stage) {
    case k_reduce_scatter:
      k.requests.emplace_back();
      SQUALL_MPI_CHECK(MPI_Ireduce_scatter(k.data, k.shard, k.counts.data(), t, sum_op(k.type), rs, &k.requests.back()));
      break;
    case k_cross:
      issue_cross(k);
      break;
    case k_allgather:
      k.requests.emplace_back();
      SQUALL_MPI_CHECK(MPI_Iallgatherv(k.shard, static_cast<int>(k.shard_count), t, k.data, k.counts.data(),
                                       k.displs.data(), t, ag, &k.requests.back()));
      break;
  }
  k.active = true;
}

// Chunks enter in order, at most max_inflight at once, whichever sum they belong to. Each
// stage has its own communicator and is issued strictly in chunk order on every rank, which
// is what MPI requires of nonblocking collectives sharing a communicator; different stages
// (and so different levels) of different chunks run at the same time.
bool HierAllreduce::Impl::progress_pipeline() {
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
        done = advance_cross(k);
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

bool HierAllreduce::Impl::progress() {
  bool moved = progress_pipeline();
  while (run_blocking()) moved = true;
  while (!ops.empty() && ops.front().done) ops.pop_front();
  return moved;
}

void HierAllreduce::Impl::drive_until(const std::function<bool()>& finished) {
  wire::Waiter waiter;
  while (!finished()) {
    if (progress())
      waiter.progressed();
    else
      waiter.idle();
  }
}

}  // namespace squall::mpi
