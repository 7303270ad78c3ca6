#pragma once
// Whether a zoo model runs on the tiles of a split sample (parallel.spatial, docs/training.md
// "One sample across ranks"), checked without a backend or a group: a planning graph per tile
// (Graph::set_tile, then setup()) with a communicator that only says where the rank is.
#include <optional>
#include <string>

#include "src/nn/graph.hpp"
#include "src/nn/spatial.hpp"

namespace squall::nn {

// Why `spec` cannot run on `split` of a sample of `sample`'s shape ("" when it can): the first
// refusal met over the split's tiles (a layer that cannot run on a tile, a tile thinner than a
// halo, a tensor that is no image).
std::string split_refusal(const ModelSpec& spec, const Shape& sample, SpatialSplit split);

// The largest split (most ranks) with at most `limit`'s rows and columns whose every tile the
// model runs on, or nothing.
std::optional<SpatialSplit> largest_working_split(const ModelSpec& spec, const Shape& sample, SpatialSplit limit);

}  // namespace squall::nn
