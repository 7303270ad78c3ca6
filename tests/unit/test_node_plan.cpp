// Node assignment (mpi/node_plan.hpp) for many shapes, without a launcher.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>

#include "mpi/node_plan.hpp"
#include "src/core/error.hpp"

using squall::mpi::NodePlan;
using squall::mpi::plan_nodes;

namespace {

std::vector<int> one_physical_node(int n) { return std::vector<int>(static_cast<size_t>(n), 0); }

// Properties every plan must have, whatever the input.
void check_invariants(const std::vector<int>& physical, int k, const NodePlan& plan) {
  const int n = static_cast<int>(physical.size());
  REQUIRE(static_cast<int>(plan.slots.size()) == n);
  std::map<int, std::set<int>> local_ranks_of_node;
  std::map<int, int> lowest_rank_of_node;
  for (int r = 0; r < n; ++r) {
    const auto& s = plan.slots[static_cast<size_t>(r)];
    REQUIRE(s.node >= 0);
    REQUIRE(s.node < plan.nodes);
    REQUIRE(local_ranks_of_node[s.node].insert(s.local_rank).second);  // unique inside a node
    lowest_rank_of_node.try_emplace(s.node, r);
    if (k > 0) REQUIRE(s.local_size <= k);
  }
  REQUIRE(static_cast<int>(local_ranks_of_node.size()) == plan.nodes);
  for (const auto& [node, locals] : local_ranks_of_node) {
    // local ranks are exactly 0..size-1 and agree with local_size
    REQUIRE(*locals.begin() == 0);
    REQUIRE(*locals.rbegin() == static_cast<int>(locals.size()) - 1);
    for (int r = 0; r < n; ++r)
      if (plan.slots[static_cast<size_t>(r)].node == node)
        REQUIRE(plan.slots[static_cast<size_t>(r)].local_size == static_cast<int>(locals.size()));
  }
  // nodes are numbered in order of their lowest world rank; ranks never share a node
  // across physical nodes
  int previous_lowest = -1;
  for (const auto& [node, lowest] : lowest_rank_of_node) {
    REQUIRE(lowest > previous_lowest);
    previous_lowest = lowest;
  }
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (plan.slots[static_cast<size_t>(a)].node == plan.slots[static_cast<size_t>(b)].node)
        REQUIRE(physical[static_cast<size_t>(a)] == physical[static_cast<size_t>(b)]);
}

}  // namespace

TEST_CASE("one machine cut into emulated nodes of K ranks", "[topology]") {
  struct Case { int n, k, nodes; };
  const Case cases[] = {{1, 0, 1}, {4, 0, 1}, {4, 1, 4}, {4, 2, 2}, {4, 3, 2}, {4, 4, 1},
                        {4, 8, 1}, {5, 2, 3}, {6, 4, 2}, {7, 3, 3}, {16, 5, 4}};
  for (const auto& c : cases) {
    INFO("n=" << c.n << " k=" << c.k);
    const auto plan = plan_nodes(one_physical_node(c.n), c.k);
    CHECK(plan.nodes == c.nodes);
    check_invariants(one_physical_node(c.n), c.k, plan);
    for (int r = 0; r < c.n; ++r) {
      const auto& s = plan.slots[static_cast<size_t>(r)];
      const int k = c.k == 0 ? c.n : c.k;
      CHECK(s.node == r / k);
      CHECK(s.local_rank == r % k);
    }
  }
}

TEST_CASE("5 ranks with K=2 give nodes of 2, 2 and 1", "[topology]") {
  const auto plan = plan_nodes(one_physical_node(5), 2);
  REQUIRE(plan.nodes == 3);
  CHECK(plan.slots[0].local_size == 2);
  CHECK(plan.slots[3].local_size == 2);
  CHECK(plan.slots[4].node == 2);
  CHECK(plan.slots[4].local_rank == 0);
  CHECK(plan.slots[4].local_size == 1);
}

TEST_CASE("physical nodes are kept, and emulation never merges them", "[topology]") {
  // ranks placed round-robin over two hosts: 0,2,4 on host A and 1,3,5 on host B
  const std::vector<int> physical{0, 1, 0, 1, 0, 1};
  const auto plain = plan_nodes(physical, 0);
  REQUIRE(plain.nodes == 2);
  CHECK(plain.slots[1].node == 1);
  CHECK(plain.slots[4].local_rank == 2);
  check_invariants(physical, 0, plain);

  const auto cut = plan_nodes(physical, 2);  // A -> {0,2},{4}; B -> {1,3},{5}
  REQUIRE(cut.nodes == 4);
  CHECK(cut.slots[0].node == 0);
  CHECK(cut.slots[1].node == 1);
  CHECK(cut.slots[4].node == 2);
  CHECK(cut.slots[5].node == 3);
  CHECK(cut.slots[5].local_size == 1);
  check_invariants(physical, 2, cut);
}

TEST_CASE("random layouts keep every invariant", "[topology]") {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    const int hosts = 1 + static_cast<int>(rng() % 5);
    const int k = static_cast<int>(rng() % 7);
    std::vector<int> physical(static_cast<size_t>(n));
    for (auto& p : physical) p = static_cast<int>(rng() % static_cast<unsigned>(hosts)) * 10;
    INFO("trial " << trial << " n=" << n << " k=" << k);
    check_invariants(physical, k, plan_nodes(physical, k));
  }
}

TEST_CASE("a negative ranks-per-node is a usage error naming the flag", "[topology]") {
  REQUIRE_THROWS_AS(plan_nodes(one_physical_node(2), -1), squall::UsageError);
  REQUIRE_THROWS_WITH(plan_nodes(one_physical_node(2), -1), Catch::Contains("--ranks-per-node"));
}
