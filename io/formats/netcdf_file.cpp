// netCDF input (see netcdf_file.hpp). The netCDF library is not thread-safe: every call runs
// under nc_mutex(). Debian's libnetcdf brings its own serial HDF5 (symbol-versioned apart
// from the MPI HDF5 squall links), so h5_lock() is not needed here.
#include "io/formats/netcdf_file.hpp"

#include <netcdf.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>

#include "io/formats/netcdf_util.hpp"
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

// A field or labels variable: (latitude, longitude), or (time, latitude, longitude), each
// dimension found as CF says (cf_dimension), whatever its name.
struct VarLayout {
  int varid = -1;
  bool timed = false;
  size_t h = 0, w = 0;
  std::vector<CfDimension> dims;      // the variable's, in order
  float scale = 1.0f, offset = 0.0f;  // packed data: value * scale_factor + add_offset
  bool has_fill = false;
  double fill = 0.0;

  bool same_dims(const VarLayout& o) const {
    return std::equal(dims.begin(), dims.end(), o.dims.begin(), o.dims.end(),
                      [](const CfDimension& a, const CfDimension& b) { return a.dimid == b.dimid; });
  }
};

// The layout of one open file: the mapped variables, labels, coordinates.
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

VarLayout check_variable(int ncid, const std::string& path, const std::string& name, const std::string& what,
                         bool integer_only) {
  VarLayout v;
  if (nc_inq_varid(ncid, name.c_str(), &v.varid) != NC_NOERR)
    throw UsageError(path + ": no variable '" + name + "' (" + what + ")");
  nc_type type;
  int ndims = 0;
  nc_check(nc_inq_var(ncid, v.varid, nullptr, &type, &ndims, nullptr, nullptr), path, "variable '" + name + "'");
  std::vector<int> dimids(static_cast<size_t>(std::max(ndims, 0)));
  nc_check(nc_inq_vardimid(ncid, v.varid, dimids.data()), path, "variable '" + name + "'");
  const bool numeric = type == NC_BYTE || type == NC_SHORT || type == NC_INT || type == NC_FLOAT ||
                       type == NC_DOUBLE || type == NC_UBYTE || type == NC_USHORT || type == NC_UINT ||
                       type == NC_INT64 || type == NC_UINT64;
  const bool integer = numeric && type != NC_FLOAT && type != NC_DOUBLE;
  if (!numeric || (integer_only && !integer))
    throw UsageError(path + ": variable '" + name + "' (" + what + ") has type " + nc_type_text(ncid, type) + ", expected " +
                (integer_only ? "an integer type" : "a numeric type"));
  for (int id : dimids) v.dims.push_back(cf_dimension(ncid, id, path));
  const size_t n = v.dims.size();
  const auto is = [&](size_t i, CfAxis a) { return v.dims[i].axis == a; };
  const bool ok = (n == 2 || (n == 3 && is(0, CfAxis::time))) && is(n - 2, CfAxis::latitude) &&
                  is(n - 1, CfAxis::longitude);
  if (!ok) {
    std::string hint;
    if (n >= 2 && n <= 3 && is(n - 2, CfAxis::longitude) && is(n - 1, CfAxis::latitude))
      hint = "; longitude comes before latitude here: transpose the variable (ncpdq -a " +
             (n == 3 ? v.dims[0].name + "," : std::string()) + v.dims[n - 1].name + "," + v.dims[n - 2].name +
             ", or xarray's transpose)";
    throw UsageError(path + ": variable '" + name + "' (" + what + ") has dimensions " + dims_text(v.dims) +
                (n ? ", recognised " + recognised_text(v.dims) : std::string()) +
                "; expected (time, latitude, longitude) or (latitude, longitude)" + hint);
  }
  v.timed = n == 3;
  v.h = v.dims[n - 2].length;
  v.w = v.dims[n - 1].length;
  if (!integer_only) {
    v.scale = float_att(ncid, v.varid, "scale_factor", 1.0f);
    v.offset = float_att(ncid, v.varid, "add_offset", 0.0f);
    bool found = false;
    v.fill = float_att(ncid, v.varid, "_FillValue", 0.0f, &found);
    if (!found) v.fill = float_att(ncid, v.varid, "missing_value", 0.0f, &found);
    v.has_fill = found;
  }
  return v;
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

// Opens and checks a file (under nc_mutex()). Closes it again on error.
FileLayout open_layout(const std::string& path, const NetcdfOptions& options) {
  FileLayout f;
  nc_check(nc_open(path.c_str(), NC_NOWRITE, &f.ncid), path, "open");
  try {
    const std::vector<std::string> names =
        options.variables.empty() ? netcdf_variable_map("") : options.variables;
    if (names.size() != deepcam_channel_names().size())
      throw UsageError(path + ": " + std::to_string(names.size()) + " variable names given, expected " +
                  std::to_string(deepcam_channel_names().size()) + " (one per DeepCAM channel)");
    for (size_t c = 0; c < names.size(); ++c) {
      VarLayout v = check_variable(f.ncid, path, names[c], "channel " + deepcam_channel_names()[c], false);
      if (c == 0) {
        f.h = v.h;
        f.w = v.w;
      } else if (!v.same_dims(f.vars[0])) {
        throw UsageError(path + ": variable '" + names[c] + "' has dimensions " + dims_text(v.dims) + ", but '" +
                    names[0] + "' has " + dims_text(f.vars[0].dims) + ": every field must be on the same dimensions");
      }
      f.vars.push_back(v);
    }
    const VarLayout& first = f.vars[0];
    int varid = -1;
    if (!options.labels.empty() && nc_inq_varid(f.ncid, options.labels.c_str(), &varid) == NC_NOERR) {
      f.labels = check_variable(f.ncid, path, options.labels, "labels", true);
      if (!f.labels.same_dims(first))
        throw UsageError(path + ": variable '" + options.labels + "' (labels) has dimensions " + dims_text(f.labels.dims) +
                    ", unlike the fields' " + dims_text(first.dims));
    }
    const CfDimension& lat = first.dims[first.dims.size() - 2];
    const CfDimension& lon = first.dims.back();
    if (first.timed) {
      const CfDimension& time = first.dims[0];
      f.steps = static_cast<int64_t>(time.length);
      if (time.coordinate >= 0) f.grid.time = read_coordinate(f.ncid, path, time, &f.grid.time_units, &f.grid.calendar);
      f.grid.time_dim = time.name;
    }
    f.grid.lat = read_coordinate(f.ncid, path, lat);
    f.grid.lon = read_coordinate(f.ncid, path, lon);
    f.grid.lat_dim = lat.name;
    f.grid.lon_dim = lon.name;
    // ERA5 and other reanalyses store latitude north to south; the networks are trained on
    // squall's grid (docs/formats.md, "Grid"), row 0 southernmost.
    f.flip = f.grid.lat.size() > 1 && f.grid.lat.front() > f.grid.lat.back();
    if (f.flip) std::reverse(f.grid.lat.begin(), f.grid.lat.end());
    f.grid.lat_descending = f.flip;
  } catch (...) {
    nc_close(f.ncid);
    throw;
  }
  return f;
}

// Reads step `step` of an open file into chw [c, h, w] (raw values; fill values become NaN)
// and labels [h, w] (when the file has labels and `labels` is not null).
void read_step(const FileLayout& f, const std::string& path, int64_t step, const NetcdfOptions& options,
               float* chw, int32_t* labels) {
  const size_t plane = f.h * f.w;
  const size_t start3[3] = {static_cast<size_t>(step), 0, 0}, count3[3] = {1, f.h, f.w};
  const size_t* start = f.vars[0].timed ? start3 : start3 + 1;
  const size_t* count = f.vars[0].timed ? count3 : count3 + 1;
  const std::vector<std::string> names = options.variables.empty() ? netcdf_variable_map("") : options.variables;
  for (size_t c = 0; c < f.vars.size(); ++c) {
    const VarLayout& v = f.vars[c];
    float* out = chw + c * plane;
    nc_check(nc_get_vara_float(f.ncid, v.varid, start, count, out), path,
             "variable '" + names[c] + "', time step " + std::to_string(step));
    if (v.has_fill) {
      const float fill = static_cast<float>(v.fill);
      for (size_t p = 0; p < plane; ++p)
        if (out[p] == fill) out[p] = std::numeric_limits<float>::quiet_NaN();
    }
    if (v.scale != 1.0f || v.offset != 0.0f)
      for (size_t p = 0; p < plane; ++p) out[p] = out[p] * v.scale + v.offset;
    if (f.flip) reverse_rows(out, f.h, f.w);
  }
  if (labels && f.labels.varid >= 0) {
    nc_check(nc_get_vara_int(f.ncid, f.labels.varid, start, count, labels), path,
             "variable '" + options.labels + "', time step " + std::to_string(step));
    if (f.flip) reverse_rows(labels, f.h, f.w);
  }
}

class NetcdfSourceImpl final : public NetcdfSource {
 public:
  NetcdfSourceImpl(std::vector<std::string> paths, const std::string& stats_path, const OpenOptions& options,
                   NetcdfOptions netcdf)
      : m_paths(std::move(paths)), m_netcdf(std::move(netcdf)), m_open(m_paths.size()) {
    if (m_paths.empty()) throw Error("no netCDF files given");
    if (m_netcdf.variables.empty()) m_netcdf.variables = netcdf_variable_map("");
    m_offsets.push_back(0);
    m_c = static_cast<int64_t>(m_netcdf.variables.size());
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
    m_info.channel_names = deepcam_channel_names();
    m_info.channel_units.assign(m_info.channel_names.size(), "");
    m_info.lat = m_grids.front().lat;
    m_info.lon = m_grids.front().lon;
    m_info.description = "netCDF (" + std::to_string(m_paths.size()) + " files, " + std::to_string(size()) +
                         " time steps, " + m_info.sample.str() + (m_all_labels ? "" : ", without labels") + ", " +
                         fs::path(m_paths[0]).parent_path().string() + ")";
  }

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
    const int64_t plane = m_h * m_w;
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
          read_step(f, path, step, m_netcdf, dst, lab);
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
              throw data::BadSample(path + ": variable '" + m_netcdf.variables[static_cast<size_t>(c)] +
                                        "': missing or non-finite value at time step " + std::to_string(step) +
                                        ", pixel " + std::to_string(p) + " (index " + std::to_string(index) + ")",
                                    path, index);
      }
      for (int64_t p = 0; p < plane; ++p)
        if (lab[p] < 0 || lab[p] > 2)
          throw data::BadSample(path + ": variable '" + m_netcdf.labels + "': value " + std::to_string(lab[p]) +
                                    " at time step " + std::to_string(step) + ", pixel " + std::to_string(p) +
                                    " is not 0, 1 or 2 (index " + std::to_string(index) + ")",
                                path, index);
    }
  }

 private:
  // Opens and checks every file (nc_lock() held): offsets, grids, the common shape.
  void open_all() {
    for (size_t i = 0; i < m_paths.size(); ++i) {
      FileLayout f = open_layout(m_paths[i], m_netcdf);
      if (i == 0) {
        m_h = static_cast<int64_t>(f.h);
        m_w = static_cast<int64_t>(f.w);
      } else if (static_cast<int64_t>(f.h) != m_h || static_cast<int64_t>(f.w) != m_w) {
        const std::string msg = m_paths[i] + ": variable '" + m_netcdf.variables[0] + "' has lat=" +
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
    if (m_open[i].ncid < 0) remember(i, open_layout(m_paths[i], m_netcdf));
    return m_open[i];
  }

  std::vector<std::string> m_paths;
  NetcdfOptions m_netcdf;
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
    out[static_cast<size_t>(it - deepcam_channel_names().begin())] = var;
  }
  return out;
}

