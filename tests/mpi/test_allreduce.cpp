// The hierarchical allreduce against MPI_Allreduce under a real launch: node shapes from
// --ranks-per-node K = 1, 2, 3 and explicit plans (interleaved nodes, unequal sizes), every
// type, sizes at the edges (0, 1, odd, not divisible by the rank count, many chunks), the flat
// and the pipelined path; repeated calls, the level hook, and the stall fault's parser.
//
// Only CHECK inside collective loops: a REQUIRE that fails on one rank would leave the others
// waiting in the next collective.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "mpi/allreduce.hpp"
#include "mpi/comm.hpp"
#include "mpi/stall.hpp"
#include "mpi/topology.hpp"
#include "src/core/error.hpp"
#include "tests/support/allreduce_data.hpp"

using squall::mpi::AllreduceOptions;
using squall::mpi::Communicator;
using squall::mpi::DType;
using squall::mpi::HierAllreduce;
using squall::mpi::Topology;
using squall::test::dtype_of;
using squall::test::mpi_type_of;
using squall::test::fingerprint;

namespace {

struct Shape {
  std::string name;
  Topology topo;
};

// Every node layout worth checking at this rank count; the same list on every rank.
std::vector<Shape> shapes() {
  const int n = Communicator::world().size();
  std::vector<Shape> out;
  for (int k : {1, 2, 3}) out.push_back({"K=" + std::to_string(k), Topology::create(k)});
  std::vector<int> interleaved, last_alone;
  for (int r = 0; r < n; ++r) {
    interleaved.push_back(r % 2);
    last_alone.push_back(r + 1 == n && n > 1 ? 1 : 0);
  }
  out.push_back({"interleaved nodes", Topology::from_plan(squall::mpi::plan_nodes(interleaved, 0))});
  out.push_back({"last rank alone", Topology::from_plan(squall::mpi::plan_nodes(last_alone, 0))});
  return out;
}

// Sums `count` elements with `hier` and with MPI_Allreduce; counts the elements that differ
// (beyond rounding for floating point), and checks that every rank holds the same bits.
template <typename T>
void check_sum(HierAllreduce& hier, size_t count) {
  const auto world = Communicator::world();
  const int n = world.size();
  auto mine = squall::test::make_data<T>(count, world.rank());
  auto expected = mine;
  if (count > 0)
    MPI_Allreduce(MPI_IN_PLACE, expected.data(), static_cast<int>(count), mpi_type_of<T>(), MPI_SUM, MPI_COMM_WORLD);
  hier.sum(mine.data(), count, dtype_of<T>(), "test");

  CHECK(squall::test::count_wrong(mine, expected, n) == 0);
  const int64_t f = fingerprint(mine.data(), count * sizeof(T));
  CHECK(world.allreduce_min(f) == world.allreduce_max(f));
}

template <typename T>
void check_sizes(const Topology& topo, bool flat) {
  const int n = topo.world_size();
  const size_t large = (3 << 20) / sizeof(T) + 5;  // 3 MiB and a bit: many chunks in flight
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, static_cast<size_t>(n) * 3 + 1, large})
  for (size_t small : {size_t{0}, AllreduceOptions{}.small_bytes}) {
    AllreduceOptions o;
    o.flat_single_level = flat;
    o.small_bytes = small;  // 0: even one element goes through the levels
    // Small buffers in chunks of two elements, so that parts of a chunk are empty on some ranks.
    o.chunk_bytes = count < 1000 ? 2 * sizeof(T) : 64 << 10;
    o.flat_chunk_bytes = o.chunk_bytes;
    o.max_inflight = count < 1000 ? 3 : 4;
    HierAllreduce hier(topo, o);
    INFO("type " << squall::mpi::dtype_name(dtype_of<T>()) << ", count " << count << ", mode " << hier.mode()
                  << ", small_bytes " << small);
    check_sum<T>(hier, count);
  }
}

}  // namespace

TEST_CASE("hierarchical allreduce equals MPI_Allreduce on every node shape", "[mpi][allreduce]") {
  for (const Shape& shape : shapes()) {
    for (bool flat : {true, false}) {
      INFO(shape.name << " (" << shape.topo.nodes() << " nodes, local size " << shape.topo.local_size() << "), "
                      << (flat ? "flat where one level" : "always pipelined"));
      check_sizes<float>(shape.topo, flat);
      check_sizes<double>(shape.topo, flat);
      check_sizes<int32_t>(shape.topo, flat);
      check_sizes<int64_t>(shape.topo, flat);
    }
  }
}

