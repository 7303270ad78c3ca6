#pragma once
// The cross-node stage's algorithms and their cost (docs/allreduce.md, "The cross-node
// stage"): the one place that says what each costs on an alpha-beta link and which one a sum
// takes, read both by the allreduce (which algorithm a chunk's part runs) and by the
// performance model (src/perf, which forecasts the same choice). Pure arithmetic, no MPI.
//
// A part of `bytes` is summed among n owners, one per node:
//   ring               2(n-1) steps, each moving bytes/n:
//                        2(n-1) alpha + 2 (n-1)/n bytes / bw
//   halving-doubling   recursive halving (reduce-scatter) then recursive doubling
//                      (allgather) among the largest power of two q <= n, log2(q) steps each,
//                      each moving half of what the last one did; the r = n - q other owners
//                      first hand their whole part to a partner among the q and get the sum
//                      back at the end (two more steps of the whole part):
//                        2 log2(q) alpha + 2 (q-1)/q bytes / bw  [+ 2 (alpha + bytes / bw) when r > 0]
// The latency term of the ring grows with n, that of halving-doubling with log2(n): at
// thousands of nodes a ring's 2(n-1) messages cost more than the data. With n a power of two
// halving-doubling is never dearer; otherwise its two extra steps move the whole part, and a
// large part over a few nodes is cheaper on the ring.
#include <cstddef>

#include "src/core/enum_table.hpp"

namespace squall::mpi {

// parallel.cross_node: auto chooses per sum by choose_cross(); ring and halving-doubling force one.
enum class CrossAlgorithm { automatic, ring, halving_doubling };
inline constexpr auto k_cross_algorithms = enum_table<CrossAlgorithm>({{"auto", CrossAlgorithm::automatic},
                                                                      {"ring", CrossAlgorithm::ring},
                                                                      {"halving-doubling", CrossAlgorithm::halving_doubling}});

// One link between nodes: seconds per message, bytes per second per direction.
struct LinkCost {
  double alpha_s = 20e-6;
  double bytes_per_s = 1.25e9;
};

// The largest power of two <= n (n >= 1), and its log2.
constexpr int pow2_floor(int n) {
  int q = 1;
  while (q * 2 <= n) q *= 2;
  return q;
}
constexpr int log2_floor(int n) {
  int k = 0;
  while ((1 << (k + 1)) <= n) ++k;
  return k;
}

constexpr double ring_seconds(double bytes, int n, LinkCost link) {
  if (n <= 1) return 0.0;
  const double steps = 2.0 * (n - 1);
  return steps * link.alpha_s + steps / n * bytes / link.bytes_per_s;
}

constexpr double halving_doubling_seconds(double bytes, int n, LinkCost link) {
  if (n <= 1) return 0.0;
  const int q = pow2_floor(n);
  const double core = 2.0 * log2_floor(n) * link.alpha_s + 2.0 * (q - 1) / q * bytes / link.bytes_per_s;
  const double fold = q == n ? 0.0 : 2.0 * (link.alpha_s + bytes / link.bytes_per_s);
  return core + fold;
}

constexpr double cross_seconds(CrossAlgorithm algorithm, double bytes, int n, LinkCost link) {
  return algorithm == CrossAlgorithm::halving_doubling ? halving_doubling_seconds(bytes, n, link)
                                                       : ring_seconds(bytes, n, link);
}

// The algorithm a part of `bytes` over n owners takes: `forced` unless it is automatic, else
// the cheaper on `link` (the ring on a tie: with n <= 2 they are the same exchange).
constexpr CrossAlgorithm choose_cross(double bytes, int n, LinkCost link,
                                      CrossAlgorithm forced = CrossAlgorithm::automatic) {
  if (forced != CrossAlgorithm::automatic) return forced;
  return halving_doubling_seconds(bytes, n, link) < ring_seconds(bytes, n, link) ? CrossAlgorithm::halving_doubling
                                                                                 : CrossAlgorithm::ring;
}

}  // namespace squall::mpi
