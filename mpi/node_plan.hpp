#pragma once
// Pure node-assignment logic, separate from MPI so it can be unit-tested for any shape.
//
// Input: for every world rank, the index of the physical node (shared-memory domain) it
// runs on. With ranks_per_node K > 0, each physical node is cut into emulated nodes of K
// consecutive ranks (by world rank); the last one on a physical node may be smaller
// (5 ranks, K=2 -> nodes of 2, 2, 1). K = 0 keeps the physical nodes. Nodes are numbered
// in order of their lowest world rank, so node 0 always holds rank 0.
#include <vector>

namespace squall::mpi {

struct NodeSlot {
  int node = 0;        // node index, 0..nodes-1
  int local_rank = 0;  // position of the rank inside its node
  int local_size = 1;  // ranks on its node
};

struct NodePlan {
  int nodes = 0;
  std::vector<NodeSlot> slots;  // one per world rank
};

// Throws squall::UsageError for ranks_per_node < 0.
NodePlan plan_nodes(const std::vector<int>& physical_node_of_rank, int ranks_per_node);

}  // namespace squall::mpi
