// netCDF input (see netcdf_file.hpp). The netCDF library is not thread-safe: every call runs
// under nc_mutex(). Debian's libnetcdf brings its own serial HDF5 (symbol-versioned apart
// from the MPI HDF5 squall links), so h5_lock() is not needed here. Unit conversions are
// made when a file is opened and only applied when it is read (units.hpp).
#include "io/formats/netcdf_file.hpp"

#include <netcdf.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include "io/formats/netcdf_mask.hpp"
#include "io/formats/netcdf_util.hpp"
#include "io/formats/units.hpp"
#include "src/core/error.hpp"

namespace squall::formats {
namespace {

namespace fs = std::filesystem;

constexpr size_t k_max_open = 64;

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\n") - a + 1);
}

// A level or coordinate value as people write it: 850, 85000, 0.5.
std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A channel variable or the labels variable: [time,] [level,] latitude, longitude, each
// dimension found as CF says (cf_dimension), whatever its name.
struct VarLayout {
  int varid = -1;
  std::string name;                   // the variable's
  int time_pos = -1, level_pos = -1;  // positions of those dimensions in dims; -1: none
  size_t level_index = 0;             // the level read, on level_pos
  size_t h = 0, w = 0;
  std::vector<CfDimension> dims;      // the variable's, in order
  float scale = 1.0f, offset = 0.0f;  // packed data: value * scale_factor + add_offset
  bool has_fill = false;
  double fill = 0.0;
  std::string units;                  // its units attribute ("" when absent)
  UnitConversion convert;             // from units to the channel's

