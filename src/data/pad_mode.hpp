#pragma once
// What the input pipeline does with a grid whose sides the model's stride does not divide
// (data.pad; docs/training.md, "Grids the model's stride does not divide"): none refuses it,
// pad pads each sample to the next multiple, crop crops it to the previous one, centred. The
// table is the one list of their names.
#include "src/core/enum_table.hpp"

namespace squall::data {

enum class PadMode { none, pad, crop };
inline constexpr auto k_pad_modes =
    enum_table<PadMode>({{"none", PadMode::none}, {"pad", PadMode::pad}, {"crop", PadMode::crop}});

}  // namespace squall::data
