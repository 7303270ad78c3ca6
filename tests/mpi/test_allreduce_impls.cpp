// Every allreduce make_allreduce can make (mpi/make_allreduce.hpp), through the one interface
// (mpi/sum.hpp), against MPI_Allreduce on the same data: node shapes given as explicit
// assignments of ranks to nodes (one node, one rank per node, equal and unequal nodes,
// interleaved), counts at the edges (0, 1, odd, not divisible by the rank count, many
// chunks), every element type the implementation takes, and the same bits on every rank.
//
//   host pipeline  HierAllreduce with the pipeline forced on every shape (flat_single_level
//                  = false, small_bytes = 0), chunks of a few elements; the cross-node stage
//                  auto, ring and halving-doubling
//   host flat      HierAllreduce summing with MPI_Allreduce in pieces on every shape
//   one rank       OneRankAllreduce: a job of one rank, against MPI_Allreduce on MPI_COMM_SELF
//   nccl,          the device sums ([.device-allreduce], CTest entry gpu:allreduce-impls):
//   device-hier    skipped, saying why, without CUDA or without one GPU per rank
//
// The host cases are hidden from the mpi:collectives entries and run by their own
// (mpi:allreduce-impls:npN). Only CHECK inside collective loops: a REQUIRE that fails on one
// rank would leave the others waiting in the next collective.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/backends/backends.hpp"
#include "mpi/comm.hpp"
#include "mpi/device_allreduce.hpp"
#include "mpi/make_allreduce.hpp"
#include "mpi/node_plan.hpp"
#include "mpi/topology.hpp"
#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "tests/support/allreduce_data.hpp"
#include "tests/support/skip.hpp"

using namespace squall;
using mpi::Allreduce;
using mpi::AllreduceOptions;
using mpi::Communicator;
using mpi::DType;
using mpi::Topology;
using test::fingerprint;

namespace {

// Node of every world rank for each shape worth checking at this rank count; the same list
// on every rank. Shapes that coincide at small counts are kept: they cost little.
struct ShapeSpec {
  std::string name;
  std::vector<int> node_of_rank;
  bool equal_nodes;  // every node holds the same number of ranks
};

std::vector<ShapeSpec> shape_specs(int n) {
  std::vector<ShapeSpec> out;
  auto add = [&](std::string name, auto node_of) {
    std::vector<int> nodes;
    for (int r = 0; r < n; ++r) nodes.push_back(node_of(r));
    std::vector<int> sizes;
    for (int node : nodes) {
      if (static_cast<size_t>(node) >= sizes.size()) sizes.resize(static_cast<size_t>(node) + 1, 0);
      ++sizes[static_cast<size_t>(node)];
    }
    bool equal = true;
    for (int s : sizes) equal = equal && s == sizes[0];
    out.push_back({std::move(name), std::move(nodes), equal});
  };
  add("one node", [](int) { return 0; });
  add("one rank per node", [](int r) { return r; });
  add("nodes of 2 (the last smaller when odd)", [](int r) { return r / 2; });
  add("interleaved nodes", [](int r) { return r % 2; });
  add("first rank alone", [](int r) { return r == 0 ? 0 : 1; });
  add("last rank alone", [n](int r) { return r + 1 == n && n > 1 ? 1 : 0; });
  // Nodes of 1, 2, 3, ... ranks: 0 | 1 2 | 3 4 5 | ...
  add("nodes of growing size", [](int r) {
    int node = 0;
    for (int first = 0, size = 1; r >= first + size; first += size, ++size) ++node;
    return node;
  });
  return out;
}

uint16_t to_bf16(float f) {  // exact for the small integers used here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The same bits on every rank of `job` (a collective over it).
void check_same_bits(MPI_Comm job, const void* data, size_t bytes) {
  const int64_t f = fingerprint(data, bytes);
  int64_t lo = f, hi = f;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT64_T, MPI_MIN, job);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT64_T, MPI_MAX, job);
  CHECK(lo == hi);
}

// Sums `count` elements of T with `ar` and with MPI_Allreduce on `ref` (the ranks of ar's
// job); floating point within rounding, integers and bf16 exactly; then the same bits
// everywhere. `device`: ar sums GPU memory, staged through its own buffer.
template <typename T>
void check_sum(Allreduce& ar, MPI_Comm ref, size_t count, DType type, MPI_Datatype mpi_type) {
  const auto world = Communicator::world();
  int n = 1;
  MPI_Comm_size(ref, &n);
  auto mine = squall::test::make_data<T>(count, world.rank());
  auto expected = mine;
  if (count > 0) MPI_Allreduce(MPI_IN_PLACE, expected.data(), static_cast<int>(count), mpi_type, MPI_SUM, ref);
  if (auto* device = dynamic_cast<mpi::DeviceAllreduce*>(&ar)) {
    if constexpr (std::is_same_v<T, float>) {
      float* buffer = device->device_buffer(count);
      device->upload(buffer, mine.data(), count);
      ar.sum(buffer, count, type, "test");
      device->download(mine.data(), buffer, count);
    } else {
      FAIL_CHECK("the device allreduces take f32 only");
    }
  } else {
    ar.sum(mine.data(), count, type, "test");
  }
  CHECK(squall::test::count_wrong(mine, expected, n) == 0);
  check_same_bits(ref, mine.data(), count * sizeof(T));
}

