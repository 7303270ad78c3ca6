// netCDF input whose coordinates are found as CF says, whatever their names
// (io/formats/netcdf_util.hpp, cf_dimension): ERA5's latitude/longitude/valid_time with
// latitude stored north to south, dimensions known only by an attribute, the name fallback,
// the refusals and what they say; and masks written back on the input's own grid
// (io/formats/netcdf_mask.hpp). Files are written with the netCDF C library.
#include <netcdf.h>

#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io/formats/dataset.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/netcdf_mask.hpp"
#include "src/core/error.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

namespace formats = squall::formats;
using Attributes = std::vector<std::pair<std::string, std::string>>;
const formats::OpenOptions k_unnormalised{false, squall::data::NormalizationKind::zscore};

void nc_ok(int status) {
  INFO(nc_strerror(status));
  REQUIRE(status == NC_NOERR);
}

// One file's grid: names, attributes and orders that differ between the conventions.
struct CfSpec {
  std::string lat = "lat", lon = "lon", time = "time";  // dimension names (and their coordinate variables')
  Attributes lat_atts, lon_atts, time_atts;             // text attributes of the coordinate variables
  bool descending = false;      // latitude stored north to south
  bool time_unlimited = true;
  bool time_coordinate = true;  // a coordinate variable for the time dimension
  bool coordinates = true;      // coordinate variables for latitude and longitude
  bool lon_first = false;       // the fields on (time, lon, lat)
  bool string_attributes = false;  // attributes as netCDF-4 strings (h5netcdf's way), not chars
};

constexpr int64_t k_steps = 3, k_h = 6, k_w = 8;

// The value of channel c at step t, row y (south to north) and column x, in every file.
float cf_value(int c, int64_t t, int64_t y, int64_t x) {
  return static_cast<float>(c * 1000 + t * 100) + static_cast<float>(y) * 0.5f + static_cast<float>(x) * 0.25f;
}
int cf_label(int64_t t, int64_t y, int64_t x) { return static_cast<int>((t * 7 + y * 3 + x) % 3); }
double cf_latitude(int64_t y) { return -90.0 + (static_cast<double>(y) + 0.5) * 180.0 / static_cast<double>(k_h); }

void put_atts(int ncid, int varid, const Attributes& atts, bool strings) {
  for (const auto& [name, value] : atts) {
    const char* text = value.c_str();
    nc_ok(strings ? nc_put_att_string(ncid, varid, name.c_str(), 1, &text)
                  : nc_put_att_text(ncid, varid, name.c_str(), value.size(), text));
  }
}

