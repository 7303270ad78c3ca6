#pragma once
// CAM5/E3SM-, ERA5- and CMIP-style netCDF input (classic, 64-bit offset and netCDF-4 files):
// climate fields as separate variables on (time, latitude, longitude), (latitude, longitude),
// or with a vertical level dimension before latitude ((time, level, latitude, longitude),
// (level, latitude, longitude)), several time steps per file. The dimensions are found as CF
// says, whatever their names (lat, latitude, y, plev, pressure_level, ...): by their
// coordinate variables' standard_name, axis, units or positive attribute. Each time step is
// one sample [channels, lat, lon] float32 in the channel list's order, rows south to north
// whatever order the file stores (a file whose latitude descends, as ERA5's does, is flipped
// on read).
//
// The channel list is DeepCAM's 16 channels by default, each read from the variable of its
// name unless data.netcdf_variables maps it elsewhere; data.channels replaces it with a list
// of the model's own ("U850=u@850", "msl"). A channel reads one variable, at one pressure level
// when the variable has levels ("u@850", "ua@850hPa"). Values are converted with UDUNITS-2
// from the variable's `units` to the channel's (io/formats/units.hpp): DeepCAM channels have
// fixed units (deepcam_channel_units), others those NetcdfOptions::units gives, or the first
// file's. Labels come from an optional int variable (`labels` by default) on the same time,
// latitude and longitude dimensions. docs/data.md, "netCDF input", describes it all.
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
// Their units, as UDUNITS-2 text in channel order (src/data/climate_channels.hpp): "kg m-2",
// "m s-1", ..., "Pa", "K", "m".
const std::vector<std::string>& deepcam_channel_units();
// The units of DeepCAM channel `name`; "" for any other name.
std::string deepcam_units_of(const std::string& name);

// What a channel reads: a variable, and for a variable with vertical levels, which level.
struct NetcdfChannel {
  std::string name;      // the channel's name (DatasetInfo::channel_names): "U850", "u@850"
  std::string variable;  // the netCDF variable
  bool has_level = false;
  double level = 0;          // the level selected, in level_units (or the coordinate's own units)
  std::string level_units;   // "" = the level coordinate's units
  std::string spec() const;  // "u", "u@850", "ua@850 hPa"
};

// A channel's SPEC, "variable" or "variable@LEVEL": LEVEL a number, optionally followed by
// units ("850", "850hPa", "85000 Pa"). Throws squall::Error saying what is wrong.
NetcdfChannel parse_netcdf_spec(const std::string& spec, const std::string& name);
// A data.channels entry, "NAME=SPEC" or "SPEC" (then the name is the SPEC's text).
NetcdfChannel parse_netcdf_channel(const std::string& entry);

// The variable read for each channel, in channel order: the DeepCAM names, with `overrides`
// applied. overrides: "" or comma-separated CHANNEL=SPEC pairs ("PSL=slp, TS=ts, U850=u@850");
// an unknown channel, a pair without '=', an empty variable name or a bad level is an error.
std::vector<std::string> netcdf_variable_map(const std::string& overrides);

// Where the samples come from and what to read.
struct NetcdfOptions {
  // One SPEC per DeepCAM channel, in channel order; empty: the DeepCAM names. Ignored when
  // `channels` is given.
  std::vector<std::string> variables;
  std::string labels = "labels";       // label variable, read when the file has it; "": never
  // data.channels: "NAME=SPEC" or "SPEC" entries; empty: the DeepCAM channels of `variables`.
  std::vector<std::string> channels;
  // The units each channel's values are to be in, in channel order (a checkpoint's or a
  // training set's channel_units); empty, or "" for one channel: a DeepCAM channel's own units
  // (deepcam_channel_units), any other channel the units of the first file opened, every later
  // file converted to those.
  std::vector<std::string> units;
};

// The options of a config's (or command line's) data.channels, data.netcdf_variables and
// data.netcdf_labels. Throws squall::UsageError naming the key: a bad entry, both
// channels and netcdf_variables set.
NetcdfOptions netcdf_options(const std::vector<std::string>& channels, const std::string& netcdf_variables,
                             const std::string& labels = "labels");

// The channel list `options` read (checked: SPECs parse, names are unique, units match).
std::vector<NetcdfChannel> netcdf_channels(const NetcdfOptions& options);

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
  std::string units, long_name;        // its attributes ("" when absent)
  bool coordinate = false;             // a coordinate variable (1-D, named as its dimension)
};
// Whether and how a file supplies one channel.
struct NetcdfChannelInfo {
  std::string name, spec;              // the channel and what it reads ("U850", "u@850")
  std::string variable;
  std::string level;                   // the level read, "850 hPa" ("" for a variable without levels)
  std::string units;                   // the variable's units attribute ("" when it has none)
  std::string target;                  // the units the values are read in ("" when unknown)
  std::string conversion;              // the UDUNITS-2 formula from units to target ("100*x"); "" for none
  std::string problem;                 // why the file cannot supply it; "" when it can
};
struct NetcdfFileInfo {
  std::string path;
  std::string format;                  // "classic", "64-bit offset", "64-bit data", "netCDF-4", "netCDF-4 classic model"
  std::vector<std::pair<std::string, int64_t>> dims;  // in definition order
  std::vector<NetcdfVariableInfo> variables;          // every variable of the file
  int64_t steps = 0;                   // time steps in the file (1 without a time dimension)
  std::string time_dim;                // the dimension they run along ("" without one)
  int64_t height = 0, width = 0;       // lat, lon lengths (0 when the channels cannot be read)
  bool has_labels = false;
  NetcdfGrid grid;
  std::vector<NetcdfChannelInfo> channels;  // one per channel of the list, in its order
  std::string channel_error;           // "" when every channel can be read; else the error opening it gives
};

// Opens `path`, checks every channel (its variable present, numeric, on [time,] [level,]
// latitude, longitude, the level there, its units convertible; all on the same time, latitude
// and longitude; the labels variable likewise when present) and the latitude/longitude
// coordinates, and describes it. Throws squall::UsageError naming every channel the file
// cannot supply at once, with the variables it has.
NetcdfFileInfo describe_netcdf(const std::string& path, const NetcdfOptions& options = {});
// The same, but a channel the file cannot supply is only reported (channels, channel_error):
// for `squall data inspect`. Throws only for a file netCDF cannot open.
NetcdfFileInfo survey_netcdf(const std::string& path, const NetcdfOptions& options = {});

// One time step of one file, raw (not normalised, units converted), rows south to north. chw: [c, h, w];
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
// [1, channels, lat, lon] (rows south to north) with per-pixel labels (all 0 when a file has no
// labels variable). info() names the channels and the units of their values as read.
// Normalisation statistics come from a DeepCAM stats.h5 (read_deepcam_stats); an empty
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
