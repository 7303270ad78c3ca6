// netCDF input as ERA5 and CMIP files come (io/formats/netcdf_file.hpp): a channel list of the
// model's own (data.channels), pressure levels picked from 4-D variables ("u@850",
// "ua@850hPa"), every missing variable named in one error, units converted with UDUNITS-2 or
// refused, and what `squall data inspect` says of such files. The files are written here with
// the netCDF C library; one is written by Python's xarray (python3-xarray, skipped visibly
// without it).
#include <netcdf.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io/formats/dataset.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/netcdf_mask.hpp"
#include "io/input/open_dataset.hpp"
#include "src/config/config.hpp"
#include "src/config/setup.hpp"
#include "src/core/error.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

namespace formats = squall::formats;
using Catch::Contains;
const formats::OpenOptions k_raw{false, squall::data::NormalizationKind::zscore};

void ok(int status) {
  INFO(nc_strerror(status));
  REQUIRE(status == NC_NOERR);
}

using Attributes = std::vector<std::pair<std::string, std::string>>;

// A dimension with its coordinate variable (double, text attributes).
struct Coord {
  std::string name;
  std::vector<double> values;
  Attributes atts;
  bool unlimited = false;
};

// A data variable: its value at each index (one per dimension, in `dims` order).
struct Field {
  std::string name;
  std::vector<std::string> dims;
  std::string units;  // "": no units attribute
  std::function<double(const std::vector<size_t>&)> value;
  nc_type type = NC_FLOAT;
};

void write_file(const std::string& path, const std::vector<Coord>& coords, const std::vector<Field>& fields,
                const Attributes& global = {}) {
  int ncid = -1;
  ok(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &ncid));
  std::vector<int> dimids, coordids;
  for (const Coord& c : coords) {
    int d = -1, v = -1;
    ok(nc_def_dim(ncid, c.name.c_str(), c.unlimited ? NC_UNLIMITED : c.values.size(), &d));
    ok(nc_def_var(ncid, c.name.c_str(), NC_DOUBLE, 1, &d, &v));
    for (const auto& [k, text] : c.atts) ok(nc_put_att_text(ncid, v, k.c_str(), text.size(), text.c_str()));
    dimids.push_back(d);
    coordids.push_back(v);
  }
  const auto coord_index = [&](const std::string& name) {
    for (size_t i = 0; i < coords.size(); ++i)
      if (coords[i].name == name) return i;
    FAIL("no dimension " << name);
    return size_t{0};
  };
  std::vector<int> varids;
  for (const Field& f : fields) {
    std::vector<int> ids;
    for (const std::string& d : f.dims) ids.push_back(dimids[coord_index(d)]);
    int v = -1;
    ok(nc_def_var(ncid, f.name.c_str(), f.type, static_cast<int>(ids.size()), ids.data(), &v));
    if (!f.units.empty()) ok(nc_put_att_text(ncid, v, "units", f.units.size(), f.units.c_str()));
    varids.push_back(v);
  }
  for (const auto& [k, text] : global) ok(nc_put_att_text(ncid, NC_GLOBAL, k.c_str(), text.size(), text.c_str()));
  ok(nc_enddef(ncid));
  for (size_t i = 0; i < coords.size(); ++i) {
    const size_t start = 0, count = coords[i].values.size();
    ok(nc_put_vara_double(ncid, coordids[i], &start, &count, coords[i].values.data()));
  }
  for (size_t k = 0; k < fields.size(); ++k) {
    const Field& f = fields[k];
    std::vector<size_t> shape, start(f.dims.size(), 0), idx(f.dims.size(), 0);
    size_t total = 1;
    for (const std::string& d : f.dims) {
      shape.push_back(coords[coord_index(d)].values.size());
      total *= shape.back();
    }
    std::vector<double> values(total);
    for (size_t i = 0; i < total; ++i) {
      size_t rest = i;
      for (size_t j = f.dims.size(); j-- > 0;) {
        idx[j] = rest % shape[j];
        rest /= shape[j];
      }
      values[i] = f.value(idx);
    }
    ok(nc_put_vara_double(ncid, varids[k], start.data(), shape.data(), values.data()));
  }
  ok(nc_close(ncid));
}

// An ERA5-style file as the CDS writes it: valid_time, pressure_level (hPa, found by its units),
// latitude north to south, longitude; msl in `msl_units`.
constexpr size_t k_steps = 2, k_h = 4, k_w = 5;
const std::vector<double> k_era5_levels = {1000, 850, 500};