// The 16 DeepCAM fields and labels on the grid `s` describes.
void write_cf(const std::string& path, const CfSpec& s) {
  int ncid = -1;
  nc_ok(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &ncid));
  int dt = -1, dy = -1, dx = -1, vt = -1, vy = -1, vx = -1;
  nc_ok(nc_def_dim(ncid, s.time.c_str(), s.time_unlimited ? NC_UNLIMITED : static_cast<size_t>(k_steps), &dt));
  nc_ok(nc_def_dim(ncid, s.lat.c_str(), static_cast<size_t>(k_h), &dy));
  nc_ok(nc_def_dim(ncid, s.lon.c_str(), static_cast<size_t>(k_w), &dx));
  if (s.time_coordinate) {
    nc_ok(nc_def_var(ncid, s.time.c_str(), NC_DOUBLE, 1, &dt, &vt));
    put_atts(ncid, vt, s.time_atts, s.string_attributes);
  }
  if (s.coordinates) {
    nc_ok(nc_def_var(ncid, s.lat.c_str(), NC_FLOAT, 1, &dy, &vy));  // ERA5 stores float coordinates
    put_atts(ncid, vy, s.lat_atts, s.string_attributes);
    nc_ok(nc_def_var(ncid, s.lon.c_str(), NC_DOUBLE, 1, &dx, &vx));
    put_atts(ncid, vx, s.lon_atts, s.string_attributes);
  }
  const int dims[3] = {dt, s.lon_first ? dx : dy, s.lon_first ? dy : dx};
  std::vector<int> vars;
  for (const std::string& name : formats::deepcam_channel_names()) {
    vars.push_back(-1);
    nc_ok(nc_def_var(ncid, name.c_str(), NC_FLOAT, 3, dims, &vars.back()));
  }
  int vl = -1;
  nc_ok(nc_def_var(ncid, "labels", NC_INT, 3, dims, &vl));
  nc_ok(nc_enddef(ncid));

  const auto row = [&](int64_t stored) { return s.descending ? k_h - 1 - stored : stored; };
  if (s.coordinates) {
    std::vector<float> lat(k_h);
    std::vector<double> lon(k_w);
    for (int64_t r = 0; r < k_h; ++r) lat[static_cast<size_t>(r)] = static_cast<float>(cf_latitude(row(r)));
    for (int64_t x = 0; x < k_w; ++x) lon[static_cast<size_t>(x)] = 45.0 * static_cast<double>(x);
    nc_ok(nc_put_var_float(ncid, vy, lat.data()));
    nc_ok(nc_put_var_double(ncid, vx, lon.data()));
  }
  if (s.time_coordinate) {
    const double time[k_steps] = {7300.0, 7300.25, 7300.5};
    const size_t start = 0, count = k_steps;
    nc_ok(nc_put_vara_double(ncid, vt, &start, &count, time));
  }
  // Stored index (t, r, x), or (t, x, r) with lon_first; r counts rows as the file stores them.
  const auto at = [&](int64_t t, int64_t r, int64_t x) {
    return static_cast<size_t>(s.lon_first ? (t * k_w + x) * k_h + r : (t * k_h + r) * k_w + x);
  };
  const size_t start[3] = {0, 0, 0};
  const size_t rows = static_cast<size_t>(s.lon_first ? k_w : k_h), cols = static_cast<size_t>(s.lon_first ? k_h : k_w);
  const size_t count[3] = {k_steps, rows, cols};
  std::vector<float> v(static_cast<size_t>(k_steps * k_h * k_w));
  for (size_t c = 0; c < vars.size(); ++c) {
    for (int64_t t = 0; t < k_steps; ++t)
      for (int64_t r = 0; r < k_h; ++r)
        for (int64_t x = 0; x < k_w; ++x) v[at(t, r, x)] = cf_value(static_cast<int>(c), t, row(r), x);
    nc_ok(nc_put_vara_float(ncid, vars[c], start, count, v.data()));
  }
  std::vector<int> l(v.size());
  for (int64_t t = 0; t < k_steps; ++t)
    for (int64_t r = 0; r < k_h; ++r)
      for (int64_t x = 0; x < k_w; ++x) l[at(t, r, x)] = cf_label(t, row(r), x);
  nc_ok(nc_put_vara_int(ncid, vl, start, count, l.data()));
  nc_ok(nc_close(ncid));
}

std::string cf_open_error(const std::string& path) {
  try {
    formats::open_netcdf_files({path}, "", k_unnormalised);
  } catch (const squall::Error& e) {
    return e.what();
  }
  return "(opened without error)";
}

const Attributes k_era5_lat = {{"units", "degrees_north"}, {"standard_name", "latitude"}, {"long_name", "latitude"}};
const Attributes k_era5_lon = {{"units", "degrees_east"}, {"standard_name", "longitude"}, {"long_name", "longitude"}};
const Attributes k_era5_time = {{"standard_name", "time"}, {"axis", "T"}, {"units", "seconds since 1970-01-01"},
                                {"calendar", "proleptic_gregorian"}};

CfSpec era5() {
  CfSpec s;
  s.lat = "latitude";
  s.lon = "longitude";
  s.time = "valid_time";
  s.lat_atts = k_era5_lat;
  s.lon_atts = k_era5_lon;
  s.time_atts = k_era5_time;
  s.descending = true;
  s.time_unlimited = false;
  return s;
}

}  // namespace

