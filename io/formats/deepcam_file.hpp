#pragma once
// One DeepCAM-layout file (docs/formats.md) read and written whole, for tools that work file
// by file (`squall data label`, `squall data climate`) rather than through the training
// reader (open_deepcam).
// Every function throws squall::Error naming the file and dataset at fault.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace squall::formats {

// /climate/data as stored: float32 [h, w, c], channels last.
struct DeepcamFields {
  int64_t h = 0, w = 0, c = 0;
  std::vector<float> hwc;
};

DeepcamFields read_deepcam_fields(const std::string& path);

// /climate/labels_0 as int32 [h * w] (any stored numeric type, converted by HDF5).
std::vector<int32_t> read_deepcam_labels(const std::string& path);

// Copies `src` to `dst` with /climate/labels_0 replaced by `labels` (h * w values, in the
// dataset's stored type; created as int32 [h, w] when `src` has none). Everything else is
// copied byte for byte. Written to `dst`.tmp, flushed and renamed: `dst` is whole or absent.
void write_deepcam_relabelled(const std::string& src, const std::string& dst, std::span<const int32_t> labels);

// A new DeepCAM-layout file: /climate/data float32 [h, w, c] and /climate/labels_0 int32
// [h, w]; written to `path`.tmp, flushed and renamed.
void write_deepcam_file(const std::string& path, const DeepcamFields& fields, std::span<const int32_t> labels);

// The same from raw memory, for generated data: labels all zero when `labels` is null, and
// the grid as /climate/lat [h] and /climate/lon [w] (float64 degrees; skipped when empty).
void write_deepcam_file(const std::string& path, const float* hwc, int64_t h, int64_t w, int64_t c,
                        const int32_t* labels, const std::vector<double>& lat, const std::vector<double>& lon);

// stats.h5: /climate/{count, mean, sqmean, minval, maxval}, float64, one entry per channel
// (std = sqrt(sqmean - mean^2), as read_deepcam_stats computes it). Written like the files.
struct DeepcamStatsOut {
  std::vector<double> count, mean, sqmean, minval, maxval;
};
void write_deepcam_stats(const std::string& path, const DeepcamStatsOut& stats);

}  // namespace squall::formats
