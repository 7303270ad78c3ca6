// Helpers for the netCDF code (see netcdf_util.hpp).
#include "io/formats/netcdf_util.hpp"

#include <cctype>
#include <initializer_list>
#include <utility>
#include <vector>

#include "io/formats/units.hpp"
#include "src/core/error.hpp"

namespace squall::formats {
namespace {

bool is_one_of(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (s == w) return true;
  return false;
}

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

// "<unit> since <reference date>" (CF-1.8, 4.4): one word, then a date, which starts with a
// digit or a sign.
bool is_time_units(const std::string& units) {
  const size_t at = units.find(" since ");
  if (at == std::string::npos) return false;
  const std::string unit = trimmed(units.substr(0, at)), date = trimmed(units.substr(at + 7));
  if (unit.empty() || date.empty()) return false;
  for (char c : unit)
    if (!std::isalpha(static_cast<unsigned char>(c)) && c != '_') return false;
  return std::isdigit(static_cast<unsigned char>(date[0])) || date[0] == '-' || date[0] == '+';
}

// Plain "degrees" is not among them: CF keeps it for rotated and other non-geographic grids.
CfAxis axis_of_units(const std::string& units) {
  if (is_one_of(units, {"degrees_north", "degree_north", "degree_N", "degrees_N", "degreeN", "degreesN"}))
    return CfAxis::latitude;
  if (is_one_of(units, {"degrees_east", "degree_east", "degree_E", "degrees_E", "degreeE", "degreesE"}))
    return CfAxis::longitude;
  if (is_time_units(units)) return CfAxis::time;
  // Pressure levels (hPa in ERA5, Pa in CMIP's plev): any unit of pressure. Without UDUNITS-2's
  // database the other attributes and the names still find them.
  try {
    return !units.empty() && units_convertible(units, "Pa") ? CfAxis::vertical : CfAxis::unknown;
  } catch (const Error&) {
    return CfAxis::unknown;
  }
}

CfAxis axis_of_standard_name(const std::string& name) {
  if (name == "air_pressure" || name == "altitude" || name == "height" || name == "depth" ||
      name == "model_level_number" || (name.starts_with("atmosphere_") && name.ends_with("_coordinate")))
    return CfAxis::vertical;
  return name == "latitude"    ? CfAxis::latitude
         : name == "longitude" ? CfAxis::longitude
         : name == "time"      ? CfAxis::time
                               : CfAxis::unknown;
}

CfAxis axis_of_axis(const std::string& axis) {
  return axis == "Y"   ? CfAxis::latitude
         : axis == "X" ? CfAxis::longitude
         : axis == "T" ? CfAxis::time
         : axis == "Z" ? CfAxis::vertical
                       : CfAxis::unknown;
}

bool is_unlimited(int ncid, int dimid) {
  int n = 0;
  if (nc_inq_unlimdims(ncid, &n, nullptr) != NC_NOERR || n <= 0) return false;
  std::vector<int> ids(static_cast<size_t>(n));
  if (nc_inq_unlimdims(ncid, &n, ids.data()) != NC_NOERR) return false;
  for (int id : ids)
    if (id == dimid) return true;
  return false;
}

}  // namespace

std::unique_lock<std::recursive_mutex> nc_lock() {
  static std::recursive_mutex mutex;
  return std::unique_lock<std::recursive_mutex>(mutex);
}

void nc_check(int status, const std::string& path, const std::string& what) {
  if (status != NC_NOERR) throw Error(path + ": " + what + ": " + nc_strerror(status));
}

std::string nc_type_text(int ncid, nc_type type) {
  switch (type) {
    case NC_BYTE: return "byte";
    case NC_CHAR: return "char";
    case NC_SHORT: return "short";
    case NC_INT: return "int";
    case NC_FLOAT: return "float";
    case NC_DOUBLE: return "double";
    case NC_UBYTE: return "ubyte";
    case NC_USHORT: return "ushort";
    case NC_UINT: return "uint";
    case NC_INT64: return "int64";
    case NC_UINT64: return "uint64";
    case NC_STRING: return "string";
    default: {
      char name[NC_MAX_NAME + 1] = {0};
      if (nc_inq_type(ncid, type, name, nullptr) == NC_NOERR) return std::string("user type ") + name;
      return "type " + std::to_string(type);
    }
  }
}

std::string nc_text_att(int ncid, int varid, const char* name) {
  nc_type type;
  size_t len = 0;
  if (nc_inq_att(ncid, varid, name, &type, &len) != NC_NOERR) return "";
  if (type == NC_STRING && len == 1) {  // netCDF-4 strings, as h5netcdf writes attributes
    char* value = nullptr;
    if (nc_get_att_string(ncid, varid, name, &value) != NC_NOERR) return "";
    std::string out = value ? value : "";
    nc_free_string(1, &value);
    return out;
  }
  if (type != NC_CHAR) return "";
  std::string out(len, '\0');
  if (len && nc_get_att_text(ncid, varid, name, out.data()) != NC_NOERR) return "";
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

const char* cf_axis_text(CfAxis axis) {
  switch (axis) {
    case CfAxis::latitude: return "latitude";
    case CfAxis::longitude: return "longitude";
    case CfAxis::time: return "time";
    case CfAxis::vertical: return "vertical level";
    default: return "unrecognised";
  }
}

CfDimension cf_dimension(int ncid, int dimid, const std::string& path) {
  CfDimension d;
  d.dimid = dimid;
  char name[NC_MAX_NAME + 1] = {0};
  nc_check(nc_inq_dim(ncid, dimid, name, &d.length), path, "dimension " + std::to_string(dimid));
  d.name = name;
  int varid = -1, ndims = 0, over = -1;
  if (nc_inq_varid(ncid, name, &varid) == NC_NOERR && nc_inq_varndims(ncid, varid, &ndims) == NC_NOERR &&
      ndims == 1 && nc_inq_vardimid(ncid, varid, &over) == NC_NOERR && over == dimid)
    d.coordinate = varid;

  std::vector<std::pair<CfAxis, std::string>> said;  // what each identifying attribute says
  if (d.coordinate >= 0) {
    const std::string standard_name = nc_text_att(ncid, varid, "standard_name");
    const std::string axis = nc_text_att(ncid, varid, "axis");
    const std::string units = nc_text_att(ncid, varid, "units");
    const std::string positive = nc_text_att(ncid, varid, "positive");
    if (axis_of_standard_name(standard_name) != CfAxis::unknown)
      said.emplace_back(axis_of_standard_name(standard_name), "standard_name " + standard_name);
    if (axis_of_axis(axis) != CfAxis::unknown) said.emplace_back(axis_of_axis(axis), "axis " + axis);
    if (axis_of_units(units) != CfAxis::unknown) said.emplace_back(axis_of_units(units), "units " + units);
    // CF-1.8, 4.3: only a vertical coordinate has `positive` (up or down).
    if (positive == "up" || positive == "down") said.emplace_back(CfAxis::vertical, "positive " + positive);
  }
  if (!said.empty()) {
    for (const auto& [axis, why] : said)
      if (axis != said[0].first) {
        d.evidence = "conflicting attributes: " + said[0].second + ", " + why;
        return d;
      }
    d.axis = said[0].first;
    d.evidence = said[0].second;
    return d;
  }
  // Neither attribute is there (CAM5-era and hand-made files often carry only a name, or
  // units "degrees"): the record dimension is time, as in every climate model's output; and
  // the names that squall read before it looked at attributes keep working.
  if (is_unlimited(ncid, dimid)) {
    d.axis = CfAxis::time;
    d.evidence = "the unlimited dimension";
  } else if (d.name == "lat" || d.name == "latitude") {
    d.axis = CfAxis::latitude;
    d.evidence = "by name";
  } else if (d.name == "lon" || d.name == "longitude") {
    d.axis = CfAxis::longitude;
    d.evidence = "by name";
  } else if (d.name == "time") {
    d.axis = CfAxis::time;
    d.evidence = "by name";
  } else if (d.name == "level" || d.name == "plev" || d.name == "pressure_level" || d.name == "lev" ||
             d.name == "isobaricInhPa") {
    d.axis = CfAxis::vertical;
    d.evidence = "by name";
  } else {
    d.evidence = d.coordinate >= 0 ? "no latitude, longitude, time or vertical attribute" : "no coordinate variable";
  }
  return d;
}

}  // namespace squall::formats
