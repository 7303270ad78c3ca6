#pragma once
// Writing files in DeepCAM's layout (docs/formats.md), for generated climate data: one
// sample per file and the stats.h5 beside them. Header free of HDF5.
#include <cstdint>
#include <string>
#include <vector>

namespace squall::io {

// One sample: /climate/data float32 [h, w, c] (channels last), /climate/labels_0 int32 [h, w]
// (all zeros when `labels` is null), and the grid as /climate/lat [h] and /climate/lon [w]
// (float64, degrees; skipped when empty). Written to "<path>.tmp" and renamed when complete.
void write_deepcam_file(const std::string& path, const float* hwc, int64_t h, int64_t w, int64_t c,
                        const int32_t* labels, const std::vector<double>& lat, const std::vector<double>& lon);

// stats.h5: /climate/{count, mean, sqmean, minval, maxval}, float64, one entry per channel
// (std = sqrt(sqmean - mean^2), as read_deepcam_stats computes it). Written like the above.
struct DeepcamStatsOut {
  std::vector<double> count, mean, sqmean, minval, maxval;
};
void write_deepcam_stats(const std::string& path, const DeepcamStatsOut& stats);

}  // namespace squall::io
