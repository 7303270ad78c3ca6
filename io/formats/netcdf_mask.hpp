#pragma once
// Segmentation masks as CF-1.8 netCDF files, for climate tools (xarray, CDO, NCO, ncview) to
// open: the format is in docs/data.md, "netCDF mask files". Header free of netCDF.
//
//   formats::MaskGrid grid{lat, lon, time, "days since 2000-01-01 00:00:00", "noleap"};
//   formats::write_netcdf_masks("out/masks-2000.nc", grid, masks, {}, {"background", "tropical cyclone",
//                          "atmospheric river"}, {.source = "squall deepcam", .checkpoint = ckpt});
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace squall::formats {

// Coordinates of the masks: lat [nlat] degrees north in the masks' row order, lon [nlon]
// degrees east, time [nt] in `time_units` ("days since 1979-01-01 00:00:00"; written only
// when not empty) and `calendar` (written only when not empty), as read from the input
// (formats::NetcdfGrid has the same fields). The dimension names and the latitude order are
// the input's, so that a mask overlays its input: with lat_descending, the latitudes and the
// rows of the masks are written in reverse (north to south).
struct MaskGrid {
  std::vector<double> lat, lon, time;
  std::string time_units, calendar;
  std::string lat_dim = "lat", lon_dim = "lon", time_dim = "time";  // also the coordinate variables' names
  bool lat_descending = false;
};

// Global attributes. Conventions = "CF-1.8" is always written; the others when not empty.
struct MaskAttributes {
  std::string source;       // the model that made the masks ("squall deepcam, width 32")
  std::string history;      // what made the file ("squall predict --checkpoint ...")
  std::string checkpoint;   // the checkpoint used
  std::string title;
  std::vector<std::pair<std::string, std::string>> extra;  // any further text attributes
};

// Writes `path` (netCDF-4, classic model, masks compressed), with the dimension names of
// `grid` (time, lat and lon by default):
//   dims time = grid.time.size(), lat, lon (and class = class_names.size() and class_strlen, the
//     longest name's bytes, with probabilities);
//   lat(lat), lon(lon), time(time) coordinate variables with units, standard_name, axis;
//   mask(time, lat, lon) byte: the class per pixel, flag_values 0..K-1 and flag_meanings
//     (the class names with spaces as underscores: "background tropical_cyclone ..."), and
//     _FillValue -1 for a pixel without a class (mask.hpp's k_mask_fill in `masks`; declared
//     only when `masks` holds one, so that xarray reads a mask without them as integers);
//   probability(time, class, lat, lon) float in [0, 1] (_FillValue NaN), only when
//     `probabilities` is not empty,
//     with class(class, class_strlen) char: the class names (UTF-8, _Encoding), its coordinate;
//   the global attribute squall_output = "predict mask" (mask.hpp's marker).
// masks: time x lat x lon values, row-major (lat rows, lon fastest), each < class_names.size()
// or k_mask_fill.
// probabilities: empty, or time x class x lat x lon.
// Written to `path`.tmp and renamed: `path` is whole or absent. Errors (sizes that do not
// match the grid, a class index out of range, a netCDF failure) throw squall::Error naming
// `path`; no temporary file is left behind.
// Whether the netCDF file `path` carries mask.hpp's marker (is_squall_mask's netCDF half).
bool netcdf_is_squall_mask(const std::string& path);

void write_netcdf_masks(const std::string& path, const MaskGrid& grid, std::span<const uint8_t> masks,
                        std::span<const float> probabilities, const std::vector<std::string>& class_names,
                        const MaskAttributes& attrs = {});

}  // namespace squall::formats
