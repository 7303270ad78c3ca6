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
// Fusion (docs/design.md, "Inference") adds two facts, per node; empty means none:
// - fused: the node was fused into the layer before it, its one input, whose gradient is
//   then this node's own memory (the graph hands it through, always; the layer's backward
//   does the node's part);
// - overwrites_gradient: the node's backward writes its own gradient memory before it reads
//   it (a convolution that took the ReLU after it masks that gradient in place), so no other
//   node whose gradient lives there may still have to read it.
struct BackwardStructure {
  std::vector<std::vector<int>> inputs;  // per node
  std::vector<bool> passes_through;      // per node
  int output = 0;                        // the node whose gradient the loss writes
  std::vector<bool> fused;               // per node, or empty
  std::vector<bool> overwrites_gradient; // per node, or empty
};

// alias[j][q]: node j's input q takes node j's gradient memory as its own gradient (j must
// pass its gradient through, or be fused, and be that input's first writer in backward's
// reverse order). A fused node's alias is always set; the others are chosen greedily, node by
// node from the last, and kept only where the backward walk (Graph::backward: each node
// reads its gradient, overwrites the gradients of inputs it writes first, and adds into those
// that already hold one; a node that overwrites its gradient writes it first) never writes a
// memory while another node whose gradient lives there has yet to read it.
std::vector<std::vector<bool>> plan_gradient_aliases(const BackwardStructure& graph);

// Whether the walk over `graph` with `alias` ever overwrites a gradient before its node has
// read it (the check plan_gradient_aliases keeps every choice to). For tests.
bool gradient_aliases_safe(const BackwardStructure& graph, const std::vector<std::vector<bool>>& alias);

}  // namespace squall::nn
