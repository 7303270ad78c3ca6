#include "src/config/model_spec.hpp"

namespace squall::config {

nn::ModelSpec model_spec(const Config& cfg, const data::DatasetInfo& data) {
  nn::ModelSpec spec;
  spec.name = cfg.model.name;
  spec.classes = cfg.model.classes > 0 ? cfg.model.classes : data.classes;
  spec.width = cfg.model.width;
  spec.depth = cfg.model.depth;
  spec.aspp_rates = cfg.model.aspp_rates;
  spec.dropout = static_cast<float>(cfg.model.dropout);
  spec.padding = cfg.model.padding;
  return spec;
}

std::string model_data_mismatch(const Config& cfg, const data::DatasetInfo& data) {
  if (cfg.model.in_channels > 0 && cfg.model.in_channels != data.sample.c())
    return "model.in_channels = " + std::to_string(cfg.model.in_channels) + " but the data has " +
           std::to_string(data.sample.c()) + " channels";
  if (cfg.model.classes > 0 && cfg.model.classes != data.classes)
    return "model.classes = " + std::to_string(cfg.model.classes) + " but the data has " +
           std::to_string(data.classes) + " classes";
  const int64_t classes = cfg.model.classes > 0 ? cfg.model.classes : data.classes;
  if (!cfg.data.class_weights.empty() && static_cast<int64_t>(cfg.data.class_weights.size()) != classes)
    return "data.class_weights has " + std::to_string(cfg.data.class_weights.size()) + " entries but the model has " +
           std::to_string(classes) + " classes";
  return {};
}

}  // namespace squall::config