void check_sum_bf16(Allreduce& ar, MPI_Comm ref, size_t count) {
  const auto world = Communicator::world();
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(world.rank()) * 13) % 17) - 8);
  std::vector<float> expected = values;
  if (count > 0) MPI_Allreduce(MPI_IN_PLACE, expected.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, ref);
  std::vector<uint16_t> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = to_bf16(values[i]);
  ar.sum(mine.data(), count, DType::bf16, "test bf16");
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += from_bf16(mine[i]) != expected[i];
  CHECK(wrong == 0);
  check_same_bits(ref, mine.data(), count * sizeof(uint16_t));
}

// Every type `ar` takes, at every count; the types it refuses throw squall::Error before
// any message moves (so every rank throws, and no collective is left half done).
void check_all(Allreduce& ar, MPI_Comm ref) {
  const int n = Communicator::world().size();
  const std::vector<size_t> counts{0, 1, 7, static_cast<size_t>(n) * 3 + 1, 1000};
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64, DType::bf16, DType::f16}) {
    INFO("type " << mpi::dtype_name(t));
    if (!ar.takes(t)) {
      std::vector<std::byte> buffer(64);
      CHECK_THROWS_AS(ar.start(buffer.data(), 4, t, "refused"), Error);
      CHECK_THROWS_WITH(ar.start(buffer.data(), 4, t, "refused"), Catch::Contains(mpi::dtype_name(t)));
      continue;
    }
    for (size_t count : counts) {
      INFO("count " << count);
      switch (t) {
        case DType::f32: check_sum<float>(ar, ref, count, t, MPI_FLOAT); break;
        case DType::f64: check_sum<double>(ar, ref, count, t, MPI_DOUBLE); break;
        case DType::i32: check_sum<int32_t>(ar, ref, count, t, MPI_INT32_T); break;
        case DType::i64: check_sum<int64_t>(ar, ref, count, t, MPI_INT64_T); break;
        case DType::bf16: check_sum_bf16(ar, ref, count); break;
        case DType::f16: {
          // Only a job of one rank takes f16 (it has nothing to add): the bits stay.
          CHECK(ar.ranks() == 1);
          std::vector<uint16_t> mine(count), before;
          for (size_t i = 0; i < count; ++i) mine[i] = static_cast<uint16_t>(i * 40503u + 7);
          before = mine;
          ar.sum(mine.data(), count, t, "test f16");
          CHECK(mine == before);
          break;
        }
      }
    }
  }
}

struct HostImpl {
  std::string name;
  AllreduceOptions options;
  std::string mode;  // expected on a job of several ranks
};

std::vector<HostImpl> host_impls() {
  AllreduceOptions pipeline;
  pipeline.flat_single_level = false;  // the levels even where one would do
  pipeline.small_bytes = 0;            // even one element goes through them
  pipeline.chunk_bytes = 24;           // 3 to 12 elements a chunk: some parts empty, many chunks
  pipeline.min_chunk_bytes = 24;
  pipeline.max_inflight = 3;
  // The same with each cross-node algorithm forced (auto above takes the ring or, from 4
  // nodes on, halving-doubling for these small parts).
  AllreduceOptions ring = pipeline, halving = pipeline;
  ring.cross_node = mpi::CrossAlgorithm::ring;
  halving.cross_node = mpi::CrossAlgorithm::halving_doubling;
  AllreduceOptions flat;
  flat.max_parts = 1;             // more than one part a chunk: the flat sum instead
  flat.flat_chunk_bytes = 200;    // MPI_Allreduce in pieces
  return {{"host pipeline", pipeline, "pipeline"},
          {"host pipeline, ring across nodes", ring, "pipeline"},
          {"host pipeline, halving-doubling across nodes", halving, "pipeline"},
          {"host flat", flat, "flat"}};
}

}  // namespace

