#pragma once
// train.init_from (docs/training.md, "Fine-tuning from another run"): a new run's model made
// from another run's checkpoint, tensor by tensor under its name. Pure: the checkpoint's model
// (io/checkpoint/named_weights.hpp) and this run's graph, spec and data in, the weights to start
// from out; no MPI, no files (tests/unit/test_init_weights.cpp).
//
// Weights carry over where the two models are one: the same model.name, width, depth, classes
// and ASPP rates. The grid may differ (a convolution's weights do not depend on it; weights that
// did would be refused by their shapes, naming the grid). The input channels may
// differ where both sides name them: the first layer's weights (those of the layers that read
// the input) are taken per channel by name, a channel new to this run gets zero weights (the
// network then computes what it computed before, until training gives it a use), and a channel
// the checkpoint had and this data lacks is dropped.
#include <string>
#include <vector>

#include "io/checkpoint/named_weights.hpp"
#include "src/data/data_source.hpp"
#include "src/nn/graph.hpp"

namespace squall::train {

struct InitWeights {
  // The model's parameters and state (BatchNorm's running statistics), packed in `graph`'s
  // order (param_info(), state_info(): as a checkpoint's central/params and central/state).
  std::vector<float> params, state;
  // The input channels by name, when they were mapped (both sides name them and they differ):
  // taken from the checkpoint, new to this run (zero weights), and the checkpoint's that this
  // data lacks.
  bool channels_mapped = false;
  std::vector<std::string> reused, added, dropped;
  bool grid_changed = false;  // the checkpoint's input grid (h x w) is not this data's
};

// `ck`'s tensors for `graph` (set up or built: its param_info() and state_info()) of model
// `spec` on data `info`. Throws UsageError naming ck.origin, the tensor, both shapes and the
// config key that differs when a tensor cannot carry over (another model.name, model.width,
// model.depth, model.aspp_rates or number of classes; other input channels that are not named
// on both sides; a model whose weights depend on the grid on another grid).
InitWeights map_init_weights(const checkpoint::ModelCheckpoint& ck, const nn::Graph& graph, const nn::ModelSpec& spec,
                             const data::DatasetInfo& info);

// What map_init_weights did, in lines for the log (after `source`, the checkpoint's folder).
std::vector<std::string> init_weights_lines(const checkpoint::ModelCheckpoint& ck, const InitWeights& w,
                                            const data::DatasetInfo& info, const std::string& source);

}  // namespace squall::train
