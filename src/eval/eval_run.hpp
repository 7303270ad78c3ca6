#pragma once
// One `squall eval` (docs/training.md, "Evaluating a checkpoint"): the checkpoint's central
// model, rebuilt from the run's own config, on a test set. The test samples are split over the
// ranks and summed, as training's evaluation does, so the final checkpoint of a run reproduces
// the run's final test loss and accuracy on the same samples.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpi/topology.hpp"
#include "io/checkpoint/named_weights.hpp"
#include "src/eval/evaluate.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/config/config.hpp"
#include "io/input/open_dataset.hpp"
#include "src/nn/spatial.hpp"
#include "src/parallel/tile_comm.hpp"

namespace squall::eval {

struct EvalOptions {
  std::vector<std::string> overrides;  // --set: keys of the checkpoint's config
  std::string data;                    // --data: the test set instead of the config's data.test ("": keep it)
  std::optional<nn::SpatialSplit> spatial;  // --spatial: the split instead of the run's parallel.spatial
};

// One sample across ranks at eval and predict (docs/inference.md, "One sample across ranks"):
// the job's ranks cut into groups of split.ranks() consecutive ranks, as training cuts them
// (parallel::make_spatial_groups); each group takes a share of the samples (files), each of
// its ranks reads and runs its tile of every one.
struct TileGroups {
  nn::SpatialSplit split;   // [1, 1]: whole samples on every rank, and nothing below is set
  std::string origin;       // where the split came from, for messages: "--spatial 2,1" or the run's key
  std::unique_ptr<parallel::SpatialGroups> groups;
  std::unique_ptr<parallel::MpiTileComm> comm;  // must outlive the graph that runs on it
  int64_t group_rank = 0;   // this rank's tile
  int64_t count = 1, index = 0;  // the groups (one per rank without a split), and this rank's
  // This rank's tile of every sample and the window it reads (place_tile).
  std::optional<nn::SpatialPlace> place;
  std::optional<data::Window> window;

  bool split_sample() const { return split.split(); }
  // The group's first rank: the one that writes what the group made.
  bool first() const { return group_rank == 0; }
};

// The split eval and predict run with: `flag` (--spatial) when given, else the run's
// parallel.spatial in `cfg`. Throws UsageError naming the split, where it came from, the world
// size and what to do when the world is not a multiple of the split's ranks. No collective:
// every rank decides the same (and learns its group rank).
TileGroups inference_split(const config::Config& cfg, const std::optional<nn::SpatialSplit>& flag,
                           const mpi::Communicator& world);
// Collective over `world`: the groups and their communicator (nothing without a split).
void make_tile_groups(TileGroups& t, const mpi::Communicator& world);
// This rank's tile of samples of `info`'s shape, checked as training checks it: a model that
// cannot run on the split's tiles, or data with one label per sample, is refused naming the
// split, `what` (the data) and the largest split that works (UsageError). Nothing without a split.
void place_tile(TileGroups& t, const nn::ModelSpec& spec, const data::DatasetInfo& info, const std::string& what);

struct EvalResult {
  std::string model;                    // the checkpoint's model ("lenet5")
  int64_t step = 0;                     // the checkpoint's step
  std::string data_path;                // the test set evaluated on, and what it is
  std::string data_description;         // "Fashion-MNIST test (IDX, 10000 samples)"
  bool per_pixel_labels = false;        // segmentation: IoU per class is what matters
  std::vector<std::string> class_names;
  EvalPart part{nn::ConfusionMatrix(1)};    // summed over the ranks
  double eval_s = 0;                    // the evaluation itself, without reading and building
  int world_size = 1;
  nn::SpatialSplit spatial;             // the split it ran with ([1, 1]: whole samples)
};

// The checkpoint's config with --set overrides applied. A config that does not read back is
// the checkpoint's fault (Error, exit 1); an override that is refused, the user's (UsageError).
config::Config checkpoint_config(const checkpoint::CheckpointModel& ck, const std::vector<std::string>& overrides);

// The model the checkpoint's config makes for samples like `data`'s, checked against the data
// and the checkpoint before anything is allocated: a UsageError naming `key` `data_path`, the
// checkpoint and what each has.
nn::ModelSpec fit_checkpoint_model(const checkpoint::CheckpointModel& ck, const config::Config& cfg,
                                   const std::string& key, const std::string& data_path, const data::DataSource& data,
                                   int64_t batch);

// The checkpoint's central model on the config's backend and precision, built for batches of
// `batch` samples of `info`'s shape, ready for inference (eval mode is the caller's RunMode).
// Members in this order so that the graph goes before the stream and the backend.
struct InferenceModel {
  std::unique_ptr<nn::Backend> backend;
  std::unique_ptr<nn::Stream> stream;
  std::unique_ptr<nn::Graph> graph;
};
// With `tiles` split (placed), the graph runs on this rank's tile and exchanges halos with its group.
InferenceModel build_inference_model(const checkpoint::CheckpointModel& ck, const config::Config& cfg,
                                     const nn::ModelSpec& spec, const data::DatasetInfo& info, int64_t batch,
                                     const mpi::Topology& topo, const TileGroups* tiles = nullptr);

// Collective over topo.world(). Parses the checkpoint's config with `overrides` (a bad one is
// a usage error, exit 2), opens the test set and checks that it fits the model (sample shape,
// classes, per-pixel labels, the model's size against the checkpoint's arrays; else exit 2
// naming the checkpoint, the data and both), builds the model on the config's run.backend and
// precision, loads the central parameters and state and evaluates. With a split (options.spatial,
// else the run's parallel.spatial) each group evaluates its share of the samples by tile: the
// confusion matrix and the count are the unsplit evaluation's exactly, the loss to rounding.
// Every failure, even one that only some ranks meet, ends every rank with the same CollectiveError.
EvalResult evaluate_checkpoint(const checkpoint::CheckpointModel& ck, const EvalOptions& options,
                               const mpi::Topology& topo);

// The checkpoint's central model for `squall export`: its config (with options.overrides) and its
// test set (options.data instead, when given) fix the model and its input size, as for
// evaluation, with the same refusals; the graph is set up for `batch` samples (shapes only,
// nothing allocated) and the central parameters and state are host copies. One process, no
// collective.
struct CheckpointGraph {
  std::string model;                // the checkpoint's model ("resnet20")
  int64_t step = 0;
  std::unique_ptr<nn::Graph> graph;
  std::vector<float> params, state;
  std::string normalization;        // how the run normalised its inputs ("zscore", "minmax"; "" none)
  std::string data_path;            // the test set that fixed the input size
};
CheckpointGraph checkpoint_graph(const checkpoint::CheckpointModel& ck, const EvalOptions& options, int64_t batch);

}  // namespace squall::eval
