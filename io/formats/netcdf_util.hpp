#pragma once
// Helpers shared by the netCDF reader and mask writer (io/ internal; includes netcdf.h).
#include <netcdf.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <string>

namespace squall::formats {

// The netCDF C library is not thread-safe: every netCDF call in squall runs under this lock.
std::unique_lock<std::recursive_mutex> nc_lock();

// Throws squall::Error "PATH: WHAT: <netCDF's message>" when status is not NC_NOERR.
void nc_check(int status, const std::string& path, const std::string& what);

// "float", "short", ... for a netCDF type.
std::string nc_type_text(int ncid, nc_type type);

// A text attribute of a variable (or NC_GLOBAL), of type char or one netCDF-4 string; "" when
// absent or not text.
std::string nc_text_att(int ncid, int varid, const char* name);

// What a dimension holds, found as CF-1.8 (section 4) says: from its coordinate variable (the
// 1-D variable of the dimension's name over that dimension) by `standard_name`, `axis`,
// `units` or (vertical) `positive`; else, for a record dimension, time; else by the names
// squall has always read (lat, lon, time) and the names of pressure levels (level, plev,
// pressure_level, lev, isobaricInhPa).
enum class CfAxis { unknown, latitude, longitude, time, vertical };

struct CfDimension {
  int dimid = -1;
  std::string name;
  size_t length = 0;
  CfAxis axis = CfAxis::unknown;
  int coordinate = -1;   // the coordinate variable's id; -1 when the file has none
  std::string evidence;  // what said so ("units degrees_north", "axis T", "the unlimited dimension", ...)
};

CfDimension cf_dimension(int ncid, int dimid, const std::string& path);

// "latitude", "longitude", "time", "vertical level" or "unrecognised".
const char* cf_axis_text(CfAxis axis);

// Reverses the order of the h rows of w values each of `plane`: between a file's latitudes
// north to south and squall's rows south to north.
template <typename T>
void reverse_rows(T* plane, size_t h, size_t w) {
  for (size_t y = 0; y < h / 2; ++y) std::swap_ranges(plane + y * w, plane + (y + 1) * w, plane + (h - 1 - y) * w);
}

}  // namespace squall::formats