  int time_dimid() const { return time_pos >= 0 ? dims[static_cast<size_t>(time_pos)].dimid : -1; }
  const CfDimension& lat() const { return dims[dims.size() - 2]; }
  const CfDimension& lon() const { return dims.back(); }
  // On the same time (or none), latitude and longitude dimensions as `o`: one grid.
  bool same_grid(const VarLayout& o) const {
    return time_dimid() == o.time_dimid() && lat().dimid == o.lat().dimid && lon().dimid == o.lon().dimid;
  }
  // The hyperslab of time step `step`: one level, the whole latitude-longitude plane.
  void slab(int64_t step, std::vector<size_t>& start, std::vector<size_t>& count) const {
    start.assign(dims.size(), 0);
    count.assign(dims.size(), 1);
    if (time_pos >= 0) start[static_cast<size_t>(time_pos)] = static_cast<size_t>(step);
    if (level_pos >= 0) start[static_cast<size_t>(level_pos)] = level_index;
    count[dims.size() - 2] = h;
    count[dims.size() - 1] = w;
  }
};

// The layout of one open file: the channels' variables, labels, coordinates.
struct FileLayout {
  int ncid = -1;
  std::vector<VarLayout> vars;  // by channel
  VarLayout labels;             // varid -1: none
  int64_t steps = 1;
  size_t h = 0, w = 0;
  bool flip = false;            // latitude stored north to south: rows are reversed on read
  NetcdfGrid grid;
};

std::string dims_text(const std::vector<CfDimension>& dims) {
  std::string t = "(";
  for (size_t i = 0; i < dims.size(); ++i) t += (i ? ", " : "") + dims[i].name + "=" + std::to_string(dims[i].length);
  return t + ")";
}

std::string recognised_text(const std::vector<CfDimension>& dims) {
  std::string t;
  for (const CfDimension& d : dims)
    t += (t.empty() ? "" : ", ") + d.name + " as " + cf_axis_text(d.axis) + " (" + d.evidence + ")";
  return t;
}

float float_att(int ncid, int varid, const char* att, float fallback, bool* found = nullptr) {
  nc_type type;
  size_t len = 0;
  if (nc_inq_att(ncid, varid, att, &type, &len) != NC_NOERR || len != 1 || type == NC_CHAR) {
    if (found) *found = false;
    return fallback;
  }
  double v = fallback;
  if (nc_get_att_double(ncid, varid, att, &v) != NC_NOERR) {
    if (found) *found = false;
    return fallback;
  }
  if (found) *found = true;
  return static_cast<float>(v);
}

// The values of a dimension's coordinate variable, and its units and calendar when asked.
std::vector<double> read_coordinate(int ncid, const std::string& path, const CfDimension& d,
                                    std::string* units = nullptr, std::string* calendar = nullptr) {
  if (d.coordinate < 0)
    throw UsageError(path + ": no coordinate variable '" + d.name + "' (the " + cf_axis_text(d.axis) +
                " of each index of dimension '" + d.name + "')");
  std::vector<double> out(d.length);
  if (d.length) nc_check(nc_get_var_double(ncid, d.coordinate, out.data()), path, "coordinate '" + d.name + "'");
  if (units) *units = nc_text_att(ncid, d.coordinate, "units");
  if (calendar) *calendar = nc_text_att(ncid, d.coordinate, "calendar");
  return out;
}

// The levels of a level dimension as a message lists them: "1000, 850, 500 hPa".
std::string levels_text(const std::vector<double>& levels, const std::string& units) {
  std::string t;
  for (double v : levels) t += (t.empty() ? "" : ", ") + number_text(v);
  return t + (units.empty() ? " (no units)" : " " + units);
}

// Checks variable `name` of an open file: present, numeric (integer for labels), on
// [time,] [level,] latitude, longitude (no level for labels). Fills `v` and returns "" when it
// is; else what is wrong with it, as "has ...", callers putting the file and the variable's
// name first. *missing is set when it is absent.
std::string check_variable(int ncid, const std::string& path, const std::string& name, bool integer_only,
                           bool levels, VarLayout& v, bool* missing = nullptr) {
  v = VarLayout{};
  v.name = name;
  if (nc_inq_varid(ncid, name.c_str(), &v.varid) != NC_NOERR) {
    if (missing) *missing = true;
    return "no variable '" + name + "'";
  }
  nc_type type;
  int ndims = 0;
  nc_check(nc_inq_var(ncid, v.varid, nullptr, &type, &ndims, nullptr, nullptr), path, "variable '" + name + "'");
  std::vector<int> dimids(static_cast<size_t>(std::max(ndims, 0)));
  if (ndims) nc_check(nc_inq_vardimid(ncid, v.varid, dimids.data()), path, "variable '" + name + "'");
  const bool numeric = type == NC_BYTE || type == NC_SHORT || type == NC_INT || type == NC_FLOAT ||
                       type == NC_DOUBLE || type == NC_UBYTE || type == NC_USHORT || type == NC_UINT ||
                       type == NC_INT64 || type == NC_UINT64;
  const bool integer = numeric && type != NC_FLOAT && type != NC_DOUBLE;
  if (!numeric || (integer_only && !integer))
    return "has type " + nc_type_text(ncid, type) + ", expected " +
           (integer_only ? "an integer type" : "a numeric type");
  for (int id : dimids) v.dims.push_back(cf_dimension(ncid, id, path));
  const size_t n = v.dims.size();
  const auto is = [&](size_t i, CfAxis a) { return v.dims[i].axis == a; };
  // Before latitude and longitude: time, then a level, each optional.
  bool ok = n >= 2 && n <= (levels ? 4u : 3u) && is(n - 2, CfAxis::latitude) && is(n - 1, CfAxis::longitude);
  for (size_t i = 0; ok && i + 2 < n; ++i) {
    if (is(i, CfAxis::time) && v.time_pos < 0 && v.level_pos < 0) v.time_pos = static_cast<int>(i);
    else if (levels && is(i, CfAxis::vertical) && v.level_pos < 0) v.level_pos = static_cast<int>(i);
    else ok = false;
  }
  if (!ok) {
    std::string hint;
    if (n >= 2 && is(n - 2, CfAxis::longitude) && is(n - 1, CfAxis::latitude)) {
      std::string order;
      for (size_t i = 0; i + 2 < n; ++i) order += v.dims[i].name + ",";
      hint = "; longitude comes before latitude here: transpose the variable (ncpdq -a " + order +
             v.dims[n - 1].name + "," + v.dims[n - 2].name + ", or xarray's transpose)";
    }
    return "has dimensions " + dims_text(v.dims) +
           (n ? ", recognised " + recognised_text(v.dims) : std::string()) + "; expected " +
           (levels ? "(time, latitude, longitude), (time, level, latitude, longitude), (level, latitude, longitude) "
                     "or (latitude, longitude)"
                   : "(time, latitude, longitude) or (latitude, longitude)") +
           hint;
  }
  v.h = v.dims[n - 2].length;
  v.w = v.dims[n - 1].length;
  if (!integer_only) {
    v.scale = float_att(ncid, v.varid, "scale_factor", 1.0f);
    v.offset = float_att(ncid, v.varid, "add_offset", 0.0f);
    bool found = false;
    v.fill = float_att(ncid, v.varid, "_FillValue", 0.0f, &found);
    if (!found) v.fill = float_att(ncid, v.varid, "missing_value", 0.0f, &found);
    v.has_fill = found;
    v.units = trim(nc_text_att(ncid, v.varid, "units"));
  }
  return "";
}

// Picks the level channel `ch` reads of variable v (which has a level dimension), or says why
// it cannot (as check_variable does, "has ..."); `level` gets the level as a message shows it
// ("850 hPa").
std::string select_level(int ncid, const std::string& path, const NetcdfChannel& ch, VarLayout& v,
                         std::string& level) {
  const CfDimension& dim = v.dims[static_cast<size_t>(v.level_pos)];
  std::vector<double> levels;
  std::string units;
  if (dim.coordinate >= 0) levels = read_coordinate(ncid, path, dim, &units);
  units = trim(units);
  if (!ch.has_level) {
    if (dim.length == 1) {
      v.level_index = 0;
      level = levels.empty() ? "" : number_text(levels[0]) + (units.empty() ? "" : " " + units);
      return "";
    }
    return "has " + std::to_string(dim.length) + " levels on '" + dim.name + "'" +
           (levels.empty() ? " (no coordinate variable)" : " (" + levels_text(levels, units) + ")") +
           ": select one as " + v.name + "@LEVEL in data.channels (\"" + ch.name + "=" + v.name + "@" +
           (levels.empty() ? std::string("850") : number_text(levels[levels.size() / 2])) + "\")";
  }
  if (levels.empty())
    return "has no coordinate variable for its level dimension '" + dim.name + "' to find level " +
           number_text(ch.level) + " in";
  double want = ch.level;
  if (!ch.level_units.empty()) {
    if (units.empty())
      return "has levels without units on '" + dim.name + "' (" + levels_text(levels, units) + "), but the channel "
             "selects level " + number_text(ch.level) + " " + ch.level_units + ": write the level as the file has it";
    try {
      want = unit_conversion(ch.level_units, units).apply(ch.level);
    } catch (const Error& e) {
      return "has levels on '" + dim.name + "' in " + units + ", which level " + number_text(ch.level) + " " +
             ch.level_units + " cannot be converted to (" + e.what() + ")";
    }
  }
  // The coordinate is stored (float or double) and the selector converted: equal to within a
  // part in a million, far finer than any two pressure levels differ.
  for (size_t i = 0; i < levels.size(); ++i)
    if (std::fabs(levels[i] - want) <= 1e-6 * std::max(1.0, std::fabs(want))) {
      v.level_index = i;
      level = number_text(levels[i]) + (units.empty() ? "" : " " + units);
      return "";
    }
  return "has no level " + number_text(ch.level) + (ch.level_units.empty() ? "" : " " + ch.level_units) +
         ": its level dimension '" + dim.name + "' holds " + levels_text(levels, units);
}

// The variables of an open file, as inspect lists them.
std::vector<NetcdfVariableInfo> file_variables(int ncid, const std::string& path) {
  int nvars = 0;
  nc_check(nc_inq_nvars(ncid, &nvars), path, "inquiry");
  std::vector<NetcdfVariableInfo> out;
  for (int v = 0; v < nvars; ++v) {
    char name[NC_MAX_NAME + 1] = {0};
    nc_type type;
    int nd = 0;
    nc_check(nc_inq_var(ncid, v, name, &type, &nd, nullptr, nullptr), path, "variable " + std::to_string(v));
    std::vector<int> dimids(static_cast<size_t>(nd));
    if (nd) nc_check(nc_inq_vardimid(ncid, v, dimids.data()), path, std::string("variable '") + name + "'");
    NetcdfVariableInfo vi;
    vi.name = name;
    vi.type = nc_type_text(ncid, type);
    for (int id : dimids) {
      char dn[NC_MAX_NAME + 1] = {0};
      size_t len = 0;
      nc_inq_dim(ncid, id, dn, &len);
      vi.dims.emplace_back(dn);
      vi.shape.push_back(static_cast<int64_t>(len));
    }
    vi.units = nc_text_att(ncid, v, "units");
    vi.long_name = nc_text_att(ncid, v, "long_name");
    vi.coordinate = nd == 1 && vi.dims[0] == vi.name;
    out.push_back(std::move(vi));
  }
  return out;
}

// "msl(time, latitude, longitude) Pa; u(time, level, latitude, longitude) m s-1; ...": the data
// variables of a file (not its coordinates), for an error that says what a file has.
std::string data_variables_text(int ncid, const std::string& path) {
  std::string t;
  for (const NetcdfVariableInfo& v : file_variables(ncid, path)) {
    if (v.coordinate) continue;
    std::string dims;
    for (const std::string& d : v.dims) dims += (dims.empty() ? "" : ", ") + d;
    t += (t.empty() ? "" : "; ") + v.name + "(" + dims + ") " + (v.units.empty() ? "(no units)" : v.units);
  }
  return t.empty() ? "none" : t;
}

// Checks every channel (and the labels) of an open file against `channels`, whose values are
// wanted in `targets` ("": the file's own units). Fills `f` when the file supplies them all,
// and `infos` (one per channel) either way. Returns "" or the one error naming every problem.
std::string examine(FileLayout& f, const std::string& path, const std::vector<NetcdfChannel>& channels,
                    const std::vector<std::string>& targets, const NetcdfOptions& options,
                    std::vector<NetcdfChannelInfo>& infos) {
  infos.assign(channels.size(), NetcdfChannelInfo{});
  std::vector<VarLayout> vars(channels.size());
  std::vector<std::string> missing;
  // Problems as (who, what): channels with the same problem (every field transposed) are
  // named together, so that the error says it once.
  std::vector<std::pair<std::string, std::string>> problems;
  int first = -1;  // the first channel whose variable reads: the others must share its grid
  for (size_t c = 0; c < channels.size(); ++c) {
    const NetcdfChannel& ch = channels[c];
    NetcdfChannelInfo& info = infos[c];
    info.name = ch.name;
    info.spec = ch.spec();
    info.variable = ch.variable;
    VarLayout& v = vars[c];
    bool absent = false;
    std::string problem = check_variable(f.ncid, path, ch.variable, false, true, v, &absent);
    if (absent) {
      info.problem = "no variable '" + ch.variable + "'";
      missing.push_back("no variable '" + ch.variable + "' (channel " + ch.name + ")");
      continue;
    }
    info.units = v.units;
    if (problem.empty() && v.level_pos >= 0) problem = select_level(f.ncid, path, ch, v, info.level);
    else if (problem.empty() && ch.has_level)
      problem = "has no level dimension " + dims_text(v.dims) + ", but the channel selects level " +
                number_text(ch.level) + (ch.level_units.empty() ? "" : " " + ch.level_units) + ": write '" +
                ch.variable + "' without @";
    const std::string& target = targets[c];
    info.target = target.empty() ? v.units : target;
    if (problem.empty() && !v.units.empty() && !target.empty()) {
      try {
        v.convert = unit_conversion(v.units, target);
        if (!v.convert.identity()) info.conversion = v.convert.formula();
      } catch (const Error& e) {
        std::string hint;
        if (units_convertible(v.units, "kg m-2 s-1") && units_convertible(target, "m s-1"))
          hint = " (a mass flux is a rate in m s-1 only through the density of water, 1000 kg m-3: divide the "
                 "variable by it with CDO or xarray first)";
        problem = "has units '" + v.units + "', which cannot be converted to the channel's '" + target + "' (" +
                  e.what() + ")" + hint + "; if the attribute is wrong, fix it (ncatted -a units," + ch.variable +
                  ",o,c,'" + target + "')";
      }
    }
    if (problem.empty() && first >= 0 && !v.same_grid(vars[static_cast<size_t>(first)])) {
      const VarLayout& a = vars[static_cast<size_t>(first)];
      problem = "has dimensions " + dims_text(v.dims) + ", but '" + a.name + "' (channel " +
                channels[static_cast<size_t>(first)].name + ") has " + dims_text(a.dims) +
                ": every channel must be on the same time, latitude and longitude";
    }
    if (!problem.empty()) {
      const std::string who = "variable '" + ch.variable + "' (channel " + ch.name + ")";
      info.problem = who + " " + problem;
      problems.emplace_back(who, problem);
    } else if (first < 0) {
      first = static_cast<int>(c);
    }
  }
  const size_t bad = missing.size() + problems.size();
  if (bad > 0) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : "; ") + m;
    std::vector<bool> said(problems.size(), false);
    for (size_t i = 0; i < problems.size(); ++i) {
      if (said[i]) continue;
      std::string who = problems[i].first;
      size_t same = 1;
      for (size_t j = i + 1; j < problems.size(); ++j)
        if (!said[j] && problems[j].second == problems[i].second) {
          who += ", " + problems[j].first;
          said[j] = true;
          ++same;
        }
      list += (list.empty() ? "" : "; ") + who + (same > 1 ? " each " : " ") + problems[i].second;
    }
    std::string msg = path + ": " + std::to_string(bad) + " of the " + std::to_string(channels.size()) +
                      " channels cannot be read: " + list + ". The file's data variables: " +
                      data_variables_text(f.ncid, path) + ".";
    if (!missing.empty())
      msg += " Map each channel to a variable with data.channels (\"NAME=variable\", or \"NAME=variable@LEVEL\" for a "
             "pressure level) or, for DeepCAM's channels, data.netcdf_variables (\"CHANNEL=variable\"; "
             "--netcdf-variables on the command line).";
    return msg;
  }
  f.vars = std::move(vars);
  const VarLayout& v0 = f.vars[0];
  f.h = v0.h;
  f.w = v0.w;
  try {
    int varid = -1;
    if (!options.labels.empty() && nc_inq_varid(f.ncid, options.labels.c_str(), &varid) == NC_NOERR) {
      const std::string problem = check_variable(f.ncid, path, options.labels, true, false, f.labels);
      if (!problem.empty()) return path + ": variable '" + options.labels + "' (labels, data.netcdf_labels) " + problem;
      if (!f.labels.same_grid(v0))
        return path + ": variable '" + options.labels + "' (labels) has dimensions " + dims_text(f.labels.dims) +
               ", unlike the fields' " + dims_text(v0.dims);
    }
    if (v0.time_pos >= 0) {
      const CfDimension& time = v0.dims[static_cast<size_t>(v0.time_pos)];
      f.steps = static_cast<int64_t>(time.length);
      if (time.coordinate >= 0) f.grid.time = read_coordinate(f.ncid, path, time, &f.grid.time_units, &f.grid.calendar);
      f.grid.time_dim = time.name;
    }
    f.grid.lat = read_coordinate(f.ncid, path, v0.lat());
    f.grid.lon = read_coordinate(f.ncid, path, v0.lon());
  } catch (const UsageError& e) {
    return e.what();
  }
  f.grid.lat_dim = v0.lat().name;
  f.grid.lon_dim = v0.lon().name;
  // ERA5 and other reanalyses store latitude north to south; the networks are trained on
  // squall's grid (docs/formats.md, "Grid"), row 0 southernmost.
  f.flip = f.grid.lat.size() > 1 && f.grid.lat.front() > f.grid.lat.back();
  if (f.flip) std::reverse(f.grid.lat.begin(), f.grid.lat.end());
  f.grid.lat_descending = f.flip;
  return "";
}

