#pragma once
// The job's shape: world, node-local and cross-node communicators.
//   node_comm:  the ranks of this rank's node (physical, or emulated with ranks_per_node)
//   cross_comm: the ranks with the same local rank on every node, ordered by node
// The hierarchical allreduce runs its intra-node levels on node_comm and its inter-node
// level on cross_comm. Nodes may hold unequal numbers of ranks.
#include <string>
#include <vector>

#include "mpi/comm.hpp"
#include "mpi/node_plan.hpp"

namespace squall::mpi {

class Topology {
 public:
  // Collective over MPI_COMM_WORLD. ranks_per_node: 0 = physical nodes, K > 0 = emulate
  // nodes of K ranks (see node_plan.hpp).
  static Topology create(int ranks_per_node);
  // Collective over MPI_COMM_WORLD: nodes laid out by `plan` (one slot per world rank, as
  // plan_nodes makes them), for tests of node shapes that a launch on one machine cannot make
  // (interleaved nodes, any mix of sizes).
  static Topology from_plan(const NodePlan& plan);

  int rank() const { return m_world.rank(); }
  int world_size() const { return m_world.size(); }
  int node() const { return m_slot.node; }
  int nodes() const { return m_nodes; }
  int local_rank() const { return m_slot.local_rank; }
  int local_size() const { return m_slot.local_size; }
  int ranks_per_node() const { return m_ranks_per_node; }  // 0 when not emulated
  bool emulated() const { return m_ranks_per_node > 0; }
  const std::string& host() const { return m_host; }
  // This rank's place among the ranks on its machine (same host name), and their count,
  // whatever --ranks-per-node emulates: what picks a rank's GPU and its share of the cores.
  int host_rank() const { return m_host_rank; }
  int host_ranks() const { return m_host_ranks; }

  const Communicator& world() const { return m_world; }
  const Communicator& node_comm() const { return m_node; }
  const Communicator& cross_comm() const { return m_cross; }

 private:
  static Topology with_plan(const NodePlan& plan, int ranks_per_node);

  Communicator m_world, m_node, m_cross;
  NodeSlot m_slot;
  int m_nodes = 1;
  int m_ranks_per_node = 0;
  std::string m_host;
  int m_host_rank = 0, m_host_ranks = 1;
};

// Resolves the emulation setting: the flag when given (>= 0), else SQUALL_RANKS_PER_NODE,
// else 0. Throws UsageError naming the variable when it is not a non-negative integer.
int resolve_ranks_per_node(int flag_value);

}  // namespace squall::mpi
