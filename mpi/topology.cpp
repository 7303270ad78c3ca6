#include "mpi/topology.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "mpi/check.hpp"
#include "mpi/comm_native.hpp"
#include "src/core/error.hpp"

namespace squall::mpi {

Topology Topology::create(int ranks_per_node) {
  Topology t;
  t.m_world = Communicator::world();
  t.m_ranks_per_node = ranks_per_node;
  MPI_Comm world = native_handle(t.m_world);

  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  SQUALL_MPI_CHECK(MPI_Get_processor_name(name, &len));
  t.m_host.assign(name, static_cast<size_t>(len));

  // Physical node = shared-memory domain, identified by its lowest world rank.
  MPI_Comm shared = MPI_COMM_NULL;
  SQUALL_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t.rank(), MPI_INFO_NULL, &shared));
  int leader = t.rank();
  SQUALL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shared));
  SQUALL_MPI_CHECK(MPI_Comm_free(&shared));

  const std::vector<int> physical = t.m_world.allgather(leader);
  const NodePlan plan = plan_nodes(physical, ranks_per_node);
  t.m_slot = plan.slots[static_cast<size_t>(t.rank())];
  t.m_nodes = plan.nodes;
  t.m_node = t.m_world.split(t.m_slot.node, t.m_slot.local_rank);
  t.m_cross = t.m_world.split(t.m_slot.local_rank, t.m_slot.node);
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