TEST_CASE("every host allreduce equals MPI_Allreduce on every node shape, type and count",
          "[mpi][allreduce][.allreduce-impls]") {
  const auto world = Communicator::world();
  const int n = world.size();
  for (const ShapeSpec& spec : shape_specs(n)) {
    const Topology topo = Topology::from_plan(mpi::plan_nodes(spec.node_of_rank, 0));
    for (const HostImpl& impl : host_impls()) {
      INFO(impl.name << " on " << spec.name << " (" << topo.nodes() << " nodes)");
      std::unique_ptr<Allreduce> ar = mpi::make_allreduce(mpi::AllreduceKind::host, topo, 0, impl.options);
      CHECK(ar->ranks() == n);
      CHECK(ar->memory() == mpi::Memory::host);
      CHECK_FALSE(ar->orders_after_stream());
      CHECK(ar->mode() == (n == 1 ? std::string("none") : impl.mode));
      check_all(*ar, MPI_COMM_WORLD);
    }
  }
}

TEST_CASE("the one-rank allreduce: every sum complete at once, the data untouched", "[mpi][allreduce][.allreduce-impls]") {
  // The factory's choice for a job of one rank, whatever the kind; on more ranks, the same
  // object still sums a job of one (this rank), as MPI_Allreduce on MPI_COMM_SELF does.
  mpi::OneRankAllreduce alone;
  CHECK(alone.ranks() == 1);
  CHECK(alone.mode() == "none");
  const Allreduce::Ticket t = alone.start(nullptr, 0, DType::f32, "nothing");
  CHECK(alone.test(t));
  check_all(alone, MPI_COMM_SELF);
  const auto topo = Topology::create(0);
  if (topo.world_size() == 1)
    for (const auto& [name, kind] : mpi::k_allreduce_kinds.entries()) {
      INFO("kind " << name);
      CHECK(mpi::make_allreduce(kind, topo, 0)->mode() == "none");
    }
}

TEST_CASE("an allreduce kind it does not know is refused with the known ones", "[mpi][allreduce][.allreduce-impls]") {
  CHECK_THROWS_WITH(mpi::k_allreduce_kinds.parse("gloo", "parallel.device_allreduce", ""),
                    Catch::Contains("gloo") && Catch::Contains("host | nccl | device-hier"));
  CHECK(mpi::k_allreduce_kinds.parse("device-hier", "parallel.device_allreduce", "") == mpi::AllreduceKind::device_hier);
  const auto kinds = mpi::allreduce_kinds();
  REQUIRE_FALSE(kinds.empty());
  CHECK(kinds.front() == mpi::AllreduceKind::host);
  CHECK(kinds.size() == 1 + mpi::device_allreduce_names().size());
}

TEST_CASE("every device allreduce equals MPI_Allreduce on the shapes it takes", "[mpi][allreduce][.device-allreduce]") {
  const auto world = Communicator::world();
  const int n = world.size();
  const auto physical = Topology::create(0);
  std::string why;
  const int devices = squall::backends::cuda_device_count(&why);
  // Every rank decides together: one GPU per rank on its machine (NCCL refuses two ranks on
  // one GPU), and a job of several ranks (one rank gets the one-rank allreduce).
  const int here = mpi::device_allreduce_names().empty() ? 0 : devices >= physical.host_ranks() ? 1 : 0;
  if (world.allreduce_min(here) == 0) {
    if (mpi::device_allreduce_names().empty())
      SQUALL_SKIP("squall was built without the CUDA backend: no device allreduce to test");
    SQUALL_SKIP("the device allreduces need one GPU per rank: " << physical.host_ranks() << " ranks on this machine, "
                                                                  << devices << " GPUs" << (why.empty() ? "" : " (" + why + ")"));
  }
  if (n == 1) SQUALL_SKIP("the device allreduces need a job of several ranks (one rank gets the one-rank allreduce)");
  for (const ShapeSpec& spec : shape_specs(n))
    for (const mpi::AllreduceKind kind : mpi::device_allreduce_kinds()) {
      if (kind == mpi::AllreduceKind::device_hier && !spec.equal_nodes) continue;  // it needs equal nodes, and says so
      const Topology topo = Topology::from_plan(mpi::plan_nodes(spec.node_of_rank, 0));
      INFO(mpi::k_allreduce_kinds.name(kind) << " on " << spec.name);
      AllreduceOptions o;
      o.device_chunk_bytes = 64;  // device-hier: many chunks, and a tail
      std::unique_ptr<Allreduce> ar = mpi::make_allreduce(kind, topo, physical.host_rank(), o);
      CHECK(ar->memory() == mpi::Memory::device);
      CHECK(ar->orders_after_stream());
      CHECK(ar->takes(DType::f32));
      CHECK_FALSE(ar->takes(DType::bf16));
      CHECK_THROWS_WITH(ar->start(nullptr, 4, DType::bf16, "refused"),
                        Catch::Contains("parallel.device_allreduce = host"));
      check_all(*ar, MPI_COMM_WORLD);
    }
}
