#include "io/input/sampler.hpp"
#include "src/core/numeric.hpp"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "src/core/error.hpp"

namespace squall::input {
namespace {

// One generator state per (seed, epoch, stream): streams are 0 for the global permutation
// and node + 1 for a node's local one, so nodes never share a permutation.
uint64_t stream_state(uint64_t seed, int64_t epoch, uint64_t stream) {
  uint64_t s = seed;
  uint64_t a = splitmix64_next(s);
  s = a ^ static_cast<uint64_t>(epoch);
  uint64_t b = splitmix64_next(s);
  s = b ^ (stream * 0xD1B54A32D192ED03ULL);
  return splitmix64_next(s);
}

// Uniform in [0, n) without modulo bias (rejects the short tail of the 2^64 range).
uint64_t bounded(uint64_t& state, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = splitmix64_next(state);
    if (r >= threshold) return r % n;
  }
}

// [first, last) in an order drawn from `state` (Fisher-Yates).
std::vector<int64_t> permutation(int64_t first, int64_t last, uint64_t state) {
  std::vector<int64_t> v(static_cast<size_t>(last - first));
  std::iota(v.begin(), v.end(), first);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[bounded(state, i)]);
  return v;
}

// Share k of M samples split among K ranks: the first M mod K ranks get one more.
std::pair<int64_t, int64_t> split(int64_t m, int64_t k_ranks, int64_t k) {
  const int64_t base = m / k_ranks, extra = m % k_ranks;
  const int64_t begin = k * base + std::min(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

}  // namespace

std::vector<int> node_sizes_from(std::span<const int> node_of_rank) {
  std::vector<int> sizes;
  for (const int n : node_of_rank) {
    if (n < 0) throw Error("negative node number " + std::to_string(n));
    if (static_cast<size_t>(n) >= sizes.size()) sizes.resize(static_cast<size_t>(n) + 1, 0);
    ++sizes[static_cast<size_t>(n)];
  }
  return sizes;
}

std::vector<int> uniform_node_sizes(int world_size, int ranks_per_node) {
  if (world_size < 1 || ranks_per_node < 1) throw Error("uniform_node_sizes: need world_size >= 1 and ranks_per_node >= 1");
  std::vector<int> sizes;
  for (int left = world_size; left > 0; left -= ranks_per_node) sizes.push_back(std::min(left, ranks_per_node));
  return sizes;
}

Sampler::Sampler(Sampling mode, std::vector<int64_t> file_offsets, std::vector<int> node_sizes, uint64_t seed)
    : m_mode(mode), m_offsets(std::move(file_offsets)), m_node_sizes(std::move(node_sizes)), m_seed(seed) {
  if (m_offsets.empty() || m_offsets.front() != 0)
    throw Error("sampler: file offsets must start at 0 (one entry per file plus the total)");
  for (size_t i = 1; i < m_offsets.size(); ++i)
    if (m_offsets[i] < m_offsets[i - 1]) throw Error("sampler: file offsets decrease at file " + std::to_string(i - 1));
  if (m_node_sizes.empty()) throw Error("sampler: no nodes");
  for (const int s : m_node_sizes) {
    if (s < 1) throw Error("sampler: every node needs at least one rank");
    m_world_size += s;
  }

  const int64_t n = samples(), nodes = static_cast<int64_t>(m_node_sizes.size());
  m_node_cuts.assign(static_cast<size_t>(nodes) + 1, 0);
  m_node_cuts.back() = n;
  for (int64_t k = 1; k < nodes; ++k) {
    // Compare in units of 1/nodes so the balanced cut k*N/nodes stays exact.
    const int64_t ideal = k * n;
    auto it = std::lower_bound(m_offsets.begin(), m_offsets.end(), ideal,
                               [nodes](int64_t off, int64_t v) { return off * nodes < v; });
    int64_t best = -1, best_dist = 0;
    for (auto c : {it, it == m_offsets.begin() ? m_offsets.end() : it - 1}) {
      if (c == m_offsets.end()) continue;
      const int64_t dist = std::abs(*c * nodes - ideal);
      if (best < 0 || dist < best_dist) best = *c, best_dist = dist;
    }
    // Within 1/16 of a node's share (N/nodes) of the balanced cut: keep whole files together.
    int64_t cut = (best >= 0 && 16 * best_dist <= n) ? best : ideal / nodes;
    m_node_cuts[static_cast<size_t>(k)] = std::max(cut, m_node_cuts[static_cast<size_t>(k) - 1]);
  }
}

std::pair<int64_t, int64_t> Sampler::node_range(int node) const {
  if (node < 0 || node >= nodes()) throw Error("sampler: node " + std::to_string(node) + " out of range");
  if (m_mode == Sampling::global) return {0, samples()};
  return {m_node_cuts[static_cast<size_t>(node)], m_node_cuts[static_cast<size_t>(node) + 1]};
}

int64_t Sampler::share(int node, int local_rank, int64_t start) const {
  const auto [first, last] = node_range(node);
  const int local_size = m_node_sizes[static_cast<size_t>(node)];
  if (local_rank < 0 || local_rank >= local_size)
    throw Error("sampler: local rank " + std::to_string(local_rank) + " out of range on node " + std::to_string(node));
  check_start(start);
  if (m_mode == Sampling::global) {
    const int slot = std::accumulate(m_node_sizes.begin(), m_node_sizes.begin() + node, 0) + local_rank;
    const auto [b, e] = split(samples() - start, m_world_size, slot);
    return e - b;
  }
  const auto [b, e] = split(last - first, local_size, local_rank);
  return e - b;
}

std::vector<int64_t> Sampler::indices(int64_t epoch, int node, int local_rank, int64_t start) const {
  const int64_t count = share(node, local_rank, start);  // validates node, local_rank and start
  const auto [first, last] = node_range(node);
  if (m_mode == Sampling::global) {
    const std::vector<int64_t> order = permutation(first, last, stream_state(m_seed, epoch, 0));
    const int64_t slot = std::accumulate(m_node_sizes.begin(), m_node_sizes.begin() + node, 0) + local_rank;
    std::vector<int64_t> mine(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      mine[static_cast<size_t>(i)] = order[static_cast<size_t>(start + slot + i * m_world_size)];
    return mine;
  }
  const auto mine = split(last - first, m_node_sizes[static_cast<size_t>(node)], local_rank);
  const std::vector<int64_t> order =
      permutation(first, last, stream_state(m_seed, epoch, static_cast<uint64_t>(node) + 1));
  return {order.begin() + mine.first, order.begin() + mine.second};
}

int64_t Sampler::steps_per_epoch(int64_t batch, int64_t start) const {
  if (batch < 1) throw Error("sampler: batch size must be >= 1, got " + std::to_string(batch));
  check_start(start);
  if (m_mode == Sampling::global) return (samples() - start) / m_world_size / batch;
  int64_t smallest = samples();
  for (int node = 0; node < nodes(); ++node) {
    const auto [first, last] = node_range(node);
    smallest = std::min(smallest, (last - first) / m_node_sizes[static_cast<size_t>(node)]);
  }
  return smallest / batch;
}

void Sampler::check_start(int64_t start) const {
  if (start < 0 || start > samples())
    throw Error("sampler: start position " + std::to_string(start) + " outside the epoch's " +
                std::to_string(samples()) + " samples");
  if (start != 0 && m_mode == Sampling::local)
    throw Error("sampler: data.sampling = local starts epochs at their beginning only (position " +
                std::to_string(start) + " asked)");
}

std::vector<int> Sampler::files_for_node(int node) const {
  const auto [first, last] = node_range(node);
  std::vector<int> files;
  for (size_t i = 0; i + 1 < m_offsets.size(); ++i) {
    const int64_t b = m_offsets[i], e = m_offsets[i + 1];
    if (b < e && b < last && e > first) files.push_back(static_cast<int>(i));
  }
  return files;
}

}  // namespace squall::input