TEST_CASE("unequal nodes split chunks into lcm(node sizes) parts", "[mpi][allreduce]") {
  const int n = Communicator::world().size();
  const auto topo = Topology::create(3);  // 4 ranks: nodes of 3 and 1
  HierAllreduce hier(topo);
  if (n == 4) {
    CHECK(std::string(hier.mode()) == "pipeline");
    CHECK(hier.parts() == 3);
  }
  // A cap below the lcm falls back to one MPI_Allreduce, with the same result.
  AllreduceOptions capped;
  capped.max_parts = 2;
  HierAllreduce flat(topo, capped);
  if (n == 4) CHECK(std::string(flat.mode()) == "flat");
  check_sum<int64_t>(flat, 1001);
  check_sum<float>(hier, 1001);
}

TEST_CASE("many sums in a row, alternating sizes, on one reducer", "[mpi][allreduce]") {
  for (bool flat : {true, false})
  for (size_t small : {size_t{0}, size_t{8192}}) {
    const auto topo = Topology::create(2);
    AllreduceOptions o;
    o.chunk_bytes = 4096;
    o.max_inflight = 2;
    o.flat_single_level = flat;
    o.small_bytes = small;
    HierAllreduce hier(topo, o);
    const size_t sizes[] = {1, 1000, 100000, 7, 0, 4097};
    for (int i = 0; i < 60; ++i) {
      INFO("call " << i + 1);
      if (i % 2)
        check_sum<float>(hier, sizes[i % 6]);
      else
        check_sum<int32_t>(hier, sizes[i % 6]);
    }
    CHECK(hier.calls() == 60);
    CHECK(hier.seconds() > 0);
  }
}

TEST_CASE("the level hook sees every stage of every chunk", "[mpi][allreduce]") {
  const auto topo = Topology::create(2);
  const int n = topo.world_size();
  AllreduceOptions o;
  o.chunk_bytes = 4096;  // 10000 floats: 10 chunks
  o.flat_single_level = false;
  o.small_bytes = 0;
  HierAllreduce hier(topo, o);
  std::map<std::string, std::pair<int, size_t>> seen;  // level -> (stages, bytes)
  bool ordered = true;
  hier.set_level_hook([&](squall::mpi::Level level, double t0, double t1, size_t bytes) {
    auto& s = seen[squall::mpi::level_name(level)];
    ++s.first;
    s.second += bytes;
    ordered = ordered && t0 <= t1 && t0 > 0;
  });
  check_sum<float>(hier, 10000);
  CHECK(ordered);
  if (n == 1) {
    CHECK(seen.empty());
    return;
  }
  if (topo.local_size() > 1) {
    CHECK(seen["node_reduce_scatter"] == std::pair<int, size_t>{10, 40000});
    CHECK(seen["node_allgather"] == std::pair<int, size_t>{10, 40000});
  }
  if (topo.nodes() > 1) {
    CHECK(seen["cross_allreduce"].first == 10);
    CHECK(seen["cross_allreduce"].second > 0);
    CHECK(hier.level_seconds(squall::mpi::Level::cross_allreduce) > 0);
  } else {
    CHECK(seen.count("cross_allreduce") == 0);
  }
  // The flat path reports one "allreduce" stage per chunk.
  const auto one_node = Topology::create(0);
  HierAllreduce flat(one_node, AllreduceOptions{.flat_chunk_bytes = 16000, .small_bytes = 0});
  std::vector<size_t> flat_bytes;
  flat.set_level_hook([&](squall::mpi::Level level, double, double, size_t bytes) {
    CHECK(level == squall::mpi::Level::flat_allreduce);
    CHECK(std::string(squall::mpi::level_name(level)) == "allreduce");
    flat_bytes.push_back(bytes);
  });
  check_sum<float>(flat, 10000);
  CHECK(flat_bytes == std::vector<size_t>{16000, 16000, 8000});
}

