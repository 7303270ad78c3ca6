// The cross-node stage's algorithms (mpi/ring.hpp, mpi/halving_doubling.hpp, chosen by
// mpi/cross_algorithm.hpp) inside the host pipeline, against MPI_Allreduce: every node count
// from 2 to the ranks of the launch (one rank per node; k nodes with the last holding the
// rest, so unequal nodes and several parts per chunk), forced ring, forced halving-doubling
// and auto; counts below the number of owners and blocks, odd counts, many chunks; every
// element type the host sum takes; several sums in flight; and auto's choice through
// AllreduceOptions::cross_link.
//
// Run by mpi:collectives:np1..4 and, for the node counts whose halving-doubling folds one to
// three extra owners into partners (5, 6, 7) or has three levels (8), by mpi:cross:np5 and
// mpi:cross:np8. Only CHECK inside collective loops: a REQUIRE that fails on one rank would
// leave the others waiting in the next collective.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mpi/allreduce.hpp"
#include "mpi/comm.hpp"
#include "mpi/cross_algorithm.hpp"
#include "mpi/node_plan.hpp"
#include "mpi/topology.hpp"
#include "tests/support/allreduce_data.hpp"

using squall::mpi::AllreduceOptions;
using squall::mpi::Communicator;
using squall::mpi::CrossAlgorithm;
using squall::mpi::DType;
using squall::mpi::HierAllreduce;
using squall::mpi::LinkCost;
using squall::mpi::Topology;
using squall::test::dtype_of;
using squall::test::mpi_type_of;

namespace {

struct Shape {
  std::string name;
  Topology topo;
};

// Every node count from 2 to the world size; the same list on every rank.
std::vector<Shape> shapes() {
  const int n = Communicator::world().size();
  std::vector<Shape> out;
  for (int nodes = 2; nodes <= n; ++nodes) {
    // Ranks 0 .. nodes-2 alone, the rest together on the last node (equal sizes when nodes == n).
    std::vector<int> node_of;
    for (int r = 0; r < n; ++r) node_of.push_back(std::min(r, nodes - 1));
    out.push_back({std::to_string(nodes) + " nodes", Topology::from_plan(squall::mpi::plan_nodes(node_of, 0))});
  }
  if (n >= 4) {  // nodes of 2 (the last of 1 when n is odd)
    std::vector<int> node_of;
    for (int r = 0; r < n; ++r) node_of.push_back(r / 2);
    out.push_back({"nodes of 2", Topology::from_plan(squall::mpi::plan_nodes(node_of, 0))});
  }
  return out;
}

AllreduceOptions pipelined(CrossAlgorithm algorithm) {
  AllreduceOptions o;
  o.flat_single_level = false;  // the levels even with one rank per node
  o.small_bytes = 0;            // even one element crosses through them
  o.chunk_bytes = 4096;         // 40001 floats: 40 chunks
  o.min_chunk_bytes = 64;
  o.max_inflight = 4;
  o.cross_node = algorithm;
  return o;
}

// The same bits on every rank (a collective over the job).
void check_same_bits(const void* data, size_t bytes) {
  const int64_t f = squall::test::fingerprint(data, bytes);
  const auto world = Communicator::world();
  CHECK(world.allreduce_min(f) == world.allreduce_max(f));
}

template <typename T>
void check_sum(HierAllreduce& hier, size_t count, int seed) {
  const auto world = Communicator::world();
  auto mine = squall::test::make_data<T>(count, world.rank() + seed);
  auto expected = mine;
  if (count > 0)
    MPI_Allreduce(MPI_IN_PLACE, expected.data(), static_cast<int>(count), mpi_type_of<T>(), MPI_SUM, MPI_COMM_WORLD);
  hier.sum(mine.data(), count, dtype_of<T>(), "cross test");
  CHECK(squall::test::count_wrong(mine, expected, world.size()) == 0);
  check_same_bits(mine.data(), count * sizeof(T));
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

// Integers in [-8, 8]: every partial sum over a few ranks is exact in bf16, so the result must
// equal MPI_Allreduce's whatever the order.
void check_sum_bf16(HierAllreduce& hier, size_t count) {
  const auto world = Communicator::world();
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(world.rank()) * 13) % 17) - 8);
  std::vector<float> expected = values;
  if (count > 0) MPI_Allreduce(MPI_IN_PLACE, expected.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  std::vector<uint16_t> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = to_bf16(values[i]);
  hier.sum(mine.data(), count, DType::bf16, "cross test bf16");
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += from_bf16(mine[i]) != expected[i];
  CHECK(wrong == 0);
  check_same_bits(mine.data(), count * sizeof(uint16_t));
}

// Below the owners (empty parts and blocks), odd, one chunk, many chunks.
const std::vector<size_t> k_counts{1, 2, 3, 5, 7, 13, 1001, 40001};

}  // namespace

