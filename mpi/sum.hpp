#pragma once
// One interface for every sum over the job (docs/allreduce.md, "One interface"):
//
//   host         HierAllreduce (mpi/allreduce.hpp): levels 2-4 of the hierarchical allreduce
//                on host memory; f32, f64, i32, i64 and bf16.
//   nccl,        DeviceAllreduce (mpi/device_allreduce.hpp, implemented in mpi/nccl.cpp):
//   device-hier  f32 buffers in GPU memory, ordered after the caller's CUDA stream.
//   one rank     OneRankAllreduce (below): the job is this rank, every sum is complete at once.
//   checked      CheckedAllreduce (mpi/sum_check.hpp): any of these, each start compared
//                across ranks first (parallel.check_sums, SQUALL_CHECK_SUMS=1).
//
// make_allreduce (mpi/make_allreduce.hpp) picks one. Callers (the learner group, the bench,
// the tests) see only this class: what memory it sums, which element types it takes,
// whether it orders itself after the caller's stream.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "mpi/cross_algorithm.hpp"
#include "src/core/dtype.hpp"

namespace squall::mpi {

// bf16: bfloat16 (the top half of an f32), summed in f32 and rounded to nearest even at every
// addition (a user-defined MPI operation): half the bytes of f32 on the wire, for gradients
// whose precision does not need more (parallel.comm_precision). f16 is not summed.
using DType = squall::DType;
using squall::dtype_name;
using squall::dtype_size;

struct AllreduceOptions {
  size_t chunk_bytes = 256 << 10;      // pipeline unit (at most)
  size_t min_chunk_bytes = 64 << 10;   // ... made smaller, down to this, to have max_inflight chunks
  size_t flat_chunk_bytes = 16 << 20;  // unit of the flat sum (one MPI_Allreduce per unit)
  int max_inflight = 16;               // chunks in flight at once
  // device-hier's pipeline unit. Device buffers move at hundreds of GB/s inside a node, so
  // a host pipeline's chunk (tens of microseconds of work) would make every chunk wait on
  // the host; whole tens of MiB keep NCCL's kernels and the cross-node messages busy.
  size_t device_chunk_bytes = 16 << 20;
  double stall_warn_s = 60;     // a sum waited this long: rank 0 names the ranks that have not joined
  double stall_abort_s = 1800;  // ... and after this long the job ends
  // One MPI_Allreduce when the job has one node or one rank per node; false runs the
  // pipeline there too (tests and benchmarks).
  bool flat_single_level = true;
  // Unequal node sizes split every chunk into lcm(node sizes) parts; above this the sum
  // falls back to one MPI_Allreduce over the job (said once in the log).
  int max_parts = 256;
  // Sums of at most this many bytes are one MPI_Iallreduce over the job, whatever the nodes:
  // latency, not bandwidth, decides their time (bench/RESULTS.md).
  size_t small_bytes = 64 << 10;
  // The host pipeline's cross-node stage (docs/allreduce.md, "The cross-node stage"): ring or
  // halving_doubling for every part of every chunk, or automatic: per part, the cheaper by
  // choose_cross (mpi/cross_algorithm.hpp) for its bytes and the node count on cross_link.
  CrossAlgorithm cross_node = CrossAlgorithm::automatic;
  LinkCost cross_link{};
  // Compare every sum's start across ranks before it runs (parallel.check_sums; the
  // environment's SQUALL_CHECK_SUMS=1 turns it on too): mpi/sum_check.hpp.
  bool check_sums = false;
};

// The stages a sum is made of, as reported to the level hook and by level_seconds().
enum class Level { node_reduce_scatter, cross_allreduce, node_allgather, flat_allreduce };
constexpr int k_levels = 4;
// "node_reduce_scatter", "cross_allreduce", "node_allgather", "allreduce" (the flat sum).
const char* level_name(Level level);

// Called for each finished stage (one chunk through one level) with its times in seconds on
// the steady clock (std::chrono::steady_clock, since its epoch) and the bytes this rank
// handed to that stage. Runs on the calling thread, inside start(), test() or wait().
using LevelHook = std::function<void(Level level, double t_begin, double t_end, size_t bytes)>;

// Where the buffers handed to start() live.
enum class Memory { host, device };
const char* memory_name(Memory memory);  // "host" | "device"

class Allreduce {
 public:
  // A sum in flight: the collective's number (1, 2, ...; the same on every rank).
  using Ticket = int64_t;

