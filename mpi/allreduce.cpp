// The hierarchical allreduce's set-up and public calls (mpi/allreduce.hpp): the node sizes,
// the choice of mode (none, flat, pipeline), the communicators every stage runs on, and
// start/test/wait over the pipeline of pipeline.cpp.
#include "mpi/allreduce.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "mpi/hier_impl.hpp"
#include "mpi/topology.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::mpi {

HierAllreduce::HierAllreduce(const Topology& topo, AllreduceOptions options) {
  if (options.chunk_bytes == 0 || options.min_chunk_bytes == 0 || options.flat_chunk_bytes == 0 || options.max_inflight < 1 || options.max_parts < 1 ||
      !(options.stall_warn_s > 0) || !(options.stall_abort_s > 0))
    throw Error("allreduce options: the chunk sizes, max_inflight, max_parts and the stall times must be positive");
  m_impl = std::make_unique<Impl>(topo, options);
  Impl& s = *m_impl;
  s.world = topo.world_size();
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

HierAllreduce::Ticket HierAllreduce::start(void* data, size_t count, DType type, std::string_view what, void*) {
  check_type(type);
  Impl& s = *m_impl;
  wire::CallTimer timer(s.total_s);
  hier::Op op;
  op.id = ++s.started;
  op.data = static_cast<std::byte*>(data);
  op.count = count;
  op.type = type;
  s.watch.enter(op.id, what);
  ++s.running;
  s.max_running = std::max(s.max_running, s.running);
  s.ops.push_back(op);
  hier::Op& mine = s.ops.back();
  s.begin_op(mine);
  if (mine.done) {
    s.watch.leave(op.id);
    --s.running;
  } else if (mine.path == hier::Path::pipeline) {
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
  wire::CallTimer timer(s.total_s);
  if (s.completed(ticket)) return true;
  s.progress();
  return s.completed(ticket);
}

void HierAllreduce::wait(Ticket ticket) {
  Impl& s = *m_impl;
  wire::CallTimer timer(s.total_s);
  s.drive_until([&] { return s.completed(ticket); });
}

void HierAllreduce::wait_all() {
  Impl& s = *m_impl;
  wire::CallTimer timer(s.total_s);
  s.drive_until([&] { return s.running == 0; });
  s.ops.clear();
}

int HierAllreduce::ranks() const { return m_impl->world; }
bool HierAllreduce::takes(DType type) const { return type != DType::f16; }
int HierAllreduce::in_flight() const { return m_impl->running; }
int HierAllreduce::max_in_flight() const { return m_impl->max_running; }

void HierAllreduce::set_level_hook(LevelHook hook) { m_impl->hook = std::move(hook); }
double HierAllreduce::seconds() const { return m_impl->total_s; }
double HierAllreduce::level_seconds(Level level) const { return m_impl->level_s[static_cast<size_t>(level)]; }
int64_t HierAllreduce::calls() const { return m_impl->started; }
int HierAllreduce::parts() const { return m_impl->mode == Impl::Mode::pipeline ? m_impl->P : 0; }
const AllreduceOptions& HierAllreduce::options() const { return m_impl->options; }

std::string cross_rule(const AllreduceOptions& options, int nodes) {
  const std::string among = " among " + std::to_string(nodes) + " nodes";
  if (options.cross_node != CrossAlgorithm::automatic)
    return std::string(k_cross_algorithms.name(options.cross_node)) + among + " (forced)";
  // Both costs are linear in the bytes: their difference is a + b * bytes.
  const LinkCost link = options.cross_link;
  const auto diff = [&](double bytes) {
    return halving_doubling_seconds(bytes, nodes, link) - ring_seconds(bytes, nodes, link);
  };
  const double a = diff(0);
  double b = (diff(1 << 20) - a) / (1 << 20);
  if (std::abs(b) * link.bytes_per_s < 1e-9) b = 0;  // equal per byte (n a power of two), up to rounding
  char text[160];
  std::snprintf(text, sizeof(text), "auto%s (link %.3g us, %.3g Gbit/s): ", among.c_str(), link.alpha_s * 1e6,
                link.bytes_per_s * 8e-9);
  const char* hd = k_cross_algorithms.name(CrossAlgorithm::halving_doubling);
  if (a < 0 && b <= 0) return text + std::string(hd) + " for every part";
  if (a >= 0 && b >= 0) return text + std::string("ring for every part");
  const std::string below = std::to_string(static_cast<int64_t>(-a / b)) + " bytes";
  if (a < 0) return text + std::string(hd) + " for parts below " + below + ", ring above";
  return text + std::string("ring for parts below ") + below + ", " + hd + " above";
}

int64_t HierAllreduce::cross_parts(CrossAlgorithm algorithm) const {
  switch (algorithm) {
    case CrossAlgorithm::ring: return m_impl->ring_parts;
    case CrossAlgorithm::halving_doubling: return m_impl->halving_parts;
    case CrossAlgorithm::automatic: return m_impl->ring_parts + m_impl->halving_parts;
  }
  return 0;
}

std::string HierAllreduce::cross_node() const {
  std::string out;
  for (const CrossAlgorithm a : {CrossAlgorithm::ring, CrossAlgorithm::halving_doubling}) {
    if (cross_parts(a) == 0) continue;
    if (!out.empty()) out += '+';
    out += k_cross_algorithms.name(a);
  }
  return out;
}

std::string HierAllreduce::mode() const {
  switch (m_impl->mode) {
    case Impl::Mode::none: return "none";
    case Impl::Mode::flat: return "flat";
    case Impl::Mode::pipeline: return "pipeline";
  }
  return "?";
}

}  // namespace squall::mpi