TEST_CASE("each cross-node algorithm equals MPI_Allreduce on every node count, count and type", "[mpi][cross]") {
  for (const Shape& shape : shapes()) {
    for (CrossAlgorithm algorithm :
         {CrossAlgorithm::halving_doubling, CrossAlgorithm::ring, CrossAlgorithm::automatic}) {
      HierAllreduce hier(shape.topo, pipelined(algorithm));
      INFO(shape.name << " (" << hier.parts() << " parts per chunk), cross_node "
                      << squall::mpi::k_cross_algorithms.name(algorithm));
      CHECK(hier.mode() == "pipeline");
      for (size_t count : k_counts) {
        INFO("count " << count);
        check_sum<float>(hier, count, 0);
        check_sum<double>(hier, count, 1);
        check_sum<int32_t>(hier, count, 2);
        check_sum<int64_t>(hier, count, 3);
        check_sum_bf16(hier, count);
      }
      // Every rank owns a non-empty part of the large sums: each ran the forced algorithm only.
      if (algorithm != CrossAlgorithm::automatic) {
        const CrossAlgorithm other = algorithm == CrossAlgorithm::ring ? CrossAlgorithm::halving_doubling
                                                                       : CrossAlgorithm::ring;
        CHECK(hier.cross_parts(algorithm) > 0);
        CHECK(hier.cross_parts(other) == 0);
        CHECK(hier.cross_node() == squall::mpi::k_cross_algorithms.name(algorithm));
      }
      CHECK(hier.cross_parts(CrossAlgorithm::automatic) ==
            hier.cross_parts(CrossAlgorithm::ring) + hier.cross_parts(CrossAlgorithm::halving_doubling));
    }
  }
}

TEST_CASE("halving-doubling with several sums in flight, waited for newest first", "[mpi][cross]") {
  const auto world = Communicator::world();
  const int n = world.size();
  for (const Shape& shape : shapes()) {
    AllreduceOptions o = pipelined(CrossAlgorithm::halving_doubling);
    o.max_inflight = 3;
    o.small_bytes = 64;  // the 3-element sum takes the blocking path, between pipelined ones
    HierAllreduce hier(shape.topo, o);
    INFO(shape.name);
    const std::vector<size_t> counts = {5000, 3, 20001, 0, 17, 7777};
    std::vector<std::vector<float>> bufs, expected;
    for (size_t i = 0; i < counts.size(); ++i) {
      bufs.push_back(squall::test::make_data<float>(counts[i], world.rank() + static_cast<int>(i)));
      expected.push_back(bufs.back());
      if (counts[i] > 0)
        MPI_Allreduce(MPI_IN_PLACE, expected.back().data(), static_cast<int>(counts[i]), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
    }
    std::vector<HierAllreduce::Ticket> tickets;
    for (size_t i = 0; i < counts.size(); ++i)
      tickets.push_back(hier.start(bufs[i].data(), counts[i], "in flight " + std::to_string(i + 1)));
    CHECK(hier.max_in_flight() >= 2);
    for (size_t i = counts.size(); i-- > 0;) hier.wait(tickets[i]);
    CHECK(hier.in_flight() == 0);
    for (size_t i = 0; i < counts.size(); ++i) {
      INFO("sum " << i + 1 << " of " << counts[i]);
      CHECK(squall::test::count_wrong(bufs[i], expected[i], n) == 0);
    }
    CHECK(hier.cross_parts(CrossAlgorithm::halving_doubling) > 0);
    CHECK(hier.cross_parts(CrossAlgorithm::ring) == 0);
  }
}

TEST_CASE("auto takes the algorithm the cost model chooses on the link it is given", "[mpi][cross]") {
  // Links at the extremes, where the choice does not depend on a part's bytes: all latency
  // (halving-doubling's fewer messages win from 4 nodes on; with 2 or 3 nodes the ring ties or
  // wins) and all bandwidth (the ring wins unless the node count is a power of two: a tie).
  const LinkCost latency{1.0, 1e15}, bandwidth{0.0, 1e3};
  for (const Shape& shape : shapes()) {
    const int nodes = shape.topo.nodes();
    for (const LinkCost link : {latency, bandwidth}) {
      AllreduceOptions o = pipelined(CrossAlgorithm::automatic);
      o.cross_link = link;
      HierAllreduce hier(shape.topo, o);
      const CrossAlgorithm expected = squall::mpi::choose_cross(1000.0, nodes, link);
      INFO(shape.name << ", link alpha " << link.alpha_s << " s, " << link.bytes_per_s << " B/s: expects "
                      << squall::mpi::k_cross_algorithms.name(expected));
      check_sum<float>(hier, 40001, 0);
      CHECK(hier.cross_node() == squall::mpi::k_cross_algorithms.name(expected));
      if (link.alpha_s > 0)
        CHECK((nodes >= 4) == (expected == CrossAlgorithm::halving_doubling));
      else
        CHECK(expected == CrossAlgorithm::ring);
    }
  }
}