// The units each channel is wanted in: options.units where given, else a DeepCAM channel's
// own, else "" (the file's).
std::vector<std::string> target_units(const std::vector<NetcdfChannel>& channels, const NetcdfOptions& options) {
  std::vector<std::string> out(channels.size());
  for (size_t c = 0; c < channels.size(); ++c) {
    out[c] = c < options.units.size() ? trim(options.units[c]) : "";
    if (out[c].empty()) out[c] = deepcam_units_of(channels[c].name);
  }
  return out;
}

// Opens and checks a file (under nc_mutex()). Closes it again on error.
FileLayout open_layout(const std::string& path, const std::vector<NetcdfChannel>& channels,
                       const std::vector<std::string>& targets, const NetcdfOptions& options) {
  FileLayout f;
  nc_check(nc_open(path.c_str(), NC_NOWRITE, &f.ncid), path, "open");
  try {
    std::vector<NetcdfChannelInfo> infos;
    const std::string error = examine(f, path, channels, targets, options, infos);
    if (!error.empty()) throw UsageError(error);
  } catch (...) {
    nc_close(f.ncid);
    throw;
  }
  return f;
}

// Reads step `step` of an open file into chw [c, h, w] (values unpacked, fill values NaN,
// converted to the channels' units) and labels [h, w] (when the file has labels and `labels`
// is not null). With a `window` (in the sample's rows, south to north), only its rows and
// columns: chw [c, rows, cols] and labels [rows, cols], read by nc_get_vara as one hyperslab
// per variable (a classic file gives up only those values' bytes; a netCDF-4 file the chunks
// that the window touches).
void read_step(const FileLayout& f, const std::string& path, int64_t step, const std::vector<NetcdfChannel>& channels,
               const NetcdfOptions& options, float* chw, int32_t* labels, const data::Window* window = nullptr) {
  const size_t rows = window ? static_cast<size_t>(window->rows) : f.h;
  const size_t cols = window ? static_cast<size_t>(window->cols) : f.w;
  const size_t plane = rows * cols;
  // The window's first row as the file stores them (north to south when flipped).
  const size_t row0 = !window ? 0 : f.flip ? f.h - static_cast<size_t>(window->row0) - rows
                                           : static_cast<size_t>(window->row0);
  const size_t col0 = window ? static_cast<size_t>(window->col0) : 0;
  const std::string where = window ? ", window " + data::window_text(*window) : std::string();
  std::vector<size_t> start, count;
  auto slab = [&](const VarLayout& v) {
    v.slab(step, start, count);
    const size_t d = start.size();
    start[d - 2] = row0, count[d - 2] = rows;
    start[d - 1] = col0, count[d - 1] = cols;
  };
  for (size_t c = 0; c < f.vars.size(); ++c) {
    const VarLayout& v = f.vars[c];
    float* out = chw + c * plane;
    slab(v);
    nc_check(nc_get_vara_float(f.ncid, v.varid, start.data(), count.data(), out), path,
             "variable '" + v.name + "' (channel " + channels[c].name + "), time step " + std::to_string(step) + where);
    if (v.has_fill) {
      const float fill = static_cast<float>(v.fill);
      for (size_t p = 0; p < plane; ++p)
        if (out[p] == fill) out[p] = std::numeric_limits<float>::quiet_NaN();
    }
    if (v.scale != 1.0f || v.offset != 0.0f)
      for (size_t p = 0; p < plane; ++p) out[p] = out[p] * v.scale + v.offset;
    v.convert.apply(out, plane);
    if (f.flip) reverse_rows(out, rows, cols);
  }
  if (labels && f.labels.varid >= 0) {
    slab(f.labels);
    nc_check(nc_get_vara_int(f.ncid, f.labels.varid, start.data(), count.data(), labels), path,
             "variable '" + options.labels + "', time step " + std::to_string(step) + where);
    if (f.flip) reverse_rows(labels, rows, cols);
  }
}