double msl_pa(size_t t, size_t y, size_t x) { return 100000.0 + 100.0 * t + 37.5 * y + 3.25 * x; }
double u_value(size_t t, size_t l, size_t y, size_t x) { return 10.0 * l + t + 0.5 * y + 0.25 * x; }
double t_value(size_t t, size_t l, size_t y, size_t x) { return 200.0 + 20.0 * l + t + y + 0.5 * x; }
double tcwv_value(size_t t, size_t y, size_t x) { return 20.0 + t + y + x; }
double sst_value(size_t y, size_t x) { return 280.0 + y + 0.5 * x; }

void write_era5(const std::string& path, const std::string& msl_units = "Pa", bool labels = false) {
  std::vector<Coord> coords = {
      {"valid_time", {0.0, 21600.0}, {{"units", "seconds since 1970-01-01"}, {"standard_name", "time"},
                                      {"calendar", "proleptic_gregorian"}}},
      {"pressure_level", k_era5_levels, {{"units", "hPa"}, {"long_name", "pressure"}}},
      {"latitude", {60.0, 20.0, -20.0, -60.0}, {{"units", "degrees_north"}}},
      {"longitude", {0.0, 72.0, 144.0, 216.0, 288.0}, {{"units", "degrees_east"}}},
  };
  const double msl_scale = msl_units == "hPa" ? 0.01 : 1.0;
  std::vector<Field> fields = {
      {"msl", {"valid_time", "latitude", "longitude"}, msl_units,
       [=](const std::vector<size_t>& i) { return msl_pa(i[0], i[1], i[2]) * msl_scale; }},
      {"u", {"valid_time", "pressure_level", "latitude", "longitude"}, "m s**-1",
       [](const std::vector<size_t>& i) { return u_value(i[0], i[1], i[2], i[3]); }},
      {"t", {"valid_time", "pressure_level", "latitude", "longitude"}, "K",
       [](const std::vector<size_t>& i) { return t_value(i[0], i[1], i[2], i[3]); }},
      {"tcwv", {"valid_time", "latitude", "longitude"}, "kg m**-2",
       [](const std::vector<size_t>& i) { return tcwv_value(i[0], i[1], i[2]); }},
      {"sst", {"valid_time", "latitude", "longitude"}, "",
       [](const std::vector<size_t>& i) { return sst_value(i[1], i[2]); }},
  };
  if (labels)
    fields.push_back({"labels", {"valid_time", "latitude", "longitude"}, "",
                      [](const std::vector<size_t>& i) { return static_cast<double>((i[0] + i[1] + i[2]) % 3); },
                      NC_INT});
  write_file(path, coords, fields);
}

// A CMIP-style file: time, plev in Pa (CF attributes), lat south to north, lon; ua and psl.
const std::vector<double> k_cmip_levels = {100000, 85000, 50000};
double ua_value(size_t t, size_t l, size_t y, size_t x) { return -5.0 + 3.0 * l + 0.5 * t + y + 0.125 * x; }

void write_cmip(const std::string& path, std::vector<double> levels = k_cmip_levels, bool timed = true) {
  std::vector<Coord> coords;
  if (timed) coords.push_back({"time", {0.0, 0.25}, {{"units", "days since 1850-01-01"}, {"calendar", "noleap"},
                                                    {"axis", "T"}}, true});
  coords.push_back({"plev", levels, {{"units", "Pa"}, {"axis", "Z"}, {"positive", "down"},
                                     {"standard_name", "air_pressure"}}});
  coords.push_back({"lat", {-45.0, 0.0, 45.0}, {{"units", "degrees_north"}, {"axis", "Y"}}});
  coords.push_back({"lon", {0.0, 90.0, 180.0, 270.0}, {{"units", "degrees_east"}, {"axis", "X"}}});
  std::vector<Field> fields;
  if (timed) {
    fields.push_back({"ua", {"time", "plev", "lat", "lon"}, "m s-1",
                      [](const std::vector<size_t>& i) { return ua_value(i[0], i[1], i[2], i[3]); }});
    fields.push_back({"psl", {"time", "lat", "lon"}, "Pa",
                      [](const std::vector<size_t>& i) { return msl_pa(i[0], i[1], i[2]); }});
  } else {
    fields.push_back({"ua", {"plev", "lat", "lon"}, "m s-1",
                      [](const std::vector<size_t>& i) { return ua_value(0, i[0], i[1], i[2]); }});
  }
  write_file(path, coords, fields);
}

