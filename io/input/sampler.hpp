#pragma once
// Which global sample indices each rank reads in an epoch. Pure (no MPI, no I/O): every
// rank computes the same plan from the same inputs, so no communication is needed.
//
// Ranks are addressed by (node, local_rank); node_sizes[n] is the number of ranks on node n.
// Flattening them node by node gives the "slot" s = node_sizes[0] + ... + node_sizes[node-1]
// + local_rank, a number in [0, world_size).
//
// Modes:
//  - global: each epoch a permutation of all N samples (the epoch's order), drawn from (seed,
//    epoch) and the same on every rank, is dealt to the slots like cards: slot s reads
//    order[s], order[s + W], order[s + 2W], ... (W = world_size). After every rank has read c
//    samples the job has read exactly the first c W of the order, whatever its shape; so a job
//    of another shape goes on at that position (`start`) with the next samples of the same
//    order, none read twice and none skipped (docs/training.md, "Elastic resume").
//  - local: shards stay on their node. [0, N) is cut into one contiguous range per node
//    (see node_range() for where the cuts go); each epoch a node's range is permuted from
//    (seed, epoch, node) and cut into local_size contiguous shares. A node only ever reads
//    the files behind its range, which is what `squall stage` copies to it.
//
// Remainder rule (both modes): when M samples are split among K ranks, the first M mod K
// ranks get floor(M/K) + 1 samples, the others floor(M/K). Shares may be empty (more ranks
// than samples). Local mode cuts a node's order into contiguous shares, global mode deals it.
//
// Every epoch the shares are disjoint and their union is every sample exactly once.
// steps_per_epoch() is floor(smallest share / batch): all ranks take that many synchronous
// steps; the samples of a share beyond steps * batch are the epoch's unused remainder (the
// loader draws replacements for bad samples from it), a different set each epoch because of
// the reshuffle.
//
// Permutations use squall's own generator (splitmix64 + Fisher-Yates), not std::shuffle,
// whose algorithm differs between standard libraries: the same seed gives the same epochs on
// every platform.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/enum_table.hpp"

namespace squall::input {

enum class Sampling { global, local };
// Their names (data.sampling, `squall stage --sampling`).
inline constexpr auto k_sampling_modes =
    enum_table<Sampling>({{"global", Sampling::global}, {"local", Sampling::local}});

// node_sizes from the node number of every rank (e.g. an allgather of Topology::node()).
std::vector<int> node_sizes_from(std::span<const int> node_of_rank);
// node_sizes for world_size ranks on nodes of ranks_per_node (the last node may hold fewer).
std::vector<int> uniform_node_sizes(int world_size, int ranks_per_node);

class Sampler {
 public:
  // file_offsets: as DataSource::file_offsets(): files()+1 non-decreasing entries from 0 to N.
  // node_sizes: one entry >= 1 per node. Throws squall::Error when either is malformed.
  Sampler(Sampling mode, std::vector<int64_t> file_offsets, std::vector<int> node_sizes, uint64_t seed);

  Sampling mode() const { return m_mode; }
  int64_t samples() const { return m_offsets.back(); }
  int nodes() const { return static_cast<int>(m_node_sizes.size()); }
  int world_size() const { return m_world_size; }

  // The indices rank (node, local_rank) reads in `epoch`, in reading order; global mode from
  // position `start` of the epoch's order on (the samples before it were read by an earlier
  // job). Local mode takes start = 0 only (its shards stay on their nodes).
  std::vector<int64_t> indices(int64_t epoch, int node, int local_rank, int64_t start = 0) const;
  // How many indices that is (the same for every epoch).
  int64_t share(int node, int local_rank, int64_t start = 0) const;
  // floor(smallest share over all ranks / batch); batch >= 1.
  int64_t steps_per_epoch(int64_t batch, int64_t start = 0) const;

  // Local mode: the global index range [first, last) of `node`. The cuts between nodes sit
  // at the balanced positions k*N/nodes, moved to a file boundary when one lies within 1/16
  // of a node's share, so that whole files stay on one node where that costs little balance;
  // otherwise (and always when there are more nodes than files) a file is split by sample
  // range between neighbouring nodes. Global mode: every node's range is [0, N).
  std::pair<int64_t, int64_t> node_range(int node) const;

  // The file indices `node`'s ranks read: global mode, every file that holds a sample;
  // local mode, the files overlapping node_range(node). Ascending.
  std::vector<int> files_for_node(int node) const;

 private:
  void check_start(int64_t start) const;  // throws squall::Error when start is not a position
  Sampling m_mode;
  std::vector<int64_t> m_offsets;     // file_offsets
  std::vector<int> m_node_sizes;
  std::vector<int64_t> m_node_cuts;   // local mode: nodes+1 cut points, node n owns [cut[n], cut[n+1])
  int m_world_size = 0;
  uint64_t m_seed;
};

}  // namespace squall::input
