#pragma once
// The masks `squall predict` writes (docs/inference.md): a class per pixel for each time step
// of one input file, optionally the softmax per class, with the input's grid and time, the
// class names and where the model came from.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace squall::formats {

// The mask value of a pixel that has no class: `squall predict` with data.pad = crop writes it
// where the rows and columns the model never saw lie (its probabilities there are NaN). In a
// netCDF mask it is the byte -1, the mask variable's declared _FillValue, which xarray reads as
// NaN (missing); in an HDF5 mask it is 255 in /mask (docs/inference.md, "Grids").
inline constexpr uint8_t k_mask_fill = 255;

struct MaskOutput {
  int64_t times = 0, h = 0, w = 0;
  std::vector<double> lat, lon;        // [h] degrees north, [w] degrees east; empty when unknown
  std::vector<double> time;            // [times] in time_units; empty when unknown
  std::string time_units, calendar;    // as the input gave them ("" when it did not)
  std::vector<uint8_t> mask;           // [times, h, w]: the class index of each pixel, or k_mask_fill
  std::vector<float> probabilities;    // [times, classes, h, w] or empty
  std::vector<std::string> class_names;
  std::map<std::string, std::string> attributes;  // "model", "checkpoint", "step", "source", ...
};

// HDF5: /mask uint8 [times, h, w] (attribute class_names), /probabilities float32 [times,
// classes, h, w] when given, /lat, /lon, /time float64 when known (/time with attributes units
// and calendar), the attributes on the root group. Written to `path`.tmp, flushed and renamed,
// so `path` is whole or absent; throws squall::Error naming the file.
void write_mask_h5(const std::string& path, const MaskOutput& m);

// Every mask file squall writes, in either format, carries the global (root) text attribute
// squall_output = "predict mask": `squall predict` leaves such files out of the folders it reads
// (--out may be the input folder), and a tool may look for it too.
inline constexpr const char* k_mask_marker = "squall_output";
inline constexpr const char* k_mask_marker_value = "predict mask";

// Whether `path` (*.nc or *.h5) is a mask file squall wrote: it carries the marker above. False
// for any other file, and for one that cannot be opened (its reader will say why).
bool is_squall_mask(const std::string& path);

// The grid of a DeepCAM-layout file, /climate/lat and /climate/lon (empty when absent).
void read_deepcam_grid(const std::string& path, std::vector<double>& lat, std::vector<double>& lon);

}  // namespace squall::formats
