#pragma once
// model.padding: what a model's layers read beyond the sample's west and east edges
// (docs/training.md, "Global fields: longitude without a seam").
#include "src/core/enum_table.hpp"

namespace squall::nn {

enum class ModelPadding {
  zeros,               // zeros, as at the north and south edges
  periodic_longitude,  // the other edge's columns: a global field, periodic in longitude
};
inline constexpr auto k_model_paddings = enum_table<ModelPadding>(
    {{"zeros", ModelPadding::zeros}, {"periodic_longitude", ModelPadding::periodic_longitude}});

}  // namespace squall::nn
