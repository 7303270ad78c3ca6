#include "src/nn/memory_plan.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "src/core/error.hpp"

namespace squall::nn {

namespace {

bool meet(const MemoryBlock& a, const MemoryBlock& b) { return a.first <= b.last && b.first <= a.last; }

size_t round_up(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

MemoryPlan plan_memory(const std::vector<MemoryBlock>& blocks, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw Error("plan_memory: the alignment must be a power of two, not " + std::to_string(alignment));
  for (const MemoryBlock& b : blocks)
    if (b.first > b.last)
      throw Error("plan_memory: a block ends (step " + std::to_string(b.last) + ") before it starts (step " +
                  std::to_string(b.first) + ")");
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Largest first; among equals the one that starts first, so that the plan does not depend on
  // the sort's treatment of ties.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].bytes != blocks[b].bytes) return blocks[a].bytes > blocks[b].bytes;
    return blocks[a].first < blocks[b].first;
  });
  MemoryPlan plan;
  plan.offsets.assign(blocks.size(), 0);
  std::vector<size_t> placed;  // block indices, kept sorted by offset
  std::vector<std::pair<size_t, size_t>> busy;
  for (const size_t i : order) {
    const size_t size = round_up(blocks[i].bytes, alignment);
    if (size == 0) continue;  // takes no memory: offset 0
    // The byte ranges of placed blocks alive at the same time, by offset; the first gap that
    // holds this block takes it.
    busy.clear();
    for (const size_t j : placed)
      if (meet(blocks[i], blocks[j]))
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + round_up(blocks[j].bytes, alignment));
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {  // sorted by begin, since `placed` is
      if (offset + size <= begin) break;
      offset = std::max(offset, end);
    }
    plan.offsets[i] = offset;
    plan.bytes = std::max(plan.bytes, offset + size);
    placed.insert(std::upper_bound(placed.begin(), placed.end(), i,
                                   [&](size_t a, size_t b) { return plan.offsets[a] < plan.offsets[b]; }),
                  i);
  }
  return plan;
}

bool memory_plan_valid(const std::vector<MemoryBlock>& blocks, const MemoryPlan& plan, size_t alignment) {
  if (plan.offsets.size() != blocks.size()) return false;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (plan.offsets[i] % alignment != 0 || plan.offsets[i] + blocks[i].bytes > plan.bytes) return false;
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      if (!meet(blocks[i], blocks[j]) || blocks[i].bytes == 0 || blocks[j].bytes == 0) continue;
      const bool apart = plan.offsets[i] + blocks[i].bytes <= plan.offsets[j] ||
                         plan.offsets[j] + blocks[j].bytes <= plan.offsets[i];
      if (!apart) return false;
    }
  }
  return true;
}

}  // namespace squall::nn
