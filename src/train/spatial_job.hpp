#pragma once
// parallel.spatial in a training job (docs/training.md, "One sample across ranks"): the job's
// ranks cut into groups that each hold one sample at a time, a tile per rank, and the job's
// data-parallel shape seen through the groups: the sampler, the plan of steps and the schedule
// count groups where they counted ranks (a group takes one learner's samples), the nodes of
// the groups' first ranks where they counted nodes.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpi/topology.hpp"
#include "src/config/config.hpp"
#include "src/data/data_source.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/spatial.hpp"
#include "src/parallel/tile_comm.hpp"

namespace squall::train {

struct SpatialJob {
  nn::SpatialSplit split;  // [1, 1]: no split, and the rest is the topology's own shape
  std::unique_ptr<parallel::SpatialGroups> groups;  // null without a split
  std::unique_ptr<parallel::MpiTileComm> comm;      // this rank's group (null without a split)
  int64_t group_rank = 0;                           // this rank's tile in its group
  // The data-parallel shape: one "rank" per group.
  int ranks = 1, rank = 0;          // groups, and this rank's group
  std::vector<int> node_of_rank;    // each group's node (its first rank's), numbered from 0
  int node = 0, local_rank = 0, nodes = 1;  // this rank's group's node and its place there
  // This rank's tile of every sample (after place_tiles), and the window the loader reads.
  std::optional<nn::SpatialPlace> place;
  std::optional<data::Window> window;

  bool split_sample() const { return split.split(); }
  nn::TileComm* tile_comm() const { return comm.get(); }
  // The sample's shape on this rank: the tile's rows and columns.
  nn::Shape tile_sample(const nn::Shape& sample) const;
  // "parallel.spatial = [2, 1]: 2 groups of 2 ranks, this rank holds rows [0, 384) x columns [0, 1152)"
  std::string text() const;
};

// Collective over the topology's world. Without a split: the topology's shape. With one:
// the groups (parallel::make_spatial_groups, which refuses a world size the split does not
// divide), their communicator, and their shape. Throws UsageError naming parallel.spatial
// where an algorithm needs each group inside one node (outer's node sums) and one is not.
SpatialJob make_spatial_job(const config::Config& cfg, const std::string& origin, const mpi::Topology& topo,
                            const std::vector<int>& node_of_rank);

// Places this rank's tile in a sample of `sample` (the training data's shape, on the model's
// grid) and checks that the model runs on every tile of the split: a layer that cannot run on
// a tile, or a tile thinner than a layer's halo, is refused naming the layer, the key and the
// largest split that works (UsageError).
// A training set with one label per sample (a classifier's) is refused too.
void place_tiles(SpatialJob& job, const config::Config& cfg, const std::string& origin, const nn::ModelSpec& spec,
                 const data::DatasetInfo& info);

}  // namespace squall::train
