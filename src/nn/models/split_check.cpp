#include "src/nn/models/split_check.hpp"

#include <memory>
#include <vector>

#include "src/core/error.hpp"
#include "src/nn/models/input_multiple.hpp"

namespace squall::nn {
std::unique_ptr<TileComm::Exchange> PlanningComm::start(const std::vector<Message>&, const std::vector<Message>&) {
  throw Error("a graph set up for planning exchanged halos");
}

void PlanningComm::gather(const double*, size_t, double*) {
  throw Error("a graph set up for planning summed over its group");
}

std::string split_refusal(const ModelSpec& spec, const Shape& sample, SpatialSplit split) {
  const int64_t multiple = input_multiple(spec);
  for (int64_t r = 0; r < split.ranks(); ++r) {
    try {
      const SpatialPlace place = SpatialPlace::make(split, r, sample.h(), sample.w(), multiple);
      PlanningComm comm(r, split.ranks());
      auto graph = make_model(spec, Shape(1, sample.c(), sample.h(), sample.w()));
      graph->set_tile(place, &comm);
      graph->setup(1);
    } catch (const Error& e) {
      return e.what();
    }
  }
  return "";
}

std::optional<SpatialSplit> largest_working_split(const ModelSpec& spec, const Shape& sample, SpatialSplit limit) {
  std::optional<SpatialSplit> best;
  for (int64_t rows = 1; rows <= limit.rows; ++rows)
    for (int64_t cols = 1; cols <= limit.cols; ++cols) {
      const SpatialSplit s{rows, cols};
      if (!s.split() || (best && best->ranks() >= s.ranks())) continue;
      if (split_refusal(spec, sample, s).empty()) best = s;
    }
  return best;
}

}  // namespace squall::nn