TEST_CASE("netCDF input finds latitude, longitude and time as CF says, whatever their names, rows south first",
          "[io][netcdf]") {
  squall::test::TempDir d("squall-netcdf-cf");
  // The reference: lat, lon and an unlimited time, without attributes (CAM5-era files).
  write_cf(d.file("plain.nc"), CfSpec{});
  auto ref = formats::open_netcdf_files({d.file("plain.nc")}, "", k_unnormalised);
  REQUIRE(ref->size() == k_steps);

  struct Case {
    const char* what;
    CfSpec spec;
    std::string lat, lon, time;  // the dimension names the grid reports
    bool descending, has_time;
  };
  std::vector<Case> cases;
  cases.push_back({"ERA5: latitude descending, longitude, valid_time by standard_name", era5(), "latitude",
                   "longitude", "valid_time", true, true});
  CfSpec strings = era5();
  strings.string_attributes = true;
  cases.push_back({"ERA5 with string-typed attributes", strings, "latitude", "longitude", "valid_time", true, true});
  CfSpec by_axis;  // names that say nothing: axis alone
  by_axis.lat = "y";
  by_axis.lon = "x";
  by_axis.time = "t";
  by_axis.lat_atts = {{"axis", "Y"}};
  by_axis.lon_atts = {{"axis", "X"}};
  by_axis.time_atts = {{"axis", "T"}};
  by_axis.time_unlimited = false;
  cases.push_back({"axis Y, X, T", by_axis, "y", "x", "t", false, true});
  CfSpec by_units;  // units alone, in CF's less common spellings
  by_units.lat = "j";
  by_units.lon = "i";
  by_units.time = "step";
  by_units.lat_atts = {{"units", "degrees_N"}};
  by_units.lon_atts = {{"units", "degreesE"}};
  by_units.time_atts = {{"units", "hours since 2000-01-01 00:00:00"}};
  by_units.time_unlimited = false;
  by_units.descending = true;
  cases.push_back({"units degrees_N, degreesE, hours since", by_units, "j", "i", "step", true, true});
  CfSpec by_name;  // no attributes: the long names, and time as the record dimension
  by_name.lat = "latitude";
  by_name.lon = "longitude";
  by_name.time = "record";
  by_name.time_coordinate = false;
  cases.push_back({"names latitude/longitude, unlimited 'record' without coordinate", by_name, "latitude",
                   "longitude", "record", false, false});

  const int64_t plane = k_h * k_w;
  std::vector<float> want(static_cast<size_t>(16 * plane)), got(want.size());
  std::vector<int32_t> want_labels(static_cast<size_t>(plane)), got_labels(want_labels.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    INFO(c.what);
    const std::string path = d.file("case-" + std::to_string(k) + ".nc");
    write_cf(path, c.spec);
    auto src = formats::open_netcdf_files({path}, "", k_unnormalised);
    REQUIRE(src->size() == k_steps);
    REQUIRE(src->info().sample == ref->info().sample);
    CHECK(src->has_labels());
    for (int64_t t = 0; t < k_steps; ++t) {
      ref->read(std::span<const int64_t>(&t, 1), want.data(), want_labels.data());
      src->read(std::span<const int64_t>(&t, 1), got.data(), got_labels.data());
      REQUIRE(got == want);  // the same sample, row 0 southernmost, whatever the file's order
      REQUIRE(got_labels == want_labels);
      const formats::NetcdfGrid g = src->sample_grid(t);
      CHECK(g.lat == ref->sample_grid(t).lat);  // ascending, as the rows
      CHECK(g.lon == ref->sample_grid(t).lon);
      CHECK(g.lat_dim == c.lat);
      CHECK(g.lon_dim == c.lon);
      CHECK(g.time_dim == c.time);
      CHECK(g.lat_descending == c.descending);
      CHECK(g.time == (c.has_time ? ref->sample_grid(t).time : std::vector<double>{}));
    }
    const formats::NetcdfSample s = formats::read_netcdf_sample(path, 2);
    CHECK(s.chw[static_cast<size_t>((5 * k_h + 0) * k_w + 3)] == cf_value(5, 2, 0, 3));
    CHECK(s.grid.lat.front() == Approx(cf_latitude(0)));
    const formats::NetcdfFileInfo info = formats::describe_netcdf(path);
    CHECK(info.steps == k_steps);
    CHECK(info.height == k_h);
    CHECK(info.width == k_w);
  }
  CHECK(formats::describe_netcdf(d.file("case-0.nc")).grid.time_units == "seconds since 1970-01-01");
  CHECK(formats::describe_netcdf(d.file("case-0.nc")).grid.calendar == "proleptic_gregorian");
  CHECK(formats::describe_netcdf(d.file("case-1.nc")).grid.calendar == "proleptic_gregorian");  // a string
  CHECK(ref->sample_grid(0).lat_dim == "lat");
  CHECK_FALSE(ref->sample_grid(0).lat_descending);
}