  virtual ~Allreduce() = default;

  // Starts an in-place sum of `count` elements of `type` over every rank of the job and
  // returns; `data` (of memory()) must not be touched until the sum has completed.
  // Collective: every rank starts the same sums (count and type) in the same order, whatever
  // order their data became ready in (a caller with several ready at once starts them in its
  // own fixed order, never in the order it happened to see them ready). `what` names the
  // collective in stall messages ("gradients step 12 bucket 2") and is the same on every
  // rank (the sum check compares it, mpi/sum_check.hpp). `after_stream` is the caller's
  // stream whose work so far writes `data`, as its backend names it (a cudaStream_t, opaque
  // here; a backend without native handles passes its own stream object, which only a test's
  // device-like sum reads): an implementation that orders_after_stream() orders the sum after
  // it itself; the others ignore it and need the data complete when start() is called. Every
  // rank ends with the same bits. A type that takes() refuses throws squall::Error.
  virtual Ticket start(void* data, size_t count, DType type, std::string_view what,
                       void* after_stream = nullptr) = 0;
  Ticket start(float* data, size_t count, std::string_view what = "allreduce") {
    return start(data, count, DType::f32, what);
  }
  // Drives every sum in flight without blocking; true once `ticket` has completed (its
  // result may be read; for device memory, later work on any stream sees it).
  virtual bool test(Ticket ticket) = 0;
  // Drives every sum in flight until `ticket` has completed.
  virtual void wait(Ticket ticket) = 0;
  // Makes the later work of `stream` (named as after_stream in start()) wait for sum
  // `ticket` on the device, without the host waiting: true when done (or when the sum has
  // completed already), false where this allreduce cannot (host sums: the caller wait()s).
  // The sum stays in flight for test() and wait(), which the caller still calls to retire it
  // (cheaply, once the stream has passed it).
  virtual bool order_stream_after(Ticket, void* /*stream*/) { return false; }

  // start() then wait().
  void sum(void* data, size_t count, DType type, std::string_view what = "allreduce") {
    wait(start(data, count, type, what));
  }
  void sum(float* data, size_t count, std::string_view what = "allreduce") { sum(data, count, DType::f32, what); }
  void sum(double* data, size_t count, std::string_view what = "allreduce") { sum(data, count, DType::f64, what); }

  virtual int ranks() const = 0;               // ranks of the job
  virtual bool takes(DType type) const = 0;    // element types start() sums
  virtual Memory memory() const { return Memory::host; }
  // Whether start() orders the sum after `after_stream` itself, sparing the caller a host
  // wait for its stream before each start().
  virtual bool orders_after_stream() const { return false; }
  // How the sums run here: "none" (one rank), "flat", "pipeline", "nccl",
  // "device-hier (...)".
  virtual std::string mode() const = 0;
  // Which algorithms the cross-node stage has run so far on this rank (mpi/cross_algorithm.hpp):
  // "ring", "halving-doubling", "ring+halving-doubling", or "" where no sum has crossed nodes
  // through a stage of squall's own (one node, the flat path, the device sums).
  virtual std::string cross_node() const { return {}; }

  // The stages of the sums, for a timeline: implementations without levels report none.
  virtual void set_level_hook(LevelHook) {}
  // Wall seconds the caller spent inside start(), test() and wait() since construction
  // (0 where not measured).
  virtual double seconds() const { return 0; }
  // Summed durations of one level's stages (they overlap each other, so the levels add up
  // to more than seconds()); 0 where not measured.
  virtual double level_seconds(Level) const { return 0; }

 protected:
  // Throws squall::Error unless takes(type), naming the type and mode().
  void check_type(DType type) const;
};

// The job is this one rank: nothing to add, every sum is complete at once, and no element is
// read or written. It takes every type. Like a host sum it reports host memory and does not
// order itself after the caller's stream, so callers keep their usual order: a buffer's
// producing work is done before its sum is handed over.
class OneRankAllreduce final : public Allreduce {
 public:
  using Allreduce::start;
  Ticket start(void*, size_t, DType, std::string_view, void* = nullptr) override { return ++m_started; }
  bool test(Ticket) override { return true; }
  void wait(Ticket) override {}
  int ranks() const override { return 1; }
  bool takes(DType) const override { return true; }
  std::string mode() const override { return "none"; }

 private:
  Ticket m_started = 0;
};

}  // namespace squall::mpi
