#include "src/train/spatial_job.hpp"

#include <algorithm>
#include <map>

#include "src/core/error.hpp"
#include "src/nn/models/input_multiple.hpp"
#include "src/nn/models/split_check.hpp"

namespace squall::train {

nn::Shape SpatialJob::tile_sample(const nn::Shape& sample) const {
  if (!place) return sample;
  return nn::Shape(sample.n(), sample.c(), place->rows().size(), place->cols().size());
}

std::string SpatialJob::text() const {
  if (!split_sample()) return "parallel.spatial = [1, 1]: each rank holds whole samples";
  std::string t = "parallel.spatial = " + split.str() + ": " + std::to_string(ranks) + " group(s) of " +
                  std::to_string(split.ranks()) + " ranks, each sample split over a group";
  if (window) t += "; this rank holds " + data::window_text(*window);
  return t;
}

SpatialJob make_spatial_job(const config::Config& cfg, const std::string& origin, const mpi::Topology& topo,
                            const std::vector<int>& node_of_rank) {
  SpatialJob job;
  job.split = config::spatial_split(cfg.parallel);
  if (!job.split_sample()) {
    job.ranks = topo.world_size();
    job.rank = topo.rank();
    job.node_of_rank = node_of_rank;
    job.node = topo.node();
    job.local_rank = topo.local_rank();
    job.nodes = topo.nodes();
    return job;
  }
  try {
    job.groups = std::make_unique<parallel::SpatialGroups>(parallel::make_spatial_groups(topo.world(), job.split));
  } catch (const Error& e) {
    throw UsageError(origin + ": " + e.what());
  }
  const int s = static_cast<int>(job.split.ranks());
  job.group_rank = topo.rank() % s;
  job.ranks = static_cast<int>(job.groups->groups);
  job.rank = static_cast<int>(job.groups->group_index);
  // The groups' nodes, numbered in the order they first appear; a group's place on its node
  // counts the groups before it there.
  std::map<int, int> dense;
  std::vector<int> count;
  for (int g = 0; g < job.ranks; ++g) {
    const int physical = node_of_rank[static_cast<size_t>(g * s)];
    const auto [at, added] = dense.emplace(physical, static_cast<int>(dense.size()));
    if (added) count.push_back(0);
    job.node_of_rank.push_back(at->second);
    if (g == job.rank) {
      job.node = at->second;
      job.local_rank = count[static_cast<size_t>(at->second)];
    }
    ++count[static_cast<size_t>(at->second)];
  }
  job.nodes = static_cast<int>(dense.size());
  // outer sums the inner steps over each node's ranks: a group across two nodes would get two
  // nodes' models on its ranks. Node-local sampling reads the files staged on the group's node
  // (its first rank's: squall stage copies a node's share by its ranks, which is its groups'
  // share when no group crosses a node), which a rank on another node does not have.
  const bool outer = cfg.parallel.algorithm == parallel::Algorithm::outer;
  const bool local = cfg.data.sampling == input::Sampling::local;
  if (outer || local)
    for (int g = 0; g < job.ranks; ++g)
      for (int r = g * s + 1; r < (g + 1) * s; ++r)
        if (node_of_rank[static_cast<size_t>(r)] != node_of_rank[static_cast<size_t>(g * s)])
          throw UsageError(origin + ": parallel.spatial = " + job.split.str() + " puts group " + std::to_string(g) +
                           " (ranks " + std::to_string(g * s) + " to " + std::to_string((g + 1) * s - 1) +
                           ") across two nodes, and " +
                           (outer ? std::string("parallel.algorithm = outer averages inside each node")
                                  : std::string("data.sampling = local reads each node's staged files")) +
                           ": give each node a multiple of " + std::to_string(s) + " ranks");
  job.comm = std::make_unique<parallel::MpiTileComm>(job.groups->group);
  return job;
}

void place_tiles(SpatialJob& job, const config::Config& cfg, const std::string& origin, const nn::ModelSpec& spec,
                 const data::DatasetInfo& info) {
  if (!job.split_sample()) return;
  const nn::Shape& sample = info.sample;
  if (!info.per_pixel_labels)
    throw UsageError(origin + ": parallel.spatial = " + job.split.str() + " splits samples with a label per pixel, "
                     "and data.train = " + cfg.data.train + " (" + info.description + ") has one label per sample: " +
                     "a classifier needs the whole sample on a rank; set parallel.spatial = [1, 1]");
  if (const std::string why = nn::split_refusal(spec, sample, job.split); !why.empty()) {
    const std::optional<nn::SpatialSplit> works = nn::largest_working_split(spec, sample, job.split);
    throw UsageError(origin + ": parallel.spatial = " + job.split.str() + " cannot split this model's " +
                     std::to_string(sample.h()) + "x" + std::to_string(sample.w()) + " samples: " + why + "; " +
                     (works ? "the largest split within it that works is parallel.spatial = " + works->str()
                            : std::string("no split within it works: set parallel.spatial = [1, 1]")));
  }
  job.place = nn::SpatialPlace::make(job.split, job.group_rank, sample.h(), sample.w(), nn::input_multiple(spec));
  job.window = data::Window{job.place->rows().begin, job.place->rows().size(), job.place->cols().begin,
                            job.place->cols().size()};
}

}  // namespace squall::train