class NetcdfSourceImpl final : public NetcdfSource {
 public:
  NetcdfSourceImpl(std::vector<std::string> paths, const std::string& stats_path, const OpenOptions& options,
                   NetcdfOptions netcdf)
      : m_paths(std::move(paths)), m_netcdf(std::move(netcdf)), m_open(m_paths.size()) {
    if (m_paths.empty()) throw Error("no netCDF files given");
    m_channels = netcdf_channels(m_netcdf);
    m_targets = target_units(m_channels, m_netcdf);
    m_offsets.push_back(0);
    m_c = static_cast<int64_t>(m_channels.size());
    m_shift.assign(static_cast<size_t>(m_c), 0.0f);
    m_scale.assign(static_cast<size_t>(m_c), 1.0f);
    if (options.normalize) {
      m_norm = channel_normalization(options, stats_path, m_c, "netCDF files next to " + m_paths[0],
                                     fs::path(m_paths[0]).parent_path().string());
      for (size_t i = 0; i < m_norm.mean.size(); ++i) {
        m_shift[i] = m_norm.mean[i];
        m_scale[i] = 1.0f / m_norm.std[i];
      }
    }
    // Opened last: nothing above throws with files open.
    {
      auto lock = nc_lock();
      try {
        open_all();
      } catch (...) {
        close_all();
        throw;
      }
    }
    m_info.sample = nn::Shape(1, m_c, m_h, m_w);
    m_info.classes = 3;
    m_info.class_names = {"background", "tropical cyclone", "atmospheric river"};
    m_info.per_pixel_labels = true;
    for (const NetcdfChannel& ch : m_channels) m_info.channel_names.push_back(ch.name);
    m_info.channel_units = m_targets;  // the values' units as read: every file converted to them
    if (m_norm.kind != "none") m_norm.units = m_targets;
    m_info.lat = m_grids.front().lat;
    m_info.lon = m_grids.front().lon;
    m_info.description = "netCDF (" + std::to_string(m_paths.size()) + " files, " + std::to_string(size()) +
                         " time steps, " + m_info.sample.str() + (m_all_labels ? "" : ", without labels") + ", " +
                         fs::path(m_paths[0]).parent_path().string() + ")";
  }