std::string open_error(const std::string& path, const formats::NetcdfOptions& options) {
  try {
    formats::open_netcdf_files({path}, "", k_raw, options);
  } catch (const squall::Error& e) {
    return e.what();
  }
  return "(opened without error)";
}

formats::NetcdfOptions with_channels(std::vector<std::string> channels) {
  formats::NetcdfOptions o;
  o.channels = std::move(channels);
  return o;
}

// Sample `index` of `source`, [c, h, w].
std::vector<float> sample(const formats::NetcdfSource& source, int64_t index) {
  std::vector<float> image(static_cast<size_t>(source.info().sample.per_sample()));
  std::vector<int32_t> labels(static_cast<size_t>(source.info().sample.h() * source.info().sample.w()));
  source.read(std::span<const int64_t>(&index, 1), image.data(), labels.data());
  return image;
}

float at(const std::vector<float>& chw, size_t c, size_t y, size_t x, size_t h = k_h, size_t w = k_w) {
  return chw[(c * h + y) * w + x];
}

bool python_imports(const std::string& modules) {
  return squall::test::run_command("/usr/bin/python3 -c 'import " + modules + "'").exit_code == 0;
}

}  // namespace

TEST_CASE("netCDF channels: a list of the model's own reads a subset in its order, levels picked", "[io][netcdf]") {
  squall::test::TempDir d("squall-nc-channels");
  const std::string path = d.file("era5.nc");
  write_era5(path);
  auto source = formats::open_netcdf_files({path}, "", k_raw,
                                           with_channels({"TMQ=tcwv", "U850=u@850", "PSL=msl", "t@500", "sst"}));
  REQUIRE(source->size() == 2);
  const squall::data::DatasetInfo& info = source->info();
  CHECK(info.sample == squall::nn::Shape(1, 5, 4, 5));
  CHECK(info.channel_names == std::vector<std::string>{"TMQ", "U850", "PSL", "t@500", "sst"});
  // DeepCAM's channels in their own units; the others in the file's ("" for none).
  CHECK(info.channel_units == std::vector<std::string>{"kg m-2", "m s-1", "Pa", "K", ""});
  // Rows run south to north: ERA5's latitudes descend, so row r is the file's row h-1-r.
  CHECK(info.lat == std::vector<double>{-60.0, -20.0, 20.0, 60.0});
  for (int64_t t = 0; t < 2; ++t) {
    const std::vector<float> s = sample(*source, t);
    const auto tt = static_cast<size_t>(t);
    for (size_t y = 0; y < k_h; ++y)
      for (size_t x = 0; x < k_w; ++x) {
        const size_t fy = k_h - 1 - y;
        INFO("t " << t << " y " << y << " x " << x);
        REQUIRE(at(s, 0, y, x) == static_cast<float>(tcwv_value(tt, fy, x)));
        REQUIRE(at(s, 1, y, x) == static_cast<float>(u_value(tt, 1, fy, x)));  // 850 hPa is level 1
        REQUIRE(at(s, 2, y, x) == static_cast<float>(msl_pa(tt, fy, x)));
        REQUIRE(at(s, 3, y, x) == static_cast<float>(t_value(tt, 2, fy, x)));  // 500 hPa is level 2
        REQUIRE(at(s, 4, y, x) == static_cast<float>(sst_value(fy, x)));
      }
  }
  // read_netcdf_sample (squall data label's way in) takes the same list.
  const formats::NetcdfSample one = formats::read_netcdf_sample(path, 1, with_channels({"u@1000", "msl"}));
  REQUIRE(one.c == 2);
  CHECK(one.chw[0] == static_cast<float>(u_value(1, 0, k_h - 1, 0)));
  CHECK(one.chw[k_h * k_w + 3] == static_cast<float>(msl_pa(1, k_h - 1, 3)));

  // DeepCAM's channels with data.netcdf_variables' selectors work too.
  formats::NetcdfOptions mapped = formats::netcdf_options({}, "U850=u@850");
  CHECK(mapped.variables[1] == "u@850");
  CHECK(formats::netcdf_channels(mapped)[1].spec() == "u@850");
  CHECK(formats::netcdf_channels(mapped)[1].name == "U850");
}

