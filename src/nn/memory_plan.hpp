#pragma once
// Where a graph's activations live (docs/design.md, "Activation memory"): blocks that are
// never in use at the same time share memory. Each block says when it is first written and
// last read as an interval of steps; two blocks whose intervals meet get disjoint byte ranges,
// two whose intervals do not may overlap. The graph uses it twice: for the gradients of a
// training graph (a node's gradient lives from the backward of its last reader down to its own
// backward), and for the values of a forward-only graph (a node's value lives from its own
// forward to the forward of its last reader). A pure function, so that it can be checked on
// made-up blocks.
#include <cstddef>
#include <vector>

namespace squall::nn {

struct MemoryBlock {
  size_t bytes = 0;
  int first = 0, last = 0;  // the steps it is in use, both included (first <= last)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // per block, in bytes, each a multiple of the alignment
  size_t bytes = 0;             // the whole region: the end of the block that ends last
};

// Greedy, largest block first, each at the lowest aligned offset where it overlaps no block
// already placed whose interval meets its own (the arena planners of inference runtimes do
// the same). `alignment` must be a power of two.
MemoryPlan plan_memory(const std::vector<MemoryBlock>& blocks, size_t alignment);

// Whether `plan` gives every two blocks whose intervals meet disjoint byte ranges inside
// plan.bytes, each aligned. For tests.
bool memory_plan_valid(const std::vector<MemoryBlock>& blocks, const MemoryPlan& plan, size_t alignment);

}  // namespace squall::nn