TEST_CASE("netCDF input refuses (lon, lat) order and unrecognised dimensions, saying what it recognised",
          "[io][netcdf]") {
  squall::test::TempDir d("squall-netcdf-cf-errors");
  CfSpec swapped = era5();
  swapped.lon_first = true;
  const std::string path = d.file("swapped.nc");
  write_cf(path, swapped);
  const std::string e = cf_open_error(path);
  CHECK_THAT(e, Catch::Contains(path) && Catch::Contains("variable 'TMQ' (channel TMQ)") &&
                    Catch::Contains("has dimensions (valid_time=3, longitude=8, latitude=6)") &&
                    Catch::Contains("valid_time as time (standard_name time)") &&
                    Catch::Contains("longitude as longitude (standard_name longitude)") &&
                    Catch::Contains("latitude as latitude (standard_name latitude)") &&
                    Catch::Contains("expected (time, latitude, longitude), (time, level, latitude, longitude), "
                                    "(level, latitude, longitude) or (latitude, longitude)") &&
                    Catch::Contains("ncpdq -a valid_time,latitude,longitude"));
  // Every channel has the same problem: said once, naming them all.
  CHECK_THAT(e, Catch::Contains("16 of the 16 channels cannot be read") &&
                    Catch::Contains("variable 'ZBOT' (channel ZBOT) each has dimensions"));
  CHECK(e.find("has dimensions", e.find("has dimensions") + 1) == std::string::npos);
  CHECK_THROWS_WITH(formats::describe_netcdf(path), Catch::Contains("longitude comes before latitude"));

  CfSpec lat_lon_swapped;  // the same with CAM5's names and no attributes
  lat_lon_swapped.lon_first = true;
  write_cf(d.file("swapped-names.nc"), lat_lon_swapped);
  CHECK_THAT(cf_open_error(d.file("swapped-names.nc")),
             Catch::Contains("(time=3, lon=8, lat=6)") && Catch::Contains("time as time (the unlimited dimension)") &&
                 Catch::Contains("lon as longitude (by name)") && Catch::Contains("ncpdq -a time,lat,lon"));

  CfSpec unnamed;  // y and x say nothing, and have no coordinate variables
  unnamed.lat = "y";
  unnamed.lon = "x";
  unnamed.coordinates = false;
  write_cf(d.file("unnamed.nc"), unnamed);
  CHECK_THAT(cf_open_error(d.file("unnamed.nc")),
             Catch::Contains("y as unrecognised (no coordinate variable)") &&
                 Catch::Contains("expected (time, latitude, longitude)"));

  CfSpec member;  // a leading dimension that is neither time nor a level
  member.time = "member";
  member.time_atts = {{"units", "1"}};
  member.time_unlimited = false;
  write_cf(d.file("member.nc"), member);
  CHECK_THAT(cf_open_error(d.file("member.nc")),
             Catch::Contains("member as unrecognised (no latitude, longitude, time or vertical attribute)"));

  CfSpec level;  // a leading level dimension: one level must be chosen (test_netcdf_channels.cpp)
  level.time = "level";
  level.time_atts = {{"units", "hPa"}, {"axis", "Z"}};
  level.time_unlimited = false;
  write_cf(d.file("level.nc"), level);
  CHECK_THAT(cf_open_error(d.file("level.nc")),
             Catch::Contains("variable 'TMQ' (channel TMQ) has 3 levels on 'level' (7300, 7300.25, 7300.5 hPa)") &&
                 Catch::Contains("TMQ@LEVEL"));

  CfSpec conflicting = era5();  // units say latitude, axis says X
  conflicting.lat_atts = {{"units", "degrees_north"}, {"axis", "X"}};
  write_cf(d.file("conflicting.nc"), conflicting);
  CHECK_THAT(cf_open_error(d.file("conflicting.nc")),
             Catch::Contains("latitude as unrecognised (conflicting attributes: axis X, units degrees_north)"));

  CfSpec no_coordinates;  // found by name, but without latitudes to put on a mask
  no_coordinates.coordinates = false;
  write_cf(d.file("no-coordinates.nc"), no_coordinates);
  CHECK_THAT(cf_open_error(d.file("no-coordinates.nc")),
             Catch::Contains(d.file("no-coordinates.nc")) && Catch::Contains("no coordinate variable 'lat'"));
}

