#include "src/nn/gradient_aliases.hpp"

#include <algorithm>

#include "src/core/error.hpp"

namespace squall::nn {

namespace {

int node_count(const BackwardStructure& g) { return static_cast<int>(g.inputs.size()); }

// Nodes backward visits: the output and every node one of those reads (the graph's input
// excluded: nobody computes its gradient).
std::vector<bool> reaching(const BackwardStructure& g) {
  std::vector<bool> reach(g.inputs.size(), false);
  if (g.output > 0 && g.output < node_count(g)) reach[static_cast<size_t>(g.output)] = true;
  for (int j = node_count(g) - 1; j >= 1; --j) {
    if (!reach[static_cast<size_t>(j)]) continue;
    for (int i : g.inputs[static_cast<size_t>(j)])
      if (i != 0) reach[static_cast<size_t>(i)] = true;
  }
  return reach;
}

// The node that writes each node's gradient first in the reverse walk: its reaching reader of
// the highest id (-1: none).
std::vector<int> first_writers(const BackwardStructure& g, const std::vector<bool>& reach) {
  std::vector<int> first(g.inputs.size(), -1);
  for (int j = node_count(g) - 1; j >= 1; --j) {
    if (!reach[static_cast<size_t>(j)]) continue;
    for (int i : g.inputs[static_cast<size_t>(j)])
      if (first[static_cast<size_t>(i)] < 0) first[static_cast<size_t>(i)] = j;
  }
  return first;
}

bool appears_once(const std::vector<int>& inputs, int i) { return std::count(inputs.begin(), inputs.end(), i) == 1; }

// A per-node flag of the structure; an empty list is all false.
bool flag(const std::vector<bool>& flags, int j) {
  return static_cast<size_t>(j) < flags.size() && flags[static_cast<size_t>(j)];
}

void check_flags(const BackwardStructure& g) {
  SQUALL_CHECK(g.passes_through.size() == g.inputs.size(), "gradient aliases: one entry per node");
  SQUALL_CHECK(g.fused.empty() || g.fused.size() == g.inputs.size(), "gradient aliases: one fused flag per node");
  SQUALL_CHECK(g.overwrites_gradient.empty() || g.overwrites_gradient.size() == g.inputs.size(),
               "gradient aliases: one overwrite flag per node");
  for (int j = 1; j < node_count(g); ++j) {
    const auto& ins = g.inputs[static_cast<size_t>(j)];
    SQUALL_CHECK(!flag(g.fused, j) || (ins.size() == 1 && ins[0] > 0),
                 "gradient aliases: a fused node reads one node, the layer it was fused into");
  }
}

}  // namespace

bool gradient_aliases_safe(const BackwardStructure& g, const std::vector<std::vector<bool>>& alias) {
  const int n = node_count(g);
  check_flags(g);
  SQUALL_CHECK(alias.size() == g.inputs.size(), "gradient aliases: one entry per node");
  const std::vector<bool> reach = reaching(g);
  // slot[k]: whose memory holds node k's gradient; pending[k]: k has yet to read it.
  std::vector<int> slot(g.inputs.size());
  std::vector<bool> pending(g.inputs.size()), written(g.inputs.size(), false);
  for (int k = 0; k < n; ++k) {
    slot[static_cast<size_t>(k)] = k;
    pending[static_cast<size_t>(k)] = k > 0 && reach[static_cast<size_t>(k)];
  }
  // A write to `memory` for node `owner` is safe when no other node that keeps its gradient
  // there still has to read it.
  const auto clobbers = [&](int memory, int owner) {
    for (int k = 1; k < n; ++k)
      if (k != owner && pending[static_cast<size_t>(k)] && slot[static_cast<size_t>(k)] == memory) return true;
    return false;
  };
  for (int j = n - 1; j >= 1; --j) {
    const auto& ins = g.inputs[static_cast<size_t>(j)];
    const auto& hands = alias[static_cast<size_t>(j)];
    SQUALL_CHECK(hands.size() == ins.size(), "gradient aliases: one flag per input");
    if (!reach[static_cast<size_t>(j)]) {
      if (std::find(hands.begin(), hands.end(), true) != hands.end()) return false;
      continue;
    }
    const bool fused = flag(g.fused, j);
    if (fused && !hands[0]) return false;  // its gradient is its layer's memory, whatever the plan says
    // A layer that overwrites its gradient (the fused ReLU's mask) does so first: any other
    // node that keeps its gradient in that memory must have read it already.
    if (flag(g.overwrites_gradient, j) && clobbers(slot[static_cast<size_t>(j)], j)) return false;
    // The layer's call: it reads its gradient (pending still) and overwrites the inputs it
    // writes first; the inputs that already hold a gradient get theirs added after the call.
    std::vector<int> added;
    for (size_t q = 0; q < ins.size(); ++q) {
      const int i = ins[q];
      if (hands[q]) {
        const bool allowed = i != 0 && i != g.output && (fused || g.passes_through[static_cast<size_t>(j)]) &&
                             !written[static_cast<size_t>(i)] && appears_once(ins, i);
        if (!allowed) return false;
        slot[static_cast<size_t>(i)] = slot[static_cast<size_t>(j)];
      } else if (i == 0) {
        continue;
      } else if (!written[static_cast<size_t>(i)]) {
        if (clobbers(slot[static_cast<size_t>(i)], i)) return false;
      } else {
        added.push_back(i);
      }
    }
    pending[static_cast<size_t>(j)] = false;
    for (int i : ins)
      if (i != 0) written[static_cast<size_t>(i)] = true;
    for (int i : added)
      if (clobbers(slot[static_cast<size_t>(i)], i)) return false;
  }
  return true;
}

std::vector<std::vector<bool>> plan_gradient_aliases(const BackwardStructure& g) {
  check_flags(g);
  const std::vector<bool> reach = reaching(g);
  const std::vector<int> first = first_writers(g, reach);
  std::vector<std::vector<bool>> alias(g.inputs.size());
  for (size_t j = 0; j < g.inputs.size(); ++j)
    alias[j].assign(g.inputs[j].size(), reach[j] && flag(g.fused, static_cast<int>(j)));
  for (int j = node_count(g) - 1; j >= 1; --j) {
    if (!reach[static_cast<size_t>(j)] || !g.passes_through[static_cast<size_t>(j)] || flag(g.fused, j)) continue;
    const auto& ins = g.inputs[static_cast<size_t>(j)];
    for (size_t q = 0; q < ins.size(); ++q) {
      const int i = ins[q];
      if (i == 0 || i == g.output || first[static_cast<size_t>(i)] != j || !appears_once(ins, i)) continue;
      alias[static_cast<size_t>(j)][q] = true;
      if (!gradient_aliases_safe(g, alias)) alias[static_cast<size_t>(j)][q] = false;
    }
  }
  return alias;
}

}  // namespace squall::nn