NetcdfFileInfo describe_netcdf(const std::string& path, const NetcdfOptions& options) {
  auto lock = nc_lock();
  FileLayout f = open_layout(path, options);
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
    int ndims = 0, nvars = 0;
    nc_check(nc_inq(f.ncid, &ndims, &nvars, nullptr, nullptr), path, "inquiry");
    for (int d = 0; d < ndims; ++d) {
      char name[NC_MAX_NAME + 1] = {0};
      size_t len = 0;
      nc_check(nc_inq_dim(f.ncid, d, name, &len), path, "dimension " + std::to_string(d));
      info.dims.emplace_back(name, static_cast<int64_t>(len));
    }
    for (int v = 0; v < nvars; ++v) {
      char name[NC_MAX_NAME + 1] = {0};
      nc_type type;
      int nd = 0;
      nc_check(nc_inq_var(f.ncid, v, name, &type, &nd, nullptr, nullptr), path, "variable " + std::to_string(v));
      std::vector<int> dimids(static_cast<size_t>(nd));
      if (nd) nc_check(nc_inq_vardimid(f.ncid, v, dimids.data()), path, std::string("variable '") + name + "'");
      NetcdfVariableInfo vi;
      vi.name = name;
      vi.type = nc_type_text(f.ncid, type);
      for (int id : dimids) {
        char dn[NC_MAX_NAME + 1] = {0};
        size_t len = 0;
        nc_inq_dim(f.ncid, id, dn, &len);
        vi.dims.emplace_back(dn);
        vi.shape.push_back(static_cast<int64_t>(len));
      }
      info.variables.push_back(vi);
    }
  } catch (...) {
    nc_close(f.ncid);
    throw;
  }
  info.steps = f.steps;
  info.height = static_cast<int64_t>(f.h);
  info.width = static_cast<int64_t>(f.w);
  info.has_labels = f.labels.varid >= 0;
  info.grid = f.grid;
  nc_close(f.ncid);
  return info;
}

NetcdfSample read_netcdf_sample(const std::string& path, int64_t step, const NetcdfOptions& options) {
  auto lock = nc_lock();
  FileLayout f = open_layout(path, options);
  NetcdfSample s;
  try {
    if (step < 0 || step >= f.steps)
      throw Error(path + ": time step " + std::to_string(step) + " outside [0, " + std::to_string(f.steps) + ")");
    s.h = static_cast<int64_t>(f.h);
    s.w = static_cast<int64_t>(f.w);
    s.c = static_cast<int64_t>(f.vars.size());
    s.chw.resize(static_cast<size_t>(s.c * s.h * s.w));
    if (f.labels.varid >= 0) s.labels.resize(f.h * f.w);
    read_step(f, path, step, options, s.chw.data(), s.labels.empty() ? nullptr : s.labels.data());
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
  const std::vector<std::string> files = list_netcdf_files(path);
  if (files.empty()) throw Error(path + ": no netCDF files (*.nc)");
  return open_netcdf_files(files, find_deepcam_stats(path), options, netcdf);
}

}  // namespace squall::formats
