#pragma once
// CAM5/E3SM-, ERA5- and CMIP-style netCDF input (classic, 64-bit offset and netCDF-4 files):
// the 16 DeepCAM fields as separate variables on (time, latitude, longitude) or (latitude,
// longitude), several time steps per file. The dimensions are found as CF says, whatever
// their names (lat, latitude, y, ...): by their coordinate variables' standard_name, axis or
// units. Each time step is one sample [16, lat, lon] float32 in DeepCAM's channel order, rows
// south to north whatever order the file stores (a file whose latitude descends, as ERA5's
// does, is flipped on read); the variable read for each channel is a mapping (the DeepCAM
// names by default, overridable: data.netcdf_variables). Labels come from an optional int
// variable (`labels` by default) on the same dimensions. docs/data.md, "netCDF input",
// describes the layout.
//
// Header free of netCDF and HDF5: src/ includes it. Every function throws squall::Error
// naming the file (and the variable at fault); bad values in a sample are data::BadSample.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/formats/dataset.hpp"
#include "src/data/data_source.hpp"

namespace squall::formats {

// The 16 DeepCAM channel names, in channel order (TMQ, U850, ..., ZBOT).
const std::vector<std::string>& deepcam_channel_names();

// The variable read for each channel, in channel order: the DeepCAM names, with `overrides`
// applied. overrides: "" or comma-separated CHANNEL=variable pairs ("PSL=slp, TS=ts");
// an unknown channel, a pair without '=' or an empty variable name is an error.
std::vector<std::string> netcdf_variable_map(const std::string& overrides);

// Where the samples come from and what to read.
struct NetcdfOptions {
  std::vector<std::string> variables;  // one per channel, in channel order; empty: the DeepCAM names
  std::string labels = "labels";       // label variable, read when the file has it; "": never
};

// The coordinates of a file (or of one sample, then time holds one value), and how the file
// stores them, so that a mask can be written on the input's own grid (formats::MaskGrid).
struct NetcdfGrid {
  std::vector<double> lat;             // the latitude coordinate, south to north as the sample rows run
  std::vector<double> lon;             // the longitude coordinate, as stored
  std::vector<double> time;            // the time coordinate; empty when the file has no time (or no coordinate)
  std::string time_units, calendar;    // its `units` and `calendar` attributes ("" when absent)
  std::string lat_dim = "lat", lon_dim = "lon";  // the file's dimension names
  std::string time_dim = "time";       // the file's time dimension ("time" when it has none)
  bool lat_descending = false;         // the file stores latitude north to south: lat and rows are reversed from it
};

// What `squall data inspect` shows of one file.
struct NetcdfVariableInfo {
  std::string name, type;              // type: "float", "double", "short", "int", ...
  std::vector<std::string> dims;
  std::vector<int64_t> shape;
};
struct NetcdfFileInfo {
  std::string path;
  std::string format;                  // "classic", "64-bit offset", "64-bit data", "netCDF-4", "netCDF-4 classic model"
  std::vector<std::pair<std::string, int64_t>> dims;  // in definition order
  std::vector<NetcdfVariableInfo> variables;          // every variable of the file
  int64_t steps = 0;                   // samples (time steps) in the file
  int64_t height = 0, width = 0;       // lat, lon lengths
  bool has_labels = false;
  NetcdfGrid grid;
};

// Opens `path`, checks every mapped variable (present, numeric, on (time, latitude, longitude)
// or (latitude, longitude), all on the same dimensions; the labels variable likewise when
// present) and the latitude/longitude coordinates, and describes it.
NetcdfFileInfo describe_netcdf(const std::string& path, const NetcdfOptions& options = {});

// One time step of one file, raw (not normalised), rows south to north. chw: [16, h, w];
// labels: [h, w] or empty when the file has no labels variable; grid.time: that step's time
// (empty without time).
struct NetcdfSample {
  int64_t h = 0, w = 0, c = 0;
  std::vector<float> chw;
  std::vector<int32_t> labels;
  NetcdfGrid grid;
};
NetcdfSample read_netcdf_sample(const std::string& path, int64_t step, const NetcdfOptions& options = {});

// Every *.nc file in `dir`, sorted by name.
std::vector<std::string> list_netcdf_files(const std::string& dir);

// The training reader: the time steps of `files`, in file order then time order, as samples
// [1, 16, lat, lon] (rows south to north) with per-pixel labels (all 0 when a file has no
// labels variable). Normalisation statistics come from a DeepCAM stats.h5 (read_deepcam_stats); an empty
// stats_path is allowed only with options.normalize == false.
class NetcdfSource : public data::DataSource {
 public:
  // The grid of sample `index`: lat, lon and its one time value with units and calendar.
  virtual NetcdfGrid sample_grid(int64_t index) const = 0;
  // The file and time step sample `index` comes from.
  virtual std::pair<std::string, int64_t> sample_location(int64_t index) const = 0;
  // Whether every file has a labels variable.
  virtual bool has_labels() const = 0;
};

std::unique_ptr<NetcdfSource> open_netcdf_files(const std::vector<std::string>& files, const std::string& stats_path,
                                                const OpenOptions& options, const NetcdfOptions& netcdf = {});
// A folder of *.nc files (or one .nc file); stats.h5 beside them or one folder up
// (find_deepcam_stats).
std::unique_ptr<NetcdfSource> open_netcdf(const std::string& path, const OpenOptions& options,
                                          const NetcdfOptions& netcdf = {});

}  // namespace squall::formats