TEST_CASE("netCDF channels: entries parse, and bad ones are config errors naming data.channels", "[io][netcdf]") {
  const formats::NetcdfChannel a = formats::parse_netcdf_channel("U850 = ua@850hPa");
  CHECK(a.name == "U850");
  CHECK(a.variable == "ua");
  CHECK(a.has_level);
  CHECK(a.level == 850.0);
  CHECK(a.level_units == "hPa");
  const formats::NetcdfChannel b = formats::parse_netcdf_channel("t@500");
  CHECK(b.name == "t@500");
  CHECK(b.level_units.empty());
  CHECK(formats::parse_netcdf_channel("msl").name == "msl");
  CHECK_FALSE(formats::parse_netcdf_channel("msl").has_level);
  CHECK_THROWS_WITH(formats::parse_netcdf_channel("u@high"), Contains("must be a number"));
  CHECK_THROWS_WITH(formats::parse_netcdf_channel("u@850 bogons"), Contains("not a unit"));
  CHECK_THROWS_WITH(formats::parse_netcdf_channel("=u"), Contains("no channel name"));
  CHECK_THROWS_WITH(formats::netcdf_channels(with_channels({"u@850", "u@850"})), Contains("listed twice"));

  // The config key: a TOML array, or --set with a TOML array or a comma list.
  const auto cfg = squall::config::parse_config("[data]\nchannels = [\"U850=u@850\", \"PSL=msl\"]\n", "test.toml");
  CHECK(cfg.data.channels == std::vector<std::string>{"U850=u@850", "PSL=msl"});
  auto c2 = squall::config::Config{};
  squall::config::apply_override(c2, "data.channels=U850=u@850, msl");
  CHECK(c2.data.channels == std::vector<std::string>{"U850=u@850", "msl"});
  squall::config::apply_override(c2, "data.channels=[\"ua@850hPa\"]");
  CHECK(c2.data.channels == std::vector<std::string>{"ua@850hPa"});
  CHECK(squall::config::to_toml(c2).find("channels = [\"ua@850hPa\"]") != std::string::npos);
  CHECK_THROWS_WITH(squall::config::parse_config("[data]\nchannels = [\"u@x\"]\n", "test.toml"),
                    Contains("data.channels") && Contains("u@x"));
  CHECK_THROWS_WITH(
      squall::config::parse_config("[data]\nchannels = [\"msl\"]\nnetcdf_variables = \"PSL=slp\"\n", "test.toml"),
      Contains("data.channels") && Contains("data.netcdf_variables"));
}

TEST_CASE("netCDF channels: CMIP's plev in Pa takes a level in hPa, and (level, lat, lon) and one level work",
          "[io][netcdf]") {
  squall::test::TempDir d("squall-nc-cmip");
  const std::string path = d.file("cmip.nc");
  write_cmip(path);
  for (const std::string spec : {"ua@850hPa", "ua@85000", "ua@85 kPa"}) {
    INFO(spec);
    auto source = formats::open_netcdf_files({path}, "", k_raw, with_channels({"U850=" + spec, "psl"}));
    const std::vector<float> s = sample(*source, 1);
    for (size_t y = 0; y < 3; ++y)
      for (size_t x = 0; x < 4; ++x) REQUIRE(at(s, 0, y, x, 3, 4) == static_cast<float>(ua_value(1, 1, y, x)));
    CHECK(source->info().channel_units == std::vector<std::string>{"m s-1", "Pa"});
  }
  // A level the file does not have: the error lists the levels it has, with units.
  CHECK_THAT(open_error(path, with_channels({"ua@925hPa"})),
             Contains(path) && Contains("'ua'") && Contains("no level 925 hPa") &&
                 Contains("100000, 85000, 50000 Pa"));
  CHECK_THAT(open_error(path, with_channels({"ua@850"})), Contains("no level 850") && Contains("85000"));
  // Several levels and no selector: say to write VAR@LEVEL, listing them.
  CHECK_THAT(open_error(path, with_channels({"ua"})),
             Contains("3 levels") && Contains("ua@LEVEL") && Contains("100000, 85000, 50000 Pa"));
  // A selector on a variable without levels.
  CHECK_THAT(open_error(path, with_channels({"psl@850"})), Contains("'psl'") && Contains("no level dimension"));

  // (level, lat, lon): one sample.
  write_cmip(d.file("static.nc"), k_cmip_levels, false);
  auto fixed = formats::open_netcdf_files({d.file("static.nc")}, "", k_raw, with_channels({"ua@500hPa"}));
  REQUIRE(fixed->size() == 1);
  CHECK(at(sample(*fixed, 0), 0, 2, 3, 3, 4) == static_cast<float>(ua_value(0, 2, 2, 3)));
  // One level: no selector needed.
  write_cmip(d.file("one.nc"), {85000});
  auto single = formats::open_netcdf_files({d.file("one.nc")}, "", k_raw, with_channels({"ua"}));
  CHECK(at(sample(*single, 1), 0, 1, 2, 3, 4) == static_cast<float>(ua_value(1, 0, 1, 2)));
}

