// Topology under a real launch: communicators agree with the node plan for several K.
#include <catch2/catch.hpp>

#include <numeric>

#include "mpi/comm.hpp"
#include "mpi/topology.hpp"

using squall::mpi::Communicator;
using squall::mpi::Topology;

TEST_CASE("world, node and cross-node communicators for several K", "[mpi][topology]") {
  const auto world = Communicator::world();
  const int n = world.size(), me = world.rank();
  for (int k : {0, 1, 2, 3, n, n + 1}) {
    INFO("ranks=" << n << " K=" << k);
    const auto t = Topology::create(k);
    const int per = k == 0 ? n : k;  // one physical node under the test launcher
    const int nodes = (n + per - 1) / per;
    CHECK(t.world_size() == n);
    CHECK(t.nodes() == nodes);
    CHECK(t.node() == me / per);
    CHECK(t.local_rank() == me % per);
    CHECK(t.local_size() == std::min(per, n - t.node() * per));

    // The node communicator holds exactly the world ranks of this node, in order.
    CHECK(t.node_comm().size() == t.local_size());
    CHECK(t.node_comm().rank() == t.local_rank());
    const auto members = t.node_comm().allgather(me);
    for (int i = 0; i < static_cast<int>(members.size()); ++i) CHECK(members[static_cast<size_t>(i)] == t.node() * per + i);

    // The cross communicator: one rank per node that has this local rank, ordered by node.
    int expected_cross = 0;
    for (int node = 0; node < nodes; ++node) expected_cross += (std::min(per, n - node * per) > t.local_rank());
    CHECK(t.cross_comm().size() == expected_cross);
    CHECK(t.cross_comm().rank() == t.node());
    const auto cross_members = t.cross_comm().allgather(me);
    for (int i = 0; i < static_cast<int>(cross_members.size()); ++i)
      CHECK(cross_members[static_cast<size_t>(i)] == i * per + t.local_rank());

    // Every rank agrees on the number of nodes.
    CHECK(world.allreduce_min(t.nodes()) == world.allreduce_max(t.nodes()));

    // The machine, whatever K emulates: every rank is on this one, in world order (what
    // picks a rank's GPU and its share of the cores).
    CHECK(t.host_rank() == me);
    CHECK(t.host_ranks() == n);
  }
}

TEST_CASE("string gather and broadcast keep rank order", "[mpi][comm]") {
  const auto world = Communicator::world();
  const auto all = world.gather_strings(std::string(static_cast<size_t>(world.rank()), 'x') + "r" + std::to_string(world.rank()));
  if (world.rank() == 0) {
    REQUIRE(static_cast<int>(all.size()) == world.size());
    for (int r = 0; r < world.size(); ++r)
      CHECK(all[static_cast<size_t>(r)] == std::string(static_cast<size_t>(r), 'x') + "r" + std::to_string(r));
  } else {
    CHECK(all.empty());
  }
  CHECK(world.broadcast_string(world.rank() == 0 ? "from-root" : "ignored") == "from-root");
}

// Hidden: run only by the harness self-test, which expects every rank to fail.
TEST_CASE("self-test: fails on rank 1 only", "[.selftest]") {
  CHECK(Communicator::world().rank() != 1);
}
