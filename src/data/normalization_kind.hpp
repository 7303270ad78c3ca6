#pragma once
// How a dataset's values are normalised (data.normalization): zscore, (x - mean) / std; minmax,
// (x - min) / (max - min), DeepCAM's. The table is the one list of their names.
#include "src/core/enum_table.hpp"

namespace squall::data {

enum class NormalizationKind { zscore, minmax };
inline constexpr auto k_normalization_kinds = enum_table<NormalizationKind>(
    {{"zscore", NormalizationKind::zscore}, {"minmax", NormalizationKind::minmax}});

}  // namespace squall::data