TEST_CASE("netCDF channels: every missing variable is named in one error, with what the file has",
          "[io][netcdf]") {
  squall::test::TempDir d("squall-nc-missing");
  const std::string path = d.file("era5.nc");
  write_era5(path);
  // DeepCAM's 16 channels: ERA5 has none of their names.
  const std::string all = open_error(path, {});
  CHECK_THAT(all, Contains(path) && Contains("16 of the 16 channels cannot be read") &&
                      Contains("no variable 'QREFHT' (channel QREFHT)") && Contains("no variable 'ZBOT' (channel ZBOT)"));
  // Three missing of five, and one with a problem of its own: one message for all four.
  const std::string three =
      open_error(path, with_channels({"TMQ=tcwv", "QREFHT=q2m", "ZBOT=zbot", "T2M=t2m", "U=u"}));
  INFO(three);
  CHECK_THAT(three, Contains(path) && Contains("4 of the 5 channels cannot be read") &&
                        Contains("no variable 'q2m' (channel QREFHT)") && Contains("no variable 'zbot' (channel ZBOT)") &&
                        Contains("no variable 't2m' (channel T2M)") && Contains("'u' (channel U) has 3 levels") &&
                        Contains("u@LEVEL"));
  // ... what the file has, with dimensions and units, and the keys that map channels.
  CHECK_THAT(three, Contains("msl(valid_time, latitude, longitude) Pa") &&
                        Contains("u(valid_time, pressure_level, latitude, longitude) m s**-1") &&
                        Contains("sst(valid_time, latitude, longitude) (no units)") && Contains("data.channels") &&
                        Contains("data.netcdf_variables"));
  CHECK_THROWS_AS(formats::describe_netcdf(path, with_channels({"q2m"})), squall::UsageError);
  // survey_netcdf (inspect's) reports instead of throwing: the time steps are still counted.
  const formats::NetcdfFileInfo info = formats::survey_netcdf(path, with_channels({"TMQ=tcwv", "q2m"}));
  CHECK(info.steps == 2);
  CHECK(info.time_dim == "valid_time");
  REQUIRE(info.channels.size() == 2);
  CHECK(info.channels[0].problem.empty());
  CHECK(info.channels[0].units == "kg m**-2");
  CHECK(info.channels[1].problem == "no variable 'q2m'");
  CHECK_THAT(info.channel_error, Contains("no variable 'q2m' (channel q2m)"));
}