  // Adds `text` to the description: "netCDF (..., <text>)".
  void note(const std::string& text) { m_info.description.insert(m_info.description.size() - 1, ", " + text); }

  ~NetcdfSourceImpl() override {
    auto lock = nc_lock();
    close_all();
  }

  const data::DatasetInfo& info() const override { return m_info; }
  int64_t size() const override { return m_offsets.back(); }
  std::vector<std::string> files() const override { return m_paths; }
  std::vector<int64_t> file_offsets() const override { return m_offsets; }
  bool has_labels() const override { return m_all_labels; }
  const data::Normalization& normalization() const override { return m_norm; }

  std::pair<std::string, int64_t> sample_location(int64_t index) const override {
    if (index < 0 || index >= size())
      throw Error("netCDF: sample index " + std::to_string(index) + " outside [0, " + std::to_string(size()) + ")");
    const size_t file = static_cast<size_t>(std::upper_bound(m_offsets.begin(), m_offsets.end(), index) -
                                            m_offsets.begin() - 1);
    return {m_paths[file], index - m_offsets[file]};
  }

  NetcdfGrid sample_grid(int64_t index) const override {
    const auto [path, step] = sample_location(index);
    const size_t file = static_cast<size_t>(std::upper_bound(m_offsets.begin(), m_offsets.end(), index) -
                                            m_offsets.begin() - 1);
    NetcdfGrid g = m_grids[file];
    g.time = g.time.empty() ? std::vector<double>{} : std::vector<double>{g.time[static_cast<size_t>(step)]};
    return g;
  }

  void read(std::span<const int64_t> indices, float* images, int32_t* labels) const override {
    read_samples(indices, nullptr, images, labels);
  }

  // Only the window's values of each variable are read (read_step).
  void read_window(std::span<const int64_t> indices, const data::Window& w, float* images,
                   int32_t* labels) const override {
    data::check_window(*this, w);
    read_samples(indices, &w, images, labels);
  }

