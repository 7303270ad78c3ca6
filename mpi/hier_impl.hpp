#pragma once
// The state of a HierAllreduce (for sources in mpi/ only): the sums in flight, the chunk
// pipeline and the communicators each stage runs on. allreduce.cpp sets it up (topology, mode
// choice, communicators) and holds the public calls; pipeline.cpp moves the sums on (the
// chunk pipeline and the blocking path).
#include <mpi.h>

#include <array>
#include <deque>
#include <functional>
#include <vector>

#include "mpi/allreduce.hpp"
#include "mpi/halving_doubling.hpp"
#include "mpi/ring.hpp"
#include "mpi/stall.hpp"
#include "mpi/wire_native.hpp"

namespace squall::mpi {
namespace hier {

// Pipeline stages in the order a chunk goes through them.
enum Stage { k_reduce_scatter = 0, k_cross = 1, k_allgather = 2, k_done = 3 };

// One chunk of a sum on its way through the stages.
struct Chunk {
  int64_t op = 0;                       // the sum it belongs to (its ticket)
  std::byte* data = nullptr;            // its first element in the caller's buffer
  size_t count = 0;                     // elements
  DType type = DType::f32;
  int stage = k_done;                   // current stage (active) or next one to issue
  bool active = false;                  // requests of `stage` are in flight
  wire::Clock::time_point begin;        // when `stage` was issued
  std::vector<MPI_Request> requests;    // node stages
  // Cross stage: one per non-empty part this rank owns, a ring or a halving-doubling
  // (options.cross_node, choose_cross). Kept from chunk to chunk with their buffers.
  std::vector<wire::Ring> rings;
  std::vector<wire::HalvingDoubling> halvings;
  size_t ring_count = 0, halving_count = 0;
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
  wire::Clock::time_point begin_time;
};

}  // namespace hier

struct HierAllreduce::Impl {
  enum class Mode { none, flat, pipeline };

  AllreduceOptions options;
  Mode mode = Mode::none;
  StallWatch watch;
  LevelHook hook;

  int world = 1, local_rank = 0, local_size = 1, nodes = 1;
  MPI_Comm flat = MPI_COMM_NULL;  // blocking sums over the job (every mode)
  MPI_Comm gate = MPI_COMM_NULL;  // the arrival barriers in front of large blocking sums
  MPI_Comm rs = MPI_COMM_NULL, ag = MPI_COMM_NULL;      // node stages, one communicator each
  // Part p of every chunk is summed across nodes on parts[p - part_lo], among the ranks that
  // own it (one per node). This rank owns parts [part_lo, part_hi) of the P in a chunk.
  int P = 0, part_lo = 0, part_hi = 0;
  std::vector<MPI_Comm> parts;
  std::vector<int> part_rank, part_size;  // this rank's place in each, and their sizes

  // Sums in flight, oldest first; ids are consecutive. A sum leaves the front once done.
  std::deque<hier::Op> ops;
  int64_t started = 0;        // sums started (the last ticket)
  int running = 0, max_running = 0;

  // The pipeline: chunks of every pipelined sum, numbered in the order their sums started.
  // Chunk c lives in slots[c % slots.size()] while in flight.
  std::vector<hier::Chunk> slots;
  std::vector<std::vector<std::byte>> scratch;
  size_t chunk_seq_total = 0;              // chunks of every pipelined sum started so far
  size_t admitted = 0, retired = 0;        // chunk numbers
  std::array<size_t, 3> next_issue{};      // per stage: the chunk whose turn it is
  int64_t admit_op = 0;                    // the sum whose chunks are being admitted
  size_t admit_offset = 0;                 // elements of it admitted so far

  double total_s = 0;
  std::array<double, k_levels> level_s{};
  int64_t ring_parts = 0, halving_parts = 0;  // parts summed across nodes by each algorithm

  Impl(const Topology& topo, const AllreduceOptions& o) : options(o), watch(topo, o.stall_warn_s, o.stall_abort_s) {}

  bool node_stages() const { return local_size > 1; }
  bool cross_stage() const { return nodes > 1; }
  // First element of part p in a chunk of n elements: P balanced parts.
  size_t part_begin(int p, size_t n) const { return static_cast<size_t>(p) * n / static_cast<size_t>(P); }
  // The stage after `stage` that this job has (k_done after the last).
  int next_stage(int stage) const;

  hier::Op* find(int64_t id);
  // The first sum from number `id` on that takes `path` and is not done; moves `id` to it.
  hier::Op* first_from(int64_t& id, hier::Path path);
  bool completed(int64_t id);
  void report(Level level, wire::Clock::time_point begin, wire::Clock::time_point end, size_t bytes);

  // A sum's pipeline unit (elements).
  size_t chunk_elements(const hier::Op& op) const;
  // Picks a new sum's path (and its chunks); a sum with nothing to do is done at once.
  void begin_op(hier::Op& op);
  void finish(hier::Op& op);
  // The oldest sum in flight, when it is a blocking one (and `only`, when given): runs it.
  bool run_blocking(const hier::Op* only = nullptr);
  void start_chunk(hier::Chunk& k, const hier::Op& op, size_t offset, size_t count, size_t slot);
  void issue(hier::Chunk& k);
  // Starts the cross stage of a chunk: one ring or halving-doubling per non-empty part.
  void issue_cross(hier::Chunk& k);
  // Moves every part of a chunk's cross stage on; true when all are done.
  bool advance_cross(hier::Chunk& k);
  // Admits, tests and issues chunks; true when something moved.
  bool progress_pipeline();
  // One pass over everything in flight; true when something moved.
  bool progress();
  void drive_until(const std::function<bool()>& finished);
};

}  // namespace squall::mpi