TEST_CASE("netCDF channels: msl in hPa reads as the same file in Pa, and K for Pa is refused", "[io][netcdf][units]") {
  squall::test::TempDir d("squall-nc-units");
  write_era5(d.file("pa.nc"), "Pa");
  write_era5(d.file("hpa.nc"), "hPa");
  write_era5(d.file("kelvin.nc"), "K");
  const formats::NetcdfOptions options = with_channels({"PSL=msl", "U850=u@850"});
  auto pa = formats::open_netcdf_files({d.file("pa.nc")}, "", k_raw, options);
  auto hpa = formats::open_netcdf_files({d.file("hpa.nc")}, "", k_raw, options);
  CHECK(hpa->info().channel_units == std::vector<std::string>{"Pa", "m s-1"});
  const formats::NetcdfFileInfo info = formats::describe_netcdf(d.file("hpa.nc"), options);
  CHECK(info.channels[0].units == "hPa");
  CHECK(info.channels[0].target == "Pa");
  CHECK(info.channels[0].conversion == "100*x");
  CHECK(info.channels[1].conversion.empty());  // m s**-1 is m s-1
  for (int64_t t = 0; t < 2; ++t) {
    const std::vector<float> a = sample(*pa, t), b = sample(*hpa, t);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      // The hPa file stores msl/100 rounded to float (half an ulp, 2^-24 relative); the reader
      // multiplies by 100 in double and rounds once more (another 2^-24): two float roundings
      // apart from the Pa file's one, so within 2^-23 of each other, relatively.
      INFO("t " << t << " value " << i);
      REQUIRE(std::fabs(a[i] - b[i]) <= std::ldexp(std::fabs(a[i]), -23));
    }
  }
  // The first file's units for a channel of no fixed units: later files are converted to them.
  auto mixed = formats::open_netcdf_files({d.file("pa.nc"), d.file("hpa.nc")}, "", k_raw, with_channels({"msl"}));
  CHECK(mixed->info().channel_units == std::vector<std::string>{"Pa"});
  CHECK(at(sample(*mixed, 2), 0, 0, 0) == Approx(msl_pa(0, k_h - 1, 0)).epsilon(2e-7));
  // Given units (a checkpoint's) win over the file's.
  formats::NetcdfOptions given = with_channels({"msl"});
  given.units = {"hPa"};
  auto in_hpa = formats::open_netcdf_files({d.file("pa.nc")}, "", k_raw, given);
  CHECK(in_hpa->info().channel_units == std::vector<std::string>{"hPa"});
  CHECK(at(sample(*in_hpa, 0), 0, 0, 0) == Approx(msl_pa(0, k_h - 1, 0) / 100.0).epsilon(2e-7));

  // Not convertible: refused, naming the file, the variable, its units and the expected ones.
  const std::string refused = open_error(d.file("kelvin.nc"), options);
  CHECK_THAT(refused, Contains(d.file("kelvin.nc")) && Contains("variable 'msl' (channel PSL)") &&
                          Contains("units 'K'") && Contains("'Pa'"));
  CHECK_THROWS_AS(formats::open_netcdf_files({d.file("kelvin.nc")}, "", k_raw, options), squall::UsageError);  // exit 2
  // A second file in other units than the first's, for a channel of no fixed units.
  CHECK_THAT(open_error(d.file("pa.nc"), {}), Contains("no variable 'PSL'"));
  try {
    formats::open_netcdf_files({d.file("pa.nc"), d.file("kelvin.nc")}, "", k_raw, with_channels({"msl"}));
    FAIL("opened msl in K after msl in Pa");
  } catch (const squall::Error& e) {
    CHECK_THAT(std::string(e.what()), Contains(d.file("kelvin.nc")) && Contains("'K'") && Contains("'Pa'"));
  }
}

TEST_CASE("netCDF channels: squall train's way in, data.channels through the config and open_dataset",
          "[io][netcdf]") {
  squall::test::TempDir d("squall-nc-train");
  write_era5(d.file("era5.nc"), "hPa", true);
  const squall::config::Config cfg = squall::config::parse_config(
      "[data]\ntrain = \"" + d.path.string() + "\"\nchannels = [\"PSL=msl\", \"U850=u@850\"]\n", "test.toml");
  auto source =
      squall::input::open_dataset(cfg.data.train, "train", squall::config::dataset_options(cfg.data, nullptr, true));
  REQUIRE(source->size() == 2);
  CHECK(source->info().channel_names == std::vector<std::string>{"PSL", "U850"});
  CHECK(source->info().channel_units == std::vector<std::string>{"Pa", "m s-1"});
  std::vector<float> image(2 * k_h * k_w);
  std::vector<int32_t> labels(k_h * k_w);
  const int64_t one = 1;
  source->read(std::span<const int64_t>(&one, 1), image.data(), labels.data());
  CHECK(image[0] == Approx(msl_pa(1, k_h - 1, 0)).epsilon(2e-7));  // hPa read as Pa
  CHECK(labels[0] == static_cast<int32_t>((1 + k_h - 1 + 0) % 3));
}

