#include "mpi/topology.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "src/core/error.hpp"

namespace squall::mpi {
namespace {

std::string processor_name() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  SQUALL_MPI_CHECK(MPI_Get_processor_name(name, &len));
  return std::string(name, static_cast<size_t>(len));
}

}  // namespace

Topology Topology::create(int ranks_per_node) {
  const auto world = Communicator::world();
  const int rank = world.rank();

  // Physical node = shared-memory domain, identified by its lowest world rank.
  MPI_Comm shared = MPI_COMM_NULL;
  SQUALL_MPI_CHECK(MPI_Comm_split_type(native_handle(world), MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared));
  int leader = rank;
  SQUALL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shared));
  SQUALL_MPI_CHECK(MPI_Comm_free(&shared));

  const std::vector<int> physical = world.allgather(leader);
  return with_plan(plan_nodes(physical, ranks_per_node), ranks_per_node);
}

Topology Topology::from_plan(const NodePlan& plan) { return with_plan(plan, 0); }

Topology Topology::with_plan(const NodePlan& plan, int ranks_per_node) {
  Topology t;
  t.m_world = Communicator::world();
  t.m_ranks_per_node = ranks_per_node;
  t.m_host = processor_name();
  SQUALL_CHECK(static_cast<int>(plan.slots.size()) == t.world_size(), "a node plan needs one slot per world rank");
  t.m_slot = plan.slots[static_cast<size_t>(t.rank())];
  t.m_nodes = plan.nodes;
  t.m_node = t.m_world.split(t.m_slot.node, t.m_slot.local_rank);
  t.m_cross = t.m_world.split(t.m_slot.local_rank, t.m_slot.node);
  const std::vector<int> hosts =
      t.m_world.allgather(static_cast<int>(std::hash<std::string>{}(t.m_host) & 0x7fffffff));
  const int mine = hosts[static_cast<size_t>(t.rank())];
  t.m_host_rank = static_cast<int>(std::count(hosts.begin(), hosts.begin() + t.rank(), mine));
  t.m_host_ranks = static_cast<int>(std::count(hosts.begin(), hosts.end(), mine));
  return t;
}

int resolve_ranks_per_node(int flag_value) {
  if (flag_value >= 0) return flag_value;
  const char* env = std::getenv("SQUALL_RANKS_PER_NODE");
  if (env == nullptr || *env == '\0') return 0;
  int value = -1;
  const char* end = env + std::strlen(env);
  const auto [ptr, ec] = std::from_chars(env, end, value);
  if (ec != std::errc() || ptr != end || value < 0)
    throw UsageError(std::string("SQUALL_RANKS_PER_NODE must be a non-negative integer, got '") + env + "'");
  return value;
}

}  // namespace squall::mpi
