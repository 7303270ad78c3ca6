#include "mpi/node_plan.hpp"

#include <map>
#include <string>
#include <utility>

#include "src/core/error.hpp"

namespace squall::mpi {

NodePlan plan_nodes(const std::vector<int>& physical_node_of_rank, int ranks_per_node) {
  if (ranks_per_node < 0)
    throw UsageError("--ranks-per-node must be >= 0 (0 keeps the physical nodes), got " +
                     std::to_string(ranks_per_node));
  const int n = static_cast<int>(physical_node_of_rank.size());
  NodePlan plan;
  plan.slots.resize(static_cast<size_t>(n));

  // Pass 1: position of each rank inside its physical node, in world-rank order.
  std::map<int, int> seen_on_physical;  // physical node -> ranks seen so far
  std::vector<std::pair<int, int>> key(static_cast<size_t>(n));  // (physical node, sub-node)
  for (int r = 0; r < n; ++r) {
    const int phys = physical_node_of_rank[static_cast<size_t>(r)];
    const int pos = seen_on_physical[phys]++;
    const int sub = ranks_per_node > 0 ? pos / ranks_per_node : 0;
    key[static_cast<size_t>(r)] = {phys, sub};
    plan.slots[static_cast<size_t>(r)].local_rank = ranks_per_node > 0 ? pos % ranks_per_node : pos;
  }
  // Pass 2: number nodes by their lowest world rank; count their sizes.
  std::map<std::pair<int, int>, int> node_of_key;
  std::vector<int> size_of_node;
  for (int r = 0; r < n; ++r) {
    auto [it, inserted] = node_of_key.try_emplace(key[static_cast<size_t>(r)], static_cast<int>(size_of_node.size()));
    if (inserted) size_of_node.push_back(0);
    plan.slots[static_cast<size_t>(r)].node = it->second;
    ++size_of_node[static_cast<size_t>(it->second)];
  }
  for (auto& s : plan.slots) s.local_size = size_of_node[static_cast<size_t>(s.node)];
  plan.nodes = static_cast<int>(size_of_node.size());
  return plan;
}

}  // namespace squall::mpi