 private:
  // read() and read_window(): whole samples, or the window of each.
  void read_samples(std::span<const int64_t> indices, const data::Window* window, float* images,
                    int32_t* labels) const {
    const int64_t plane = window ? window->rows * window->cols : m_h * m_w;
    const std::string place = window ? " of the window " + data::window_text(*window) : std::string();
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t index = indices[k];
      const auto [path, step] = sample_location(index);
      const size_t file = static_cast<size_t>(std::upper_bound(m_offsets.begin(), m_offsets.end(), index) -
                                              m_offsets.begin() - 1);
      float* dst = images + k * static_cast<size_t>(plane * m_c);
      int32_t* lab = labels + k * static_cast<size_t>(plane);
      bool file_labels = false;
      {
        auto lock = nc_lock();
        const FileLayout& f = open_file(file);
        file_labels = f.labels.varid >= 0;
        try {
          read_step(f, path, step, m_channels, m_netcdf, dst, lab, window);
        } catch (const Error& e) {
          throw data::BadSample(e.what(), path, index);
        }
      }
      if (!file_labels) std::fill(lab, lab + plane, 0);
      for (int64_t c = 0; c < m_c; ++c) {
        const float shift = m_shift[static_cast<size_t>(c)], scale = m_scale[static_cast<size_t>(c)];
        float* out = dst + c * plane;
        bool finite = true;
        for (int64_t p = 0; p < plane; ++p) {
          finite &= std::isfinite(out[p]);
          out[p] = (out[p] - shift) * scale;
        }
        if (!finite)
          for (int64_t p = 0; p < plane; ++p)
            if (!std::isfinite(out[p]))
              throw data::BadSample(path + ": variable '" + m_channels[static_cast<size_t>(c)].variable +
                                        "' (channel " + m_channels[static_cast<size_t>(c)].name + "): missing or non-finite value at time step " + std::to_string(step) +
                                        ", pixel " + std::to_string(p) + place + " (index " + std::to_string(index) + ")",
                                    path, index);
      }
      for (int64_t p = 0; p < plane; ++p)
        if (lab[p] < 0 || lab[p] > 2)
          throw data::BadSample(path + ": variable '" + m_netcdf.labels + "': value " + std::to_string(lab[p]) +
                                    " at time step " + std::to_string(step) + ", pixel " + std::to_string(p) + place +
                                    " is not 0, 1 or 2 (index " + std::to_string(index) + ")",
                                path, index);
    }
  }

  // Opens and checks every file (nc_lock() held): offsets, grids, the common shape.
  void open_all() {
    for (size_t i = 0; i < m_paths.size(); ++i) {
      FileLayout f = open_layout(m_paths[i], m_channels, m_targets, m_netcdf);
      if (i == 0) {
        m_h = static_cast<int64_t>(f.h);
        m_w = static_cast<int64_t>(f.w);
        // A channel without units of its own takes the first file's; later files convert to them.
        for (size_t c = 0; c < m_targets.size(); ++c)
          if (m_targets[c].empty()) m_targets[c] = f.vars[c].units;
      } else if (static_cast<int64_t>(f.h) != m_h || static_cast<int64_t>(f.w) != m_w) {
        const std::string msg = m_paths[i] + ": variable '" + m_channels[0].variable + "' has lat=" +
                                std::to_string(f.h) + ", lon=" + std::to_string(f.w) + " but " + m_paths[0] +
                                " has lat=" + std::to_string(m_h) + ", lon=" + std::to_string(m_w);
        nc_close(f.ncid);
        throw Error(msg);
      }
      m_all_labels = m_all_labels && f.labels.varid >= 0;
      m_offsets.push_back(m_offsets.back() + f.steps);
      m_grids.push_back(f.grid);
      remember(i, std::move(f));
    }
  }

  void close_all() {
    for (FileLayout& f : m_open)
      if (f.ncid >= 0) nc_close(f.ncid);
    for (FileLayout& f : m_open) f.ncid = -1;
  }

  // Called with nc_lock() held.
  void remember(size_t i, FileLayout&& f) const {
    if (m_open_order.size() >= k_max_open) {
      nc_close(m_open[m_open_order.front()].ncid);
      m_open[m_open_order.front()] = FileLayout{};
      m_open_order.pop_front();
    }
    m_open[i] = std::move(f);
    m_open_order.push_back(i);
  }

  const FileLayout& open_file(size_t i) const {
    if (m_open[i].ncid < 0) remember(i, open_layout(m_paths[i], m_channels, m_targets, m_netcdf));
    return m_open[i];
  }

  std::vector<std::string> m_paths;
  NetcdfOptions m_netcdf;
  std::vector<NetcdfChannel> m_channels;
  std::vector<std::string> m_targets;       // the units of each channel's values as read
  mutable std::vector<FileLayout> m_open;   // by file; ncid -1 when closed
  mutable std::deque<size_t> m_open_order;  // oldest first
  std::vector<int64_t> m_offsets;
  std::vector<NetcdfGrid> m_grids;
  bool m_all_labels = true;
  int64_t m_h = 0, m_w = 0, m_c = 0;
  std::vector<float> m_shift, m_scale;
  data::Normalization m_norm;
  data::DatasetInfo m_info;
};

}  // namespace

const std::vector<std::string>& deepcam_channel_names() {
  static const std::vector<std::string> names = {"TMQ",  "U850",  "V850", "UBOT",  "VBOT",   "QREFHT",
                                                 "PS",   "PSL",   "T200", "T500",  "PRECT",  "TS",
                                                 "TREFHT", "Z1000", "Z200", "ZBOT"};
  return names;
}

const std::vector<std::string>& deepcam_channel_units() {
  // As src/data/climate_channels.hpp says, in UDUNITS-2's spelling.
  static const std::vector<std::string> units = {"kg m-2", "m s-1", "m s-1", "m s-1", "m s-1", "kg kg-1",
                                                 "Pa",     "Pa",    "K",     "K",     "m s-1", "K",
                                                 "K",      "m",     "m",     "m"};
  return units;
}