TEST_CASE("squall data inspect lists variables, units and the channels a file can supply, and skips masks",
          "[io][netcdf][inspect]") {
  squall::test::TempDir d("squall-nc-inspect");
  write_era5(d.file("era5.nc"), "hPa");
  // A mask squall predict wrote into the same folder: an output, not data.
  formats::MaskGrid grid;
  grid.lat = {-60.0, -20.0, 20.0, 60.0};
  grid.lon = {0.0, 72.0, 144.0, 216.0, 288.0};
  grid.time = {0.0, 21600.0};
  formats::write_netcdf_masks(d.file("era5-mask.nc"), grid, std::vector<uint8_t>(2 * k_h * k_w, 0), {},
                              {"background", "tropical cyclone", "atmospheric river"});
  const std::string bin = squall::test::squall_bin();
  const std::string set = " --set 'data.channels=[\"TMQ=tcwv\", \"U850=u@850\", \"PSL=msl\", \"QREFHT=q2m\"]' ";

  // A channel the file lacks: every channel's state, the time steps, one error; exit 1.
  const auto r = squall::test::run_command(bin + " data inspect --json" + set + d.path.string());
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["format"] == "netcdf");
  CHECK(j["skipped"] == nlohmann::json::array({d.file("era5-mask.nc")}));
  CHECK(j["files"] == nlohmann::json::array({d.file("era5.nc")}));
  CHECK(j["time_steps"] == 2);
  REQUIRE(j["netcdf"].size() == 1);
  const auto& f = j["netcdf"][0];
  CHECK(f["time_steps"] == 2);
  CHECK(f["time_dim"] == "valid_time");
  bool saw_msl = false;
  for (const auto& v : f["variables"])
    if (v["name"] == "msl") {
      saw_msl = true;
      CHECK(v["units"] == "hPa");
      CHECK(v["dims"] == nlohmann::json::array({"valid_time", "latitude", "longitude"}));
      CHECK(v["shape"] == nlohmann::json::array({2, 4, 5}));
    }
  CHECK(saw_msl);
  REQUIRE(f["channels"].size() == 4);
  CHECK(f["channels"][1]["readable"] == true);
  CHECK(f["channels"][1]["level"] == "850 hPa");
  CHECK(f["channels"][2]["units"] == "hPa");
  CHECK(f["channels"][2]["target_units"] == "Pa");
  CHECK(f["channels"][2]["conversion"] == "100*x");
  CHECK(f["channels"][3]["readable"] == false);
  CHECK(f["channels"][3]["problem"] == "no variable 'q2m'");
  REQUIRE(j["errors"].size() == 1);
  CHECK_THAT(j["errors"][0].get<std::string>(), Contains("no variable 'q2m' (channel QREFHT)"));

  // The text output says the same in words.
  const auto text = squall::test::run_command(bin + " data inspect" + set + d.path.string());
  INFO(text.out << text.err);
  CHECK(text.exit_code == 1);
  CHECK_THAT(text.out, Contains("left out: 1 mask file(s) squall predict wrote") &&
                           Contains("time steps: 2 in the netCDF files, 2 not read") &&
                           Contains("msl(valid_time, latitude, longitude) float 2x4x5, hPa") &&
                           Contains("channels: 3 of 4 can be read") && Contains("U850     u at 850 hPa, m s**-1") &&
                           Contains("PSL      msl, hPa -> Pa (100*x)") && Contains("QREFHT   cannot: no variable 'q2m'"));

  // Every channel there (--netcdf-variables as squall data label takes it is refused beside
  // data.channels; a config file works as --set does): samples read, exit 0.
  std::ofstream(d.file("run.toml")) << "[data]\nchannels = [\"TMQ=tcwv\", \"U850=u@850\", \"PSL=msl\"]\n";
  const auto good = squall::test::run_command(bin + " data inspect --json --config " + d.file("run.toml") + " " +
                                              d.path.string());
  INFO(good.out << good.err);
  CHECK(good.exit_code == 0);
  const auto g = nlohmann::json::parse(good.out);
  CHECK(g["samples"] == 2);
  CHECK(g["channel_names"] == nlohmann::json::array({"TMQ", "U850", "PSL"}));
  CHECK(g["channel_units"] == nlohmann::json::array({"kg m-2", "m s-1", "Pa"}));
  CHECK(g["errors"].empty());
  const auto both = squall::test::run_command(bin + " data inspect --config " + d.file("run.toml") +
                                              " --netcdf-variables PSL=msl " + d.path.string());
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.err, Contains("data.netcdf_variables"));

  // A folder of masks only, and a mask given as a file: nothing to inspect, said so.
  squall::test::TempDir m("squall-nc-inspect-masks");
  formats::write_netcdf_masks(m.file("a-mask.nc"), grid, std::vector<uint8_t>(2 * k_h * k_w, 0), {},
                              {"background", "tropical cyclone", "atmospheric river"});
  const auto masks = squall::test::run_command(bin + " data inspect --json " + m.path.string());
  CHECK(masks.exit_code == 1);
  CHECK_THAT(nlohmann::json::parse(masks.out)["errors"][0].get<std::string>(), Contains("only mask files"));
}