TEST_CASE("several sums in flight at once: started together, completed in any order", "[mpi][allreduce]") {
  const auto world = Communicator::world();
  const int n = world.size();
  for (const Shape& shape : shapes())
  for (bool flat : {true, false}) {
    AllreduceOptions o;
    o.chunk_bytes = 8192;
    o.max_inflight = 3;
    o.flat_single_level = flat;
    o.small_bytes = 4096;
    HierAllreduce hier(shape.topo, o);
    INFO(shape.name << ", mode " << hier.mode());
    // Small and large sums mixed: one MPI_Iallreduce, several chunks, an empty one.
    const std::vector<size_t> counts = {5000, 3, 20000, 0, 1000, 7777};
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
      tickets.push_back(hier.start(bufs[i].data(), counts[i], "bucket " + std::to_string(i + 1)));
    // Every non-empty sum was handed over before any was waited for.
    if (n > 1) CHECK(hier.max_in_flight() >= 2);
    hier.test(tickets[2]);
    for (size_t i = counts.size(); i-- > 0;) hier.wait(tickets[i]);  // newest first
    CHECK(hier.in_flight() == 0);
    CHECK(hier.test(tickets[0]));
    size_t wrong = 0;
    for (size_t i = 0; i < counts.size(); ++i)
      for (size_t e = 0; e < counts[i]; ++e) wrong += std::abs(bufs[i][e] - expected[i][e]) > 1e-5f * n * (n + 1);
    CHECK(wrong == 0);
    // A new round after wait_all: the ticket numbers go on.
    auto again = squall::test::make_data<float>(30000, world.rank());
    auto want = again;
    MPI_Allreduce(MPI_IN_PLACE, want.data(), 30000, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const auto t = hier.start(again.data(), again.size(), "again");
    CHECK(t == static_cast<HierAllreduce::Ticket>(counts.size()) + 1);
    hier.wait_all();
    wrong = 0;
    for (size_t e = 0; e < again.size(); ++e) wrong += std::abs(again[e] - want[e]) > 1e-5f * n * (n + 1);
    CHECK(wrong == 0);
  }
}

TEST_CASE("SQUALL_STALL_AT is parsed strictly", "[mpi][stall]") {
  using squall::mpi::parse_stall_fault;
  CHECK_FALSE(parse_stall_fault(nullptr).has_value());
  CHECK_FALSE(parse_stall_fault("").has_value());
  const auto f = parse_stall_fault("1:2");
  REQUIRE(f.has_value());
  CHECK(f->rank == 1);
  CHECK(f->call == 2);
  CHECK(f->seconds == 3600);
  const auto g = parse_stall_fault("0:12:1.5");
  REQUIRE(g.has_value());
  CHECK(g->rank == 0);
  CHECK(g->call == 12);
  CHECK(g->seconds == 1.5);
  for (const char* bad : {"1", "a:2", "1:0", "-1:2", "1:2:x", "1:2:3:4", "1:2:", ":2", "1::3", "1:2:-1", " 1:2"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_stall_fault(bad), squall::UsageError);
    CHECK_THROWS_WITH(parse_stall_fault(bad), Catch::Contains("SQUALL_STALL_AT") && Catch::Contains(bad));
  }
}

namespace {

uint16_t to_bf16(float f) {  // round to nearest even (finite values)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("bf16 sums: half the bytes, within a rounding per addition of the exact sum, the same bits everywhere",
          "[mpi][allreduce]") {
  const auto world = Communicator::world();
  const int n = world.size();
  for (const Shape& shape : shapes()) {
    for (bool flat : {true, false}) {
      const size_t count = (1 << 20) + 3;  // 2 MiB of bf16: many chunks
      AllreduceOptions o;
      o.flat_single_level = flat;
      o.chunk_bytes = 64 << 10;
      HierAllreduce hier(shape.topo, o);
      INFO(shape.name << ", mode " << hier.mode());
      const auto mine = squall::test::make_data<float>(count, world.rank());
      std::vector<uint16_t> data(count);
      std::vector<double> exact(count), magnitude(count);
      for (size_t i = 0; i < count; ++i) {
        data[i] = to_bf16(mine[i]);
        exact[i] = from_bf16(data[i]);
        magnitude[i] = std::abs(exact[i]);
      }
      MPI_Allreduce(MPI_IN_PLACE, exact.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, magnitude.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      hier.sum(data.data(), count, DType::bf16, "bf16 test");
      size_t wrong = 0, rounded = 0;
      for (size_t i = 0; i < count; ++i) {
        const double got = from_bf16(data[i]);
        // n - 1 additions, each rounding by at most half an ulp of a partial sum <= sum |x|.
        wrong += std::abs(got - exact[i]) > (n - 1) * std::ldexp(magnitude[i], -8) + 1e-30;
        rounded += got != exact[i];
      }
      CHECK(wrong == 0);
      if (n > 1) CHECK(rounded > 0);  // summed in bf16, not in f32
      const int64_t f = fingerprint(data.data(), count * sizeof(uint16_t));
      CHECK(world.allreduce_min(f) == world.allreduce_max(f));
    }
  }
}