std::string deepcam_units_of(const std::string& name) {
  const auto& names = deepcam_channel_names();
  const auto it = std::find(names.begin(), names.end(), name);
  return it == names.end() ? "" : deepcam_channel_units()[static_cast<size_t>(it - names.begin())];
}

std::string NetcdfChannel::spec() const {
  return has_level ? variable + "@" + number_text(level) + level_units : variable;
}

NetcdfChannel parse_netcdf_spec(const std::string& spec, const std::string& name) {
  NetcdfChannel ch;
  ch.name = trim(name);
  const std::string s = trim(spec);
  const size_t at = s.find('@');
  ch.variable = trim(s.substr(0, at));
  if (ch.variable.empty()) throw Error("'" + s + "' names no variable (write variable or variable@LEVEL)");
  if (at == std::string::npos) return ch;
  const std::string level = trim(s.substr(at + 1));
  const char* begin = level.c_str();
  char* end = nullptr;
  ch.level = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(ch.level))
    throw Error("'" + s + "': the level after @ must be a number, optionally with units (u@850, ua@850hPa)");
  ch.has_level = true;
  ch.level_units = trim(end);
  if (!ch.level_units.empty() && !units_known(ch.level_units))
    throw Error("'" + s + "': '" + ch.level_units + "' is not a unit UDUNITS-2 knows (hPa, Pa, mbar, ...)");
  return ch;
}

NetcdfChannel parse_netcdf_channel(const std::string& entry) {
  const std::string e = trim(entry);
  const size_t eq = e.find('=');
  if (eq == std::string::npos) return parse_netcdf_spec(e, e);
  const std::string name = trim(e.substr(0, eq));
  if (name.empty()) throw Error("'" + e + "' has no channel name before '=' (write NAME=variable, or just variable)");
  return parse_netcdf_spec(e.substr(eq + 1), name);
}

std::vector<std::string> netcdf_variable_map(const std::string& overrides) {
  std::vector<std::string> out = deepcam_channel_names();
  size_t pos = 0;
  while (pos <= overrides.size()) {
    const size_t comma = std::min(overrides.find(',', pos), overrides.size());
    const std::string pair = trim(overrides.substr(pos, comma - pos));
    pos = comma + 1;
    if (pair.empty()) {
      if (comma >= overrides.size()) break;
      continue;
    }
    const size_t eq = pair.find('=');
    if (eq == std::string::npos)
      throw Error("netCDF variables: '" + pair + "' is not CHANNEL=variable (e.g. PSL=slp)");
    const std::string channel = trim(pair.substr(0, eq)), var = trim(pair.substr(eq + 1));
    const auto it = std::find(deepcam_channel_names().begin(), deepcam_channel_names().end(), channel);
    if (it == deepcam_channel_names().end())
      throw Error("netCDF variables: unknown channel '" + channel + "' (TMQ, U850, V850, UBOT, VBOT, QREFHT, PS, "
                  "PSL, T200, T500, PRECT, TS, TREFHT, Z1000, Z200, ZBOT)");
    if (var.empty()) throw Error("netCDF variables: channel " + channel + " mapped to an empty name");
    try {
      parse_netcdf_spec(var, channel);
    } catch (const Error& e) {
      throw Error("netCDF variables: channel " + channel + ": " + e.what());
    }
    out[static_cast<size_t>(it - deepcam_channel_names().begin())] = var;
  }
  return out;
}

std::vector<NetcdfChannel> netcdf_channels(const NetcdfOptions& options) {
  std::vector<NetcdfChannel> out;
  if (!options.channels.empty()) {
    std::set<std::string> names;
    for (const std::string& entry : options.channels) {
      try {
        out.push_back(parse_netcdf_channel(entry));
      } catch (const Error& e) {
        throw UsageError(std::string("data.channels: ") + e.what());
      }
      if (!names.insert(out.back().name).second)
        throw UsageError("data.channels: channel '" + out.back().name + "' is listed twice; give each channel its own "
                         "name (NAME=variable@LEVEL)");
    }
  } else {
    const std::vector<std::string> vars = options.variables.empty() ? deepcam_channel_names() : options.variables;
    if (vars.size() != deepcam_channel_names().size())
      throw Error("netCDF: " + std::to_string(vars.size()) + " variable names given, expected " +
                  std::to_string(deepcam_channel_names().size()) + " (one per DeepCAM channel)");
    for (size_t c = 0; c < vars.size(); ++c) {
      try {
        out.push_back(parse_netcdf_spec(vars[c], deepcam_channel_names()[c]));
      } catch (const Error& e) {
        throw UsageError("data.netcdf_variables: channel " + deepcam_channel_names()[c] + ": " + e.what());
      }
    }
  }
  if (!options.units.empty() && options.units.size() != out.size())
    throw UsageError("netCDF: units given for " + std::to_string(options.units.size()) + " channels, but the channel "
                     "list has " + std::to_string(out.size()) + " (the checkpoint's or training set's channels differ "
                     "from data.channels)");
  return out;
}

NetcdfOptions netcdf_options(const std::vector<std::string>& channels, const std::string& netcdf_variables,
                             const std::string& labels) {
  NetcdfOptions o;
  o.labels = labels;
  if (!channels.empty() && !trim(netcdf_variables).empty())
    throw UsageError("data.channels and data.netcdf_variables are both set: with data.channels, name each channel's "
                     "variable in its entry (\"PSL=msl\") and leave data.netcdf_variables empty");
  if (!channels.empty()) {
    o.channels = channels;
    netcdf_channels(o);  // checked now: a bad entry is the config's error, not the first file's
    return o;
  }
  try {
    o.variables = netcdf_variable_map(netcdf_variables);
  } catch (const Error& e) {
    throw UsageError(std::string("data.netcdf_variables: ") + e.what());
  }
  return o;
}

