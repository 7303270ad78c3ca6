#pragma once
// Whether a zoo model runs on the tiles of a split sample (parallel.spatial, docs/training.md
// "One sample across ranks"), checked without a backend or a group: a planning graph per tile
// (Graph::set_tile, then setup()) with a communicator that only says where the rank is.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/nn/graph.hpp"
#include "src/nn/spatial.hpp"

namespace squall::nn {

// A group's communicator for a graph that is only set up (planning: shapes, memory): set_tile
// and setup() ask where the rank is, and nothing communicates before build(); a halo exchange
// or a sum throws.
class PlanningComm final : public TileComm {
 public:
  PlanningComm(int64_t rank, int64_t size) : m_rank(rank), m_size(size) {}
  int64_t group_rank() const override { return m_rank; }
  int64_t group_size() const override { return m_size; }
  std::unique_ptr<Exchange> start(const std::vector<Message>& sends, const std::vector<Message>& receives) override;
  void gather(const double* mine, size_t n, double* all) override;
  HaloTimes halo_times() const override { return {}; }

 private:
  int64_t m_rank, m_size;
};

// Why `spec` cannot run on `split` of a sample of `sample`'s shape ("" when it can): the first
// refusal met over the split's tiles (a layer that cannot run on a tile, a tile thinner than a
// halo, a tensor that is no image).
std::string split_refusal(const ModelSpec& spec, const Shape& sample, SpatialSplit split);

// The largest split (most ranks) with at most `limit`'s rows and columns whose every tile the
// model runs on, or nothing.
std::optional<SpatialSplit> largest_working_split(const ModelSpec& spec, const Shape& sample, SpatialSplit limit);

}  // namespace squall::nn
