#pragma once
// Which gradients the backward pass may hand through instead of copying (docs/design.md,
// "The residual add's backward"). A layer whose backward writes its output gradient unchanged
// into every input gradient (the residual add) need not copy it: an input's gradient can be
// the layer's own output gradient, the same memory, when nothing would overwrite that memory
// while another node still has to read it. A pure function of the graph's structure, decided
// once when the graph is built, so that it can be checked on hand-made structures.
#include <vector>

namespace squall::nn {

// The structure backward walks: node 0 is the graph's input, every other node lists the
// nodes it reads (all of lower id) and says whether its gradient passes through unchanged.
struct BackwardStructure {
  std::vector<std::vector<int>> inputs;  // per node
  std::vector<bool> passes_through;      // per node
  int output = 0;                        // the node whose gradient the loss writes
};

// alias[j][q]: node j's input q takes node j's gradient memory as its own gradient (j must
// pass its gradient through, and be that input's first writer in backward's reverse order).
// Chosen greedily, node by node from the last, and kept only where the backward walk
// (Graph::backward: each node reads its gradient, overwrites the gradients of inputs it
// writes first, and adds into those that already hold one) never writes a memory while
// another node whose gradient lives there has yet to read it.
std::vector<std::vector<bool>> plan_gradient_aliases(const BackwardStructure& graph);

// Whether the walk over `graph` with `alias` ever overwrites a gradient before its node has
// read it (the check plan_gradient_aliases keeps every choice to). For tests.
bool gradient_aliases_safe(const BackwardStructure& graph, const std::vector<std::vector<bool>>& alias);

}  // namespace squall::nn