NetcdfFileInfo survey_netcdf(const std::string& path, const NetcdfOptions& options) {
  const std::vector<NetcdfChannel> channels = netcdf_channels(options);
  const std::vector<std::string> targets = target_units(channels, options);
  auto lock = nc_lock();
  FileLayout f;
  nc_check(nc_open(path.c_str(), NC_NOWRITE, &f.ncid), path, "open");
  NetcdfFileInfo info;
  info.path = path;
  try {
    int format = 0;
    nc_check(nc_inq_format(f.ncid, &format), path, "format");
    info.format = format == NC_FORMAT_CLASSIC           ? "classic"
                  : format == NC_FORMAT_64BIT_OFFSET    ? "64-bit offset"
                  : format == NC_FORMAT_64BIT_DATA      ? "64-bit data"
                  : format == NC_FORMAT_NETCDF4         ? "netCDF-4"
                  : format == NC_FORMAT_NETCDF4_CLASSIC ? "netCDF-4 classic model"
                                                        : "unknown";
    int ndims = 0;
    nc_check(nc_inq_ndims(f.ncid, &ndims), path, "inquiry");
    // The time steps, whether or not the channels read: the first time dimension's length.
    info.steps = 1;
    for (int d = 0; d < ndims; ++d) {
      char name[NC_MAX_NAME + 1] = {0};
      size_t len = 0;
      nc_check(nc_inq_dim(f.ncid, d, name, &len), path, "dimension " + std::to_string(d));
      info.dims.emplace_back(name, static_cast<int64_t>(len));
      const CfDimension dim = cf_dimension(f.ncid, d, path);
      if (info.time_dim.empty() && dim.axis == CfAxis::time) {
        info.time_dim = name;
        info.steps = static_cast<int64_t>(len);
        if (dim.coordinate >= 0) {
          info.grid.time_units = nc_text_att(f.ncid, dim.coordinate, "units");
          info.grid.calendar = nc_text_att(f.ncid, dim.coordinate, "calendar");
        }
      }
    }
    info.variables = file_variables(f.ncid, path);
    info.channel_error = examine(f, path, channels, targets, options, info.channels);
  } catch (...) {
    nc_close(f.ncid);
    throw;
  }
  nc_close(f.ncid);
  if (info.channel_error.empty()) {
    info.steps = f.steps;
    info.time_dim = f.vars[0].time_pos >= 0 ? f.grid.time_dim : "";
    info.height = static_cast<int64_t>(f.h);
    info.width = static_cast<int64_t>(f.w);
    info.has_labels = f.labels.varid >= 0;
    info.grid = f.grid;
  }
  return info;
}

NetcdfFileInfo describe_netcdf(const std::string& path, const NetcdfOptions& options) {
  NetcdfFileInfo info = survey_netcdf(path, options);
  if (!info.channel_error.empty()) throw UsageError(info.channel_error);
  return info;
}

NetcdfSample read_netcdf_sample(const std::string& path, int64_t step, const NetcdfOptions& options) {
  const std::vector<NetcdfChannel> channels = netcdf_channels(options);
  const std::vector<std::string> targets = target_units(channels, options);
  auto lock = nc_lock();
  FileLayout f = open_layout(path, channels, targets, options);
  NetcdfSample s;
  try {
    if (step < 0 || step >= f.steps)
      throw Error(path + ": time step " + std::to_string(step) + " outside [0, " + std::to_string(f.steps) + ")");
    s.h = static_cast<int64_t>(f.h);
    s.w = static_cast<int64_t>(f.w);
    s.c = static_cast<int64_t>(f.vars.size());
    s.chw.resize(static_cast<size_t>(s.c * s.h * s.w));
    if (f.labels.varid >= 0) s.labels.resize(f.h * f.w);
    read_step(f, path, step, channels, options, s.chw.data(), s.labels.empty() ? nullptr : s.labels.data());
    s.grid = f.grid;
    if (!s.grid.time.empty()) s.grid.time = {s.grid.time[static_cast<size_t>(step)]};
  } catch (...) {
    nc_close(f.ncid);
    throw;
  }
  nc_close(f.ncid);
  return s;
}

std::vector<std::string> list_netcdf_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec) && entry.path().extension() == ".nc") out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<NetcdfSource> open_netcdf_files(const std::vector<std::string>& files, const std::string& stats_path,
                                                const OpenOptions& options, const NetcdfOptions& netcdf) {
  return std::make_unique<NetcdfSourceImpl>(files, stats_path, options, netcdf);
}

std::unique_ptr<NetcdfSource> open_netcdf(const std::string& path, const OpenOptions& options,
                                          const NetcdfOptions& netcdf) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec))
    return open_netcdf_files({path}, find_deepcam_stats(fs::path(path).parent_path().string()), options, netcdf);
  // Masks `squall predict` wrote into the folder (netcdf_mask.hpp's marker) are its output, not
  // data: left out, and said so in the source's description, which the run's log prints.
  std::vector<std::string> files;
  size_t masks = 0;
  for (const std::string& f : list_netcdf_files(path)) {
    if (netcdf_is_squall_mask(f))
      ++masks;
    else
      files.push_back(f);
  }
  if (files.empty())
    throw Error(path + ": no netCDF files (*.nc)" +
                (masks ? " other than the " + std::to_string(masks) + " mask file(s) squall predict wrote" : std::string()));
  auto source = std::make_unique<NetcdfSourceImpl>(files, find_deepcam_stats(path), options, netcdf);
  if (masks) source->note(std::to_string(masks) + " mask file(s) squall predict wrote left out");
  return source;
}

}  // namespace squall::formats