TEST_CASE("netCDF channels: an ERA5-like file written by xarray reads with levels and units converted",
          "[io][netcdf][climate]") {
  if (!python_imports("xarray, netCDF4, numpy"))
    SQUALL_SKIP("/usr/bin/python3 cannot import xarray, netCDF4 and numpy (install python3-xarray python3-netcdf4)");
  squall::test::TempDir d("squall-nc-xarray");
  const std::string path = d.file("era5.nc");
  // As the CDS writes ERA5: latitude north to south, pressure_level in hPa, msl in hPa here,
  // t2m in degC, packed shorts for z (scale_factor/add_offset), CF-encoded time.
  const std::string script = R"(import sys, numpy as np, pandas as pd, xarray as xr
t = pd.date_range("2020-01-01", periods=3, freq="6h")
lev = np.array([1000.0, 850.0, 500.0])
lat = np.array([45.0, 15.0, -15.0, -45.0])
lon = np.arange(6) * 60.0
T, L, Y, X = np.meshgrid(np.arange(3), np.arange(3), np.arange(4), np.arange(6), indexing="ij")
T2, Y2, X2 = T[:, 0], Y[:, 0], X[:, 0]
u = (10.0 * L + T + 0.5 * Y + 0.25 * X).astype("f4")
msl = (1000.0 + T2 + 0.5 * Y2 + 0.25 * X2).astype("f4")
t2m = (15.0 + T2 + Y2 + 0.5 * X2).astype("f4")
z = (1000.0 + 100.0 * L + 10.0 * T + Y + X).astype("f8")
ds = xr.Dataset(
    {"u": (("valid_time", "pressure_level", "latitude", "longitude"), u, {"units": "m s**-1", "long_name": "U component of wind"}),
     "msl": (("valid_time", "latitude", "longitude"), msl, {"units": "hPa"}),
     "t2m": (("valid_time", "latitude", "longitude"), t2m, {"units": "degC"}),
     "z": (("valid_time", "pressure_level", "latitude", "longitude"), z, {"units": "m"})},
    coords={"valid_time": t, "pressure_level": ("pressure_level", lev, {"units": "hPa", "standard_name": "air_pressure"}),
            "latitude": ("latitude", lat, {"units": "degrees_north"}),
            "longitude": ("longitude", lon, {"units": "degrees_east"})})
enc = {"z": {"dtype": "int16", "scale_factor": 0.5, "add_offset": 1200.0, "_FillValue": -32767}}
ds.to_netcdf(sys.argv[1], encoding=enc)
)";
  const std::string py = d.file("write.py");
  std::ofstream(py) << script;
  const auto r = squall::test::run_command("/usr/bin/python3 " + py + " " + path);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto source = formats::open_netcdf_files(
      {path}, "", k_raw, with_channels({"U850=u@850", "PSL=msl", "TREFHT=t2m", "Z200=z@500hPa"}));
  REQUIRE(source->size() == 3);
  CHECK(source->info().channel_units == std::vector<std::string>{"m s-1", "Pa", "K", "m"});
  CHECK(source->sample_grid(1).time_units.find("since") != std::string::npos);
  for (int64_t t = 0; t < 3; ++t) {
    const std::vector<float> s = sample(*source, t);
    const double tt = static_cast<double>(t);
    for (size_t y = 0; y < 4; ++y)
      for (size_t x = 0; x < 6; ++x) {
        const double fy = 3.0 - static_cast<double>(y), xx = static_cast<double>(x);  // rows flipped
        INFO("t " << t << " y " << y << " x " << x);
        REQUIRE(at(s, 0, y, x, 4, 6) == static_cast<float>(10.0 + tt + 0.5 * fy + 0.25 * xx));
        // hPa and degC: one float rounding in the file, one in the conversion (2^-23 relative).
        const double msl = static_cast<double>(static_cast<float>(1000.0 + tt + 0.5 * fy + 0.25 * xx)) * 100.0;
        REQUIRE(std::fabs(at(s, 1, y, x, 4, 6) - msl) <= std::ldexp(msl, -23));
        const double t2m = static_cast<double>(static_cast<float>(15.0 + tt + fy + 0.5 * xx)) + 273.15;
        REQUIRE(std::fabs(at(s, 2, y, x, 4, 6) - t2m) <= std::ldexp(t2m, -23));
        // z packed as int16 with scale 0.5: exact in halves, unpacked in float.
        REQUIRE(at(s, 3, y, x, 4, 6) == static_cast<float>(1000.0 + 200.0 + 10.0 * tt + fy + xx));
      }
  }
}
