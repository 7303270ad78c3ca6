// write_netcdf_masks: CF-1.8 mask files (see netcdf_mask.hpp and docs/data.md).
#include "io/formats/netcdf_mask.hpp"

#include <netcdf.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "io/formats/mask.hpp"
#include "io/formats/netcdf_util.hpp"
#include "src/core/error.hpp"

namespace squall::formats {
namespace {

void put_text(int ncid, int varid, const char* name, const std::string& value, const std::string& path) {
  nc_check(nc_put_att_text(ncid, varid, name, value.size(), value.c_str()), path,
           std::string("attribute '") + name + "'");
}

// A coordinate variable over its own dimension.
int def_coordinate(int ncid, int dimid, const std::string& name, const std::string& units, const char* standard_name,
                   const char* axis, const std::string& path, const std::string& calendar = "") {
  int varid = -1;
  nc_check(nc_def_var(ncid, name.c_str(), NC_DOUBLE, 1, &dimid, &varid), path, "variable '" + name + "'");
  if (!units.empty()) put_text(ncid, varid, "units", units, path);
  put_text(ncid, varid, "standard_name", standard_name, path);
  put_text(ncid, varid, "long_name", standard_name, path);
  put_text(ncid, varid, "axis", axis, path);
  if (!calendar.empty()) put_text(ncid, varid, "calendar", calendar, path);
  return varid;
}

std::string flag_word(const std::string& name) {
  std::string w = name;
  for (char& ch : w)
    if (ch == ' ' || ch == '\t') ch = '_';
  return w;
}

void write_file(const std::string& tmp, const std::string& path, const MaskGrid& grid, std::span<const uint8_t> masks,
                std::span<const float> probabilities, const std::vector<std::string>& class_names,
                const MaskAttributes& attrs) {
  const size_t nt = grid.time.size(), ny = grid.lat.size(), nx = grid.lon.size(), nk = class_names.size();
  int ncid = -1;
  nc_check(nc_create(tmp.c_str(), NC_CLOBBER | NC_NETCDF4 | NC_CLASSIC_MODEL, &ncid), path, "create");
  try {
    int dt = -1, dy = -1, dx = -1, dk = -1;
    nc_check(nc_def_dim(ncid, grid.time_dim.c_str(), NC_UNLIMITED, &dt), path, "dimension '" + grid.time_dim + "'");
    nc_check(nc_def_dim(ncid, grid.lat_dim.c_str(), ny, &dy), path, "dimension '" + grid.lat_dim + "'");
    nc_check(nc_def_dim(ncid, grid.lon_dim.c_str(), nx, &dx), path, "dimension '" + grid.lon_dim + "'");
    if (!probabilities.empty()) nc_check(nc_def_dim(ncid, "class", nk, &dk), path, "dimension 'class'");
    const int vt = def_coordinate(ncid, dt, grid.time_dim, grid.time_units, "time", "T", path, grid.calendar);
    const int vy = def_coordinate(ncid, dy, grid.lat_dim, "degrees_north", "latitude", "Y", path);
    const int vx = def_coordinate(ncid, dx, grid.lon_dim, "degrees_east", "longitude", "X", path);

    const int mask_dims[3] = {dt, dy, dx};
    int vm = -1;
    nc_check(nc_def_var(ncid, "mask", NC_BYTE, 3, mask_dims, &vm), path, "variable 'mask'");
    const size_t chunk[3] = {1, ny, nx};
    nc_check(nc_def_var_chunking(ncid, vm, NC_CHUNKED, chunk), path, "variable 'mask'");
    nc_check(nc_def_var_deflate(ncid, vm, 1, 1, 4), path, "variable 'mask'");
    put_text(ncid, vm, "long_name", "segmentation class per pixel", path);
    std::vector<signed char> flags(nk);
    std::string meanings;
    for (size_t k = 0; k < nk; ++k) {
      flags[k] = static_cast<signed char>(k);
      meanings += (k ? " " : "") + flag_word(class_names[k]);
    }
    nc_check(nc_put_att_schar(ncid, vm, "flag_values", NC_BYTE, nk, flags.data()), path, "attribute 'flag_values'");
    put_text(ncid, vm, "flag_meanings", meanings, path);
    // Pixels the model gave no class (cropped away by data.pad = crop): missing to CF readers.
    // Declared only where there are such pixels: with a _FillValue xarray reads the classes as
    // floats (NaN for the missing), without one as the integers they are.
    if (std::find(masks.begin(), masks.end(), k_mask_fill) != masks.end()) {
      const signed char fill = static_cast<signed char>(k_mask_fill);
      nc_check(nc_put_att_schar(ncid, vm, "_FillValue", NC_BYTE, 1, &fill), path, "attribute '_FillValue'");
    }
    put_text(ncid, vm, "coordinates", grid.time_dim + " " + grid.lat_dim + " " + grid.lon_dim, path);

    int vp = -1, vk = -1;
    size_t name_len = 1;
    if (!probabilities.empty()) {
      // The class dimension's coordinate: the class names as text (char [class, class_strlen],
      // UTF-8), so that xarray indexes the probabilities by name: ds.sel({"class": "atmospheric river"}).
      for (const std::string& name : class_names) name_len = std::max(name_len, name.size());
      int dn = -1;
      nc_check(nc_def_dim(ncid, "class_strlen", name_len, &dn), path, "dimension 'class_strlen'");
      const int class_dims[2] = {dk, dn};
      nc_check(nc_def_var(ncid, "class", NC_CHAR, 2, class_dims, &vk), path, "variable 'class'");
      put_text(ncid, vk, "long_name", "class name", path);
      put_text(ncid, vk, "_Encoding", "utf-8", path);
      const int prob_dims[4] = {dt, dk, dy, dx};
      nc_check(nc_def_var(ncid, "probability", NC_FLOAT, 4, prob_dims, &vp), path, "variable 'probability'");
      const size_t pchunk[4] = {1, 1, ny, nx};
      nc_check(nc_def_var_chunking(ncid, vp, NC_CHUNKED, pchunk), path, "variable 'probability'");
      nc_check(nc_def_var_deflate(ncid, vp, 1, 1, 4), path, "variable 'probability'");
      put_text(ncid, vp, "long_name", "probability of each class per pixel", path);
      put_text(ncid, vp, "units", "1", path);
      const float range[2] = {0.0f, 1.0f};
      nc_check(nc_put_att_float(ncid, vp, "valid_range", NC_FLOAT, 2, range), path, "attribute 'valid_range'");
      const float nan = std::numeric_limits<float>::quiet_NaN();
      nc_check(nc_put_att_float(ncid, vp, "_FillValue", NC_FLOAT, 1, &nan), path, "attribute '_FillValue'");
      put_text(ncid, vp, "classes", meanings, path);
    }

    put_text(ncid, NC_GLOBAL, "Conventions", "CF-1.8", path);
    if (!attrs.title.empty()) put_text(ncid, NC_GLOBAL, "title", attrs.title, path);
    if (!attrs.source.empty()) put_text(ncid, NC_GLOBAL, "source", attrs.source, path);
    if (!attrs.history.empty()) put_text(ncid, NC_GLOBAL, "history", attrs.history, path);
    if (!attrs.checkpoint.empty()) put_text(ncid, NC_GLOBAL, "checkpoint", attrs.checkpoint, path);
    put_text(ncid, NC_GLOBAL, "class_names", meanings, path);
    put_text(ncid, NC_GLOBAL, k_mask_marker, k_mask_marker_value, path);
    for (const auto& [name, value] : attrs.extra) put_text(ncid, NC_GLOBAL, name.c_str(), value, path);
    nc_check(nc_enddef(ncid), path, "end of definitions");

    // The input's latitude order: a mask whose input stored north first is flipped back.
    std::vector<double> lat = grid.lat;
    if (grid.lat_descending) std::reverse(lat.begin(), lat.end());
    nc_check(nc_put_var_double(ncid, vy, lat.data()), path, "variable '" + grid.lat_dim + "'");
    nc_check(nc_put_var_double(ncid, vx, grid.lon.data()), path, "variable '" + grid.lon_dim + "'");
    if (vk >= 0) {
      std::vector<char> names(nk * name_len, '\0');
      for (size_t k = 0; k < nk; ++k) std::copy(class_names[k].begin(), class_names[k].end(), names.begin() + k * name_len);
      nc_check(nc_put_var_text(ncid, vk, names.data()), path, "variable 'class'");
    }
    if (nt) {
      const size_t start1 = 0, count1 = nt;
      nc_check(nc_put_vara_double(ncid, vt, &start1, &count1, grid.time.data()), path,
               "variable '" + grid.time_dim + "'");
      const size_t start[3] = {0, 0, 0}, count[3] = {nt, ny, nx};
      std::vector<signed char> values(masks.begin(), masks.end());
      if (grid.lat_descending)
        for (size_t t = 0; t < nt; ++t) reverse_rows(values.data() + t * ny * nx, ny, nx);
      nc_check(nc_put_vara_schar(ncid, vm, start, count, values.data()), path, "variable 'mask'");
      if (vp >= 0) {
        const size_t pstart[4] = {0, 0, 0, 0}, pcount[4] = {nt, nk, ny, nx};
        std::vector<float> flipped;
        const float* p = probabilities.data();
        if (grid.lat_descending) {
          flipped.assign(probabilities.begin(), probabilities.end());
          for (size_t plane = 0; plane < nt * nk; ++plane) reverse_rows(flipped.data() + plane * ny * nx, ny, nx);
          p = flipped.data();
        }
        nc_check(nc_put_vara_float(ncid, vp, pstart, pcount, p), path, "variable 'probability'");
      }
    }
    nc_check(nc_close(ncid), path, "close");
  } catch (...) {
    nc_abort(ncid);
    throw;
  }
}

}  // namespace

bool netcdf_is_squall_mask(const std::string& path) {
  auto lock = nc_lock();
  int ncid = -1;
  if (nc_open(path.c_str(), NC_NOWRITE, &ncid) != NC_NOERR) return false;
  const bool marked = nc_text_att(ncid, NC_GLOBAL, k_mask_marker) == k_mask_marker_value;
  nc_close(ncid);
  return marked;
}

void write_netcdf_masks(const std::string& path, const MaskGrid& grid, std::span<const uint8_t> masks,
                        std::span<const float> probabilities, const std::vector<std::string>& class_names,
                        const MaskAttributes& attrs) {
  const size_t nt = grid.time.size(), ny = grid.lat.size(), nx = grid.lon.size(), nk = class_names.size();
  if (ny == 0 || nx == 0) throw Error(path + ": mask grid has no latitudes or no longitudes");
  if (nk == 0 || nk > 127) throw Error(path + ": " + std::to_string(nk) + " class names (1 to 127 expected)");
  if (grid.lat_dim.empty() || grid.lon_dim.empty() || grid.time_dim.empty() || grid.lat_dim == grid.lon_dim ||
      grid.time_dim == grid.lat_dim || grid.time_dim == grid.lon_dim)
    throw Error(path + ": dimension names time '" + grid.time_dim + "', lat '" + grid.lat_dim + "', lon '" +
                grid.lon_dim + "' are not three distinct names");
  for (const std::string& name : class_names)
    if (name.empty()) throw Error(path + ": an empty class name");
  if (masks.size() != nt * ny * nx)
    throw Error(path + ": " + std::to_string(masks.size()) + " mask values for time=" + std::to_string(nt) +
                " x lat=" + std::to_string(ny) + " x lon=" + std::to_string(nx));
  if (!probabilities.empty() && probabilities.size() != nt * nk * ny * nx)
    throw Error(path + ": " + std::to_string(probabilities.size()) + " probabilities for time=" + std::to_string(nt) +
                " x class=" + std::to_string(nk) + " x lat=" + std::to_string(ny) + " x lon=" + std::to_string(nx));
  for (size_t i = 0; i < masks.size(); ++i)
    if (masks[i] >= nk && masks[i] != k_mask_fill)
      throw Error(path + ": mask value " + std::to_string(masks[i]) + " at index " + std::to_string(i) +
                  " is not a class (" + std::to_string(nk) + " classes) nor the fill value " + std::to_string(k_mask_fill));

  const std::string tmp = path + ".tmp";
  namespace fs = std::filesystem;
  auto lock = nc_lock();
  try {
    write_file(tmp, path, grid, masks, probabilities, class_names, attrs);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) throw Error(path + ": cannot rename from " + tmp + ": " + ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
}

}  // namespace squall::formats