TEST_CASE("netCDF masks on the input's grid: its dimension names, latitude north first when it was",
          "[io][netcdf]") {
  squall::test::TempDir d("squall-netcdf-cf-mask");
  const size_t nt = 2, ny = 3, nx = 4, nk = 3;
  formats::MaskGrid grid;
  grid.lat = {-60.0, 0.0, 60.0};  // the masks' rows, south first
  grid.lon = {0.0, 90.0, 180.0, 270.0};
  grid.time = {0.0, 3600.0};
  grid.time_units = "seconds since 1970-01-01";
  grid.lat_dim = "latitude";
  grid.lon_dim = "longitude";
  grid.time_dim = "valid_time";
  grid.lat_descending = true;
  std::vector<uint8_t> masks(nt * ny * nx);
  std::vector<float> probs(nt * nk * ny * nx);
  for (size_t i = 0; i < masks.size(); ++i) masks[i] = static_cast<uint8_t>((i * 5 + i / 4) % 3);
  for (size_t i = 0; i < probs.size(); ++i) probs[i] = static_cast<float>(i) / 100.0f;
  const std::string path = d.file("masks.nc");
  formats::write_netcdf_masks(path, grid, masks, probs, {"background", "tropical cyclone", "atmospheric river"});

  int ncid = -1, vm = -1, vp = -1, vy = -1;
  nc_ok(nc_open(path.c_str(), NC_NOWRITE, &ncid));
  const auto dim_names = [&](int varid) {
    int n = 0, ids[4] = {};
    nc_ok(nc_inq_varndims(ncid, varid, &n));
    nc_ok(nc_inq_vardimid(ncid, varid, ids));
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) {
      char name[NC_MAX_NAME + 1] = {0};
      nc_ok(nc_inq_dimname(ncid, ids[i], name));
      names.emplace_back(name);
    }
    return names;
  };
  nc_ok(nc_inq_varid(ncid, "mask", &vm));
  nc_ok(nc_inq_varid(ncid, "probability", &vp));
  nc_ok(nc_inq_varid(ncid, "latitude", &vy));
  CHECK(dim_names(vm) == std::vector<std::string>{"valid_time", "latitude", "longitude"});
  CHECK(dim_names(vp) == std::vector<std::string>{"valid_time", "class", "latitude", "longitude"});
  CHECK(dim_names(vy) == std::vector<std::string>{"latitude"});
  std::vector<double> lat(ny);
  nc_ok(nc_get_var_double(ncid, vy, lat.data()));
  CHECK(lat == std::vector<double>{60.0, 0.0, -60.0});
  char coordinates[64] = {0};
  nc_ok(nc_get_att_text(ncid, vm, "coordinates", coordinates));
  CHECK(std::string(coordinates) == "valid_time latitude longitude");
  std::vector<signed char> m(masks.size());
  std::vector<float> p(probs.size());
  nc_ok(nc_get_var_schar(ncid, vm, m.data()));
  nc_ok(nc_get_var_float(ncid, vp, p.data()));
  // The class dimension's coordinate: the names, as UTF-8 text, one per row of class_strlen.
  int vk = -1;
  nc_ok(nc_inq_varid(ncid, "class", &vk));
  CHECK(dim_names(vk) == std::vector<std::string>{"class", "class_strlen"});
  size_t strlen_dim = 0;
  int dn = -1;
  nc_ok(nc_inq_dimid(ncid, "class_strlen", &dn));
  nc_ok(nc_inq_dimlen(ncid, dn, &strlen_dim));
  REQUIRE(strlen_dim == std::string("atmospheric river").size());  // the longest name
  std::vector<char> names(nk * strlen_dim);
  nc_ok(nc_get_var_text(ncid, vk, names.data()));
  std::vector<std::string> classes;
  for (size_t k = 0; k < nk; ++k) {
    const char* row = names.data() + k * strlen_dim;
    classes.emplace_back(row, strnlen(row, strlen_dim));
  }
  CHECK(classes == std::vector<std::string>{"background", "tropical cyclone", "atmospheric river"});
  char encoding[16] = {0};
  nc_ok(nc_get_att_text(ncid, vk, "_Encoding", encoding));
  CHECK(std::string(encoding) == "utf-8");
  nc_ok(nc_close(ncid));
  for (size_t t = 0; t < nt; ++t)
    for (size_t y = 0; y < ny; ++y)
      for (size_t x = 0; x < nx; ++x) {
        REQUIRE(m[(t * ny + (ny - 1 - y)) * nx + x] == static_cast<signed char>(masks[(t * ny + y) * nx + x]));
        for (size_t k = 0; k < nk; ++k)
          REQUIRE(p[((t * nk + k) * ny + (ny - 1 - y)) * nx + x] == probs[((t * nk + k) * ny + y) * nx + x]);
      }

  grid.lon_dim = "latitude";
  CHECK_THROWS_WITH(formats::write_netcdf_masks(d.file("bad.nc"), grid, masks, {}, {"a", "b", "c"}),
                    Catch::Contains(d.file("bad.nc")) && Catch::Contains("not three distinct names"));
}
