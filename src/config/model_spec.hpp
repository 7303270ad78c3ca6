#pragma once
// The model a config describes, for the data it trains on or is evaluated on: used by the
// trainer and by `squall eval`, so that both build the same model and refuse the same mismatches.
#include <string>

#include "src/data/data_source.hpp"
#include "src/nn/graph.hpp"
#include "src/config/config.hpp"

namespace squall::config {

// The zoo's spec from the model.* keys; classes default to the data's.
nn::ModelSpec model_spec(const Config& cfg, const data::DatasetInfo& data);

// Why the model.* and data.class_weights keys do not fit the data ("model.in_channels = 3 but
// the data has 1 channels"), or "" when they do. Callers add where the config and data came from.
std::string model_data_mismatch(const Config& cfg, const data::DatasetInfo& data);

}  // namespace squall::config
