#pragma once
// Evaluation of a model on held-out samples: the loss, the confusion matrix (accuracy, IoU per
// class), summed over the ranks. Used by training at every evaluation and by `squall eval`.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi/comm.hpp"
#include "src/data/data_source.hpp"
#include "src/nn/metrics.hpp"
#include "io/pictures/prediction_picture.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/spatial.hpp"

namespace squall::eval {

// One rank's share of an evaluation, or (after sum_over_ranks) the job's.
struct EvalPart {
  nn::ConfusionMatrix cm;
  double loss_sum = 0, samples = 0;
  double loss() const { return samples > 0 ? loss_sum / samples : 0; }
};

// parallel.spatial: this rank's window of every sample and its group's communicator (null: whole
// samples). Each rank then evaluates its tile; a sample's loss is its tiles' means weighted by
// their shares of the label weights (class_weights, host copies; empty: 1 each), summed over
// the group, and the group's rank 0 alone counts the samples, so that sum_over_ranks over the
// job gives the whole samples' loss, confusion matrix and count.
struct EvalTile {
  const data::Window* window = nullptr;
  nn::TileComm* comm = nullptr;
  std::vector<float> class_weights;
};

// Held-out samples drawn in predictions/epoch-N.png.
constexpr size_t k_picture_samples = 4;

// Evaluates the model on test samples [begin, end), in batches of the graph's batch size;
// the last partial batch is padded with copies of its first sample whose labels are
// ignored. dev_labels, dev_pred: backend label buffers of g.batch() x (h x w for per-pixel
// labels); class_weights: backend memory or null. pictures: when not null (per-pixel labels),
// the first samples of the range (up to its capacity) with their first channel, labels and
// predictions, for predictions/epoch-N.png.
EvalPart evaluate_range(nn::Graph& g, nn::Backend& be, nn::Stream& stream, const data::DataSource& test, int64_t begin,
                        int64_t end, int32_t* dev_labels, int32_t* dev_pred, const float* class_weights,
                        std::vector<pictures::PredictionSample>* pictures = nullptr, const EvalTile& tile = {});

// Collective: every rank's part summed into the job's, on every rank.
void sum_over_ranks(EvalPart& part, const mpi::Communicator& world);


}  // namespace squall::eval
