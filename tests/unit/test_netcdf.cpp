// netCDF input (io/formats/netcdf_file.hpp) and CF mask output (io/formats/netcdf_mask.hpp).
// Input files are written here with the netCDF C library in the classic, 64-bit offset and
// netCDF-4 formats; the cross-checks write files with Python's netCDF4 package and read
// masks with xarray (Debian's python3-netcdf4 and python3-xarray, which import only in
// /usr/bin/python3): without them those cases are skipped, visibly.
#include <netcdf.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "io/formats/dataset.hpp"
#include "io/formats/deepcam_file.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/netcdf_mask.hpp"
#include "src/core/error.hpp"
#include "src/config/config.hpp"
#include "src/config/setup.hpp"
#include "io/input/open_dataset.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

namespace formats = squall::formats;
const formats::OpenOptions k_raw{false, squall::data::NormalizationKind::zscore};

void ok(int status) {
  INFO(nc_strerror(status));
  REQUIRE(status == NC_NOERR);
}

// The value a test file holds for channel c at (t, y, x).
float field_value(int c, int64_t t, int64_t y, int64_t x) {
  return static_cast<float>(c * 1000 + t * 100) + static_cast<float>(y) * 0.5f + static_cast<float>(x) * 0.25f;
}

struct NcSpec {
  int format = NC_NETCDF4;   // NC_NETCDF4, NC_64BIT_OFFSET, 0 (classic), NC_NETCDF4 | NC_CLASSIC_MODEL
  int64_t steps = 3;         // 0: no time dimension
  int64_t h = 6, w = 8;
  bool labels = false;
  std::string skip;          // a channel variable left out
  std::string rename_from, rename_to;  // a channel variable written under another name
  std::string transposed;    // a channel variable written as (time, lon, lat)
  std::string short_lat;     // a channel variable written on a second, shorter lat dimension
};

// Writes a CAM5-like file: time/lat/lon coordinates and the 16 DeepCAM variables.
void write_nc(const std::string& path, const NcSpec& s) {
  int ncid = -1;
  ok(nc_create(path.c_str(), NC_CLOBBER | s.format, &ncid));
  int dt = -1, dy = -1, dx = -1, dy2 = -1;
  const bool timed = s.steps > 0;
  if (timed) ok(nc_def_dim(ncid, "time", NC_UNLIMITED, &dt));
  ok(nc_def_dim(ncid, "lat", static_cast<size_t>(s.h), &dy));
  ok(nc_def_dim(ncid, "lon", static_cast<size_t>(s.w), &dx));
  if (!s.short_lat.empty()) ok(nc_def_dim(ncid, "lat2", static_cast<size_t>(s.h - 1), &dy2));
  int vt = -1, vy = -1, vx = -1, vl = -1;
  if (timed) {
    ok(nc_def_var(ncid, "time", NC_DOUBLE, 1, &dt, &vt));
    ok(nc_put_att_text(ncid, vt, "units", 30, "days since 1979-01-01 00:00:00"));
    ok(nc_put_att_text(ncid, vt, "calendar", 6, "noleap"));
  }
  ok(nc_def_var(ncid, "lat", NC_DOUBLE, 1, &dy, &vy));
  ok(nc_def_var(ncid, "lon", NC_DOUBLE, 1, &dx, &vx));
  std::vector<int> vars;
  for (const std::string& name : formats::deepcam_channel_names()) {
    int v = -1;
    if (name == s.skip) {
      vars.push_back(-1);
      continue;
    }
    const std::string stored = name == s.rename_from ? s.rename_to : name;
    // lat and lon are deliberately swapped for `transposed` (a wrong dimension order).
    const int d3[3] = {dt, dy, dx}, d2[2] = {dy, dx}, t3[3] = {dt, dx, dy}, s3[3] = {dt, dy2, dx};
    const int* dims = name == s.transposed ? t3 : name == s.short_lat ? s3 : timed ? d3 : d2;
    ok(nc_def_var(ncid, stored.c_str(), NC_FLOAT, timed ? 3 : 2, dims, &v));
    vars.push_back(v);
  }
  if (s.labels) {
    const int d3[3] = {dt, dy, dx}, d2[2] = {dy, dx};
    ok(nc_def_var(ncid, "labels", NC_INT, timed ? 3 : 2, timed ? d3 : d2, &vl));
  }
  ok(nc_enddef(ncid));
  std::vector<double> lat(static_cast<size_t>(s.h)), lon(static_cast<size_t>(s.w));
  for (int64_t y = 0; y < s.h; ++y) lat[static_cast<size_t>(y)] = -90.0 + (static_cast<double>(y) + 0.5) * 180.0 / static_cast<double>(s.h);
  for (int64_t x = 0; x < s.w; ++x) lon[static_cast<size_t>(x)] = static_cast<double>(x) * 360.0 / static_cast<double>(s.w);
  ok(nc_put_var_double(ncid, vy, lat.data()));
  ok(nc_put_var_double(ncid, vx, lon.data()));
  const int64_t steps = timed ? s.steps : 1;
  if (timed) {
    std::vector<double> time(static_cast<size_t>(steps));
    for (int64_t t = 0; t < steps; ++t) time[static_cast<size_t>(t)] = 7300.0 + 0.25 * static_cast<double>(t);
    const size_t start = 0, count = static_cast<size_t>(steps);
    ok(nc_put_vara_double(ncid, vt, &start, &count, time.data()));
  }
  for (size_t c = 0; c < vars.size(); ++c) {
    if (vars[c] < 0) continue;
    const std::string& name = formats::deepcam_channel_names()[c];
    const int64_t h = name == s.transposed ? s.w : name == s.short_lat ? s.h - 1 : s.h;
    const int64_t w = name == s.transposed ? s.h : s.w;
    std::vector<float> v(static_cast<size_t>(steps * h * w));
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) v[static_cast<size_t>((t * h + y) * w + x)] = field_value(static_cast<int>(c), t, y, x);
    const size_t start[3] = {0, 0, 0}, count3[3] = {static_cast<size_t>(steps), static_cast<size_t>(h), static_cast<size_t>(w)};
    ok(nc_put_vara_float(ncid, vars[c], start, timed ? count3 : count3 + 1, v.data()));
  }
  if (s.labels) {
    std::vector<int> l(static_cast<size_t>(steps * s.h * s.w));
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<int>(i % 3);
    const size_t start[3] = {0, 0, 0}, count3[3] = {static_cast<size_t>(steps), static_cast<size_t>(s.h), static_cast<size_t>(s.w)};
    ok(nc_put_vara_int(ncid, vl, start, timed ? count3 : count3 + 1, l.data()));
  }
  ok(nc_close(ncid));
}

std::string open_error(const std::string& path, const formats::NetcdfOptions& options = {}) {
  try {
    formats::open_netcdf_files({path}, "", k_raw, options);
  } catch (const squall::Error& e) {
    return e.what();
  }
  return "(opened without error)";
}

bool python_imports(const std::string& modules) {
  return squall::test::run_command("/usr/bin/python3 -c 'import " + modules + "'").exit_code == 0;
}

// Runs a Python script written to `dir`/name with /usr/bin/python3; returns its output.
squall::test::ProcessResult python(const std::string& dir, const std::string& name, const std::string& code,
                                   const std::string& args = "") {
  const std::string py = dir + "/" + name;
  std::ofstream(py) << code;
  return squall::test::run_command("/usr/bin/python3 " + py + " " + args);
}

}  // namespace

TEST_CASE("netCDF input in the classic, 64-bit offset and netCDF-4 formats reads values and coordinates", "[io][netcdf]") {
  squall::test::TempDir d("squall-netcdf");
  const std::pair<int, const char*> formats[] = {{0, "classic"},
                                                 {NC_64BIT_OFFSET, "64-bit offset"},
                                                 {NC_NETCDF4, "netCDF-4"},
                                                 {NC_NETCDF4 | NC_CLASSIC_MODEL, "netCDF-4 classic model"}};
  for (const auto& [format, name] : formats) {
    INFO(name);
    const std::string path = d.file(std::string("cam5-") + std::to_string(format) + ".nc");
    NcSpec spec;
    spec.format = format;
    spec.labels = true;
    write_nc(path, spec);
    CHECK(formats::detect_format(path) == formats::DatasetFormat::netcdf);

    const formats::NetcdfFileInfo info = formats::describe_netcdf(path);
    CHECK(info.format == name);
    CHECK(info.steps == 3);
    CHECK(info.height == 6);
    CHECK(info.width == 8);
    CHECK(info.has_labels);
    CHECK(info.grid.time_units == "days since 1979-01-01 00:00:00");
    CHECK(info.grid.calendar == "noleap");

    auto source = formats::open_netcdf_files({path}, "", k_raw);
    REQUIRE(source->size() == 3);
    CHECK(source->info().sample == squall::nn::Shape(1, 16, 6, 8));
    CHECK(source->info().per_pixel_labels);
    CHECK(source->has_labels());
    const int64_t plane = 6 * 8;
    std::vector<float> image(static_cast<size_t>(16 * plane));
    std::vector<int32_t> labels(static_cast<size_t>(plane));
    for (int64_t t = 0; t < 3; ++t) {
      source->read(std::span<const int64_t>(&t, 1), image.data(), labels.data());
      for (int c = 0; c < 16; ++c)
        for (int64_t y = 0; y < 6; ++y)
          for (int64_t x = 0; x < 8; ++x)
            REQUIRE(image[static_cast<size_t>((c * 6 + y) * 8 + x)] == field_value(c, t, y, x));
      for (int64_t p = 0; p < plane; ++p) REQUIRE(labels[static_cast<size_t>(p)] == (t * plane + p) % 3);
      const formats::NetcdfGrid g = source->sample_grid(t);
      REQUIRE(g.time.size() == 1);
      CHECK(g.time[0] == 7300.0 + 0.25 * static_cast<double>(t));
      CHECK(g.time_units == "days since 1979-01-01 00:00:00");
      CHECK(g.calendar == "noleap");
      REQUIRE(g.lat.size() == 6);
      REQUIRE(g.lon.size() == 8);
      CHECK(g.lat[0] == -75.0);
      CHECK(g.lon[2] == 90.0);
      CHECK(source->sample_location(t) == std::pair<std::string, int64_t>{path, t});
    }
    const formats::NetcdfSample s = formats::read_netcdf_sample(path, 2);
    CHECK(s.chw[static_cast<size_t>((7 * 6 + 5) * 8 + 7)] == field_value(7, 2, 5, 7));
    CHECK(s.labels.size() == static_cast<size_t>(plane));
  }
}

TEST_CASE("netCDF input: several files, (lat, lon) without time, renamed variables, statistics", "[io][netcdf]") {
  squall::test::TempDir d("squall-netcdf-files");
  NcSpec a;
  a.steps = 2;
  write_nc(d.file("a.nc"), a);
  NcSpec b;
  b.steps = 0;  // one sample, no time dimension
  b.format = NC_64BIT_OFFSET;
  write_nc(d.file("b.nc"), b);
  CHECK(formats::detect_format(d.path.string()) == formats::DatasetFormat::netcdf);
  auto source = formats::open_netcdf(d.path.string(), k_raw);
  REQUIRE(source->size() == 3);
  CHECK(source->files() == std::vector<std::string>{d.file("a.nc"), d.file("b.nc")});
  CHECK(source->file_offsets() == std::vector<int64_t>{0, 2, 3});
  CHECK_FALSE(source->has_labels());
  const int64_t plane = 6 * 8;
  std::vector<float> image(static_cast<size_t>(16 * plane) * 3);
  std::vector<int32_t> labels(static_cast<size_t>(plane) * 3, 9);
  const std::vector<int64_t> all = {2, 0, 1};
  source->read(all, image.data(), labels.data());
  CHECK(image[0] == field_value(0, 0, 0, 0));                                          // b.nc, its one step
  CHECK(image[static_cast<size_t>(16 * plane) * 2 + 5] == field_value(0, 1, 0, 5));  // a.nc step 1
  CHECK(std::all_of(labels.begin(), labels.end(), [](int32_t l) { return l == 0; }));
  CHECK(source->sample_grid(2).time.empty());

  // Normalising needs stats.h5 beside the files: without it, an error that says so.
  CHECK_THROWS_WITH(formats::open_netcdf(d.path.string(), formats::OpenOptions{}), Catch::Contains("stats.h5"));
  formats::DeepcamStatsOut st;
  for (int c = 0; c < 16; ++c) {
    st.count.push_back(1);
    st.mean.push_back(c);
    st.sqmean.push_back(c * c + 4.0);  // std 2
    st.minval.push_back(0);
    st.maxval.push_back(1);
  }
  formats::write_deepcam_stats(d.file("stats.h5"), st);
  auto normalised = formats::open_netcdf(d.path.string(), formats::OpenOptions{});
  const int64_t one = 1;
  normalised->read(std::span<const int64_t>(&one, 1), image.data(), labels.data());
  CHECK(image[static_cast<size_t>(3 * plane + 9)] == Approx((field_value(3, 1, 1, 1) - 3.0f) / 2.0f));

  // A variable under another name: found through the mapping, missing without it.
  squall::test::TempDir e("squall-netcdf-renamed");
  NcSpec r;
  r.rename_from = "PSL";
  r.rename_to = "slp";
  r.labels = true;  // squall train opens it below: training needs labels
  write_nc(e.file("r.nc"), r);
  CHECK_THAT(open_error(e.file("r.nc")), Catch::Contains(e.file("r.nc")) && Catch::Contains("'PSL'"));
  formats::NetcdfOptions mapped;
  mapped.variables = formats::netcdf_variable_map("PSL=slp");
  auto renamed = formats::open_netcdf_files({e.file("r.nc")}, "", k_raw, mapped);
  renamed->read(std::span<const int64_t>(&one, 1), image.data(), labels.data());
  CHECK(image[static_cast<size_t>(7 * plane)] == field_value(7, 1, 0, 0));
  CHECK(formats::netcdf_variable_map(" TS = ts , PSL=slp")[11] == "ts");
  // squall train's way in: data.netcdf_variables through the config and open_dataset.
  const squall::config::Config cfg = squall::config::parse_config(
      "[data]\ntrain = \"" + e.path.string() + "\"\nnetcdf_variables = \"PSL=slp\"\n", "test.toml");
  auto trained =
      squall::input::open_dataset(cfg.data.train, "train", squall::config::dataset_options(cfg.data, nullptr, true));
  CHECK(trained->size() == 3);
  // Unlabelled files (new simulation output) are for predict: training and evaluation refuse
  // them, naming the folder and the labels variable.
  squall::test::TempDir u("squall-netcdf-unlabelled");
  write_nc(u.file("new.nc"), NcSpec{});
  CHECK_THROWS_WITH(
      squall::input::open_dataset(u.path.string(), "train", {.normalize = false, .cache_mb = 0}),
      Catch::Contains(u.path.string()) && Catch::Contains("without the labels variable 'labels'"));
  CHECK_THROWS_WITH(squall::config::parse_config("[data]\nnetcdf_variables = \"FOO=bar\"\n", "test.toml"),
                    Catch::Contains("data.netcdf_variables") && Catch::Contains("FOO"));
  CHECK_THROWS_WITH(formats::netcdf_variable_map("FOO=bar"), Catch::Contains("unknown channel 'FOO'"));
  CHECK_THROWS_WITH(formats::netcdf_variable_map("PSL"), Catch::Contains("CHANNEL=variable"));
}

TEST_CASE("netCDF input errors name the file and the variable", "[io][netcdf]") {
  squall::test::TempDir d("squall-netcdf-errors");
  NcSpec missing;
  missing.skip = "T500";
  write_nc(d.file("missing.nc"), missing);
  CHECK_THAT(open_error(d.file("missing.nc")),
             Catch::Contains(d.file("missing.nc")) && Catch::Contains("no variable 'T500'"));
  CHECK_THROWS_WITH(formats::describe_netcdf(d.file("missing.nc")), Catch::Contains("no variable 'T500'"));

  NcSpec transposed;
  transposed.transposed = "U850";
  write_nc(d.file("transposed.nc"), transposed);
  CHECK_THAT(open_error(d.file("transposed.nc")), Catch::Contains(d.file("transposed.nc")) &&
                                                      Catch::Contains("'U850'") &&
                                                      Catch::Contains("expected (time, latitude, longitude)"));

  NcSpec shorter;
  shorter.short_lat = "ZBOT";
  write_nc(d.file("shorter.nc"), shorter);
  CHECK_THAT(open_error(d.file("shorter.nc")), Catch::Contains(d.file("shorter.nc")) && Catch::Contains("'ZBOT'"));

  // Files of different grids in one dataset.
  NcSpec small;
  small.h = 4;
  write_nc(d.file("small.nc"), small);
  write_nc(d.file("big.nc"), NcSpec{});
  try {
    formats::open_netcdf_files({d.file("big.nc"), d.file("small.nc")}, "", k_raw);
    FAIL("opened files of different grids");
  } catch (const squall::Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains(d.file("small.nc")) && Catch::Contains("lat=4"));
  }

  // Not a netCDF file at all.
  std::ofstream(d.file("junk.nc")) << "not netCDF";
  CHECK_THAT(open_error(d.file("junk.nc")), Catch::Contains(d.file("junk.nc")));

  // data inspect lists every problem by file and exits 1.
  const auto r = squall::test::run_command(squall::test::squall_bin() + " data inspect --json " + d.file("missing.nc") +
                                           " " + d.file("big.nc"));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["format"] == "netcdf");
  CHECK(j["samples"] == 3);
  REQUIRE(j["errors"].size() == 1);
  CHECK_THAT(j["errors"][0].get<std::string>(), Catch::Contains("no variable 'T500'"));
  // Both files are described, the one that cannot be read too (its time steps counted).
  REQUIRE(j["netcdf"].size() == 2);
  CHECK(j["time_steps"] == 6);
  CHECK(j["netcdf"][0]["time_steps"] == 3);
  CHECK(j["netcdf"][0]["channels"][9]["problem"] == "no variable 'T500'");
  CHECK(j["netcdf"][0]["channels"][8]["readable"] == true);
  CHECK(j["netcdf"][1]["dims"]["lat"] == 6);
  CHECK(j["netcdf"][1]["format"] == "netCDF-4");
}

TEST_CASE("netCDF masks: CF attributes, atomic writes, errors name the file", "[io][netcdf]") {
  squall::test::TempDir d("squall-netcdf-mask");
  formats::MaskGrid grid{
      {-45.0, 0.0, 45.0}, {0.0, 90.0, 180.0, 270.0}, {10.0, 10.5}, "days since 2000-01-01", "noleap"};
  std::vector<uint8_t> masks(2 * 3 * 4);
  for (size_t i = 0; i < masks.size(); ++i) masks[i] = static_cast<uint8_t>(i % 3);
  const std::vector<std::string> classes = {"background", "tropical cyclone", "atmospheric river"};
  const std::string path = d.file("masks.nc");
  formats::write_netcdf_masks(path, grid, masks, {}, classes, {.source = "squall test"});
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  int ncid = -1, varid = -1;
  ok(nc_open(path.c_str(), NC_NOWRITE, &ncid));
  ok(nc_inq_varid(ncid, "mask", &varid));
  std::vector<signed char> back(masks.size());
  ok(nc_get_var_schar(ncid, varid, back.data()));
  for (size_t i = 0; i < masks.size(); ++i) REQUIRE(back[i] == static_cast<signed char>(masks[i]));
  char meanings[128] = {0};
  ok(nc_get_att_text(ncid, varid, "flag_meanings", meanings));
  CHECK(std::string(meanings) == "background tropical_cyclone atmospheric_river");
  char conventions[16] = {0};
  ok(nc_get_att_text(ncid, NC_GLOBAL, "Conventions", conventions));
  CHECK(std::string(conventions) == "CF-1.8");
  ok(nc_close(ncid));

  // Wrong sizes and values: errors naming the file, and neither the file nor a temporary.
  const std::string bad = d.file("bad.nc");
  CHECK_THROWS_WITH(formats::write_netcdf_masks(bad, grid, std::span<const uint8_t>(masks.data(), 5), {}, classes),
                    Catch::Contains(bad) && Catch::Contains("5 mask values"));
  masks[7] = 3;
  CHECK_THROWS_WITH(formats::write_netcdf_masks(bad, grid, masks, {}, classes),
                    Catch::Contains(bad) && Catch::Contains("value 3"));
  masks[7] = 1;
  const std::string unwritable = d.file("no-such-folder/masks.nc");
  CHECK_THROWS_WITH(formats::write_netcdf_masks(unwritable, grid, masks, {}, classes), Catch::Contains(unwritable));
  CHECK_FALSE(std::filesystem::exists(bad));
  CHECK_FALSE(std::filesystem::exists(bad + ".tmp"));
}

TEST_CASE("netCDF files written by Python's netCDF4 read as the DeepCAM files they came from", "[io][netcdf][climate]") {
  if (!python_imports("netCDF4, h5py, numpy"))
    SQUALL_SKIP("/usr/bin/python3 cannot import netCDF4, h5py and numpy (install python3-netcdf4 python3-h5py)");
  squall::test::TempDir d("squall-netcdf-deepcam");
  const std::string deepcam = d.file("deepcam"), nc = d.file("nc");
  const auto gen = squall::test::run_command(squall::test::squall_bin() + " data climate --out " + deepcam +
                                             " --samples 5 --height 32 --width 48 --seed 11");
  INFO(gen.out << gen.err);
  REQUIRE(gen.exit_code == 0);
  std::filesystem::create_directories(nc);
  std::filesystem::copy_file(deepcam + "/stats.h5", nc + "/stats.h5");
  // Samples 0-2 into one netCDF-4 file (3 time steps), 3-4 into a classic one (2 steps).
  const std::string script = R"(import sys, glob, h5py, numpy as np, netCDF4
src, dst, fmt, first, last = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
names = ["TMQ", "U850", "V850", "UBOT", "VBOT", "QREFHT", "PS", "PSL", "T200", "T500", "PRECT", "TS", "TREFHT",
         "Z1000", "Z200", "ZBOT"]
files = sorted(glob.glob(src + "/data-*.h5"))[first:last]
fields = []
for f in files:
    with h5py.File(f, "r") as h:
        fields.append(h["climate/data"][...])
        lat, lon = h["climate/lat"][...], h["climate/lon"][...]
fields = np.stack(fields)
with netCDF4.Dataset(dst, "w", format=fmt) as d:
    d.createDimension("time", None)
    d.createDimension("lat", len(lat))
    d.createDimension("lon", len(lon))
    t = d.createVariable("time", "f8", ("time",))
    t.units = "hours since 2001-01-01 00:00:00"
    t.calendar = "noleap"
    t[:] = 3.0 * np.arange(first, last)
    d.createVariable("lat", "f8", ("lat",))[:] = lat
    d.createVariable("lon", "f8", ("lon",))[:] = lon
    for c, n in enumerate(names):
        d.createVariable(n, "f4", ("time", "lat", "lon"))[:] = fields[..., c]
)";
  for (const std::string args : {deepcam + " " + nc + "/a.nc NETCDF4 0 3", deepcam + " " + nc + "/b.nc NETCDF3_CLASSIC 3 5"}) {
    const auto r = python(d.path.string(), "to_netcdf.py", script, args);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
  for (const formats::OpenOptions& options :
       {k_raw, formats::OpenOptions{}, formats::OpenOptions{true, squall::data::NormalizationKind::minmax}}) {
    auto ref = formats::open_deepcam(deepcam, options);
    auto src = formats::open_netcdf(nc, options);
    REQUIRE(src->size() == 5);
    REQUIRE(src->info().sample == ref->info().sample);
    const size_t n = static_cast<size_t>(ref->info().sample.per_sample()), plane = 32 * 48;
    std::vector<float> a(n), b(n);
    std::vector<int32_t> la(plane), lb(plane);
    for (int64_t i = 0; i < 5; ++i) {
      ref->read(std::span<const int64_t>(&i, 1), a.data(), la.data());
      src->read(std::span<const int64_t>(&i, 1), b.data(), lb.data());
      REQUIRE(a == b);  // the same floats, bit for bit
      CHECK(la == lb);
    }
    CHECK(src->sample_grid(4).time == std::vector<double>{12.0});
    CHECK(src->sample_grid(4).time_units == "hours since 2001-01-01 00:00:00");
  }
  CHECK(formats::describe_netcdf(nc + "/b.nc").format == "classic");

  // data label: the netCDF folder gives the labels the DeepCAM folder gives.
  const auto l1 = squall::test::run_command(squall::test::squall_bin() + " data label --json --in " + deepcam +
                                            " --out " + d.file("lab-deepcam"));
  const auto l2 = squall::test::run_command(squall::test::squall_bin() + " data label --json --in " + nc + " --out " +
                                            d.file("lab-nc"));
  INFO(l1.out << l1.err << l2.out << l2.err);
  REQUIRE(l1.exit_code == 0);
  REQUIRE(l2.exit_code == 0);
  CHECK(std::filesystem::exists(d.file("lab-nc/data-b-t000001.h5")));
  CHECK(std::filesystem::exists(d.file("lab-nc/stats.h5")));
  const auto j1 = nlohmann::json::parse(l1.out), j2 = nlohmann::json::parse(l2.out);
  CHECK(j1["cyclones"] == j2["cyclones"]);
  CHECK(j1["rivers"] == j2["rivers"]);
  auto lab1 = formats::open_deepcam(d.file("lab-deepcam"), k_raw);
  auto lab2 = formats::open_deepcam(d.file("lab-nc"), k_raw);
  REQUIRE(lab2->size() == 5);
  const size_t n = static_cast<size_t>(lab1->info().sample.per_sample()), plane = 32 * 48;
  std::vector<float> a(n), b(n);
  std::vector<int32_t> la(plane), lb(plane);
  for (int64_t i = 0; i < 5; ++i) {
    lab1->read(std::span<const int64_t>(&i, 1), a.data(), la.data());
    lab2->read(std::span<const int64_t>(&i, 1), b.data(), lb.data());
    CHECK(a == b);
    CHECK(la == lb);
  }
}

TEST_CASE("netCDF masks open in xarray with CF coordinates, flags and values", "[io][netcdf]") {
  if (!python_imports("xarray, netCDF4, numpy"))
    SQUALL_SKIP("/usr/bin/python3 cannot import xarray and netCDF4 (install python3-xarray python3-netcdf4)");
  squall::test::TempDir d("squall-netcdf-xarray");
  const int64_t nt = 2, ny = 4, nx = 6, nk = 3;
  formats::MaskGrid grid;
  for (int64_t y = 0; y < ny; ++y) grid.lat.push_back(-67.5 + 45.0 * static_cast<double>(y));
  for (int64_t x = 0; x < nx; ++x) grid.lon.push_back(60.0 * static_cast<double>(x));
  grid.time = {365.0, 365.25};
  grid.time_units = "days since 2000-01-01 00:00:00";
  grid.calendar = "noleap";
  std::vector<uint8_t> masks(static_cast<size_t>(nt * ny * nx));
  std::vector<float> probs(static_cast<size_t>(nt * nk * ny * nx));
  for (size_t i = 0; i < masks.size(); ++i) masks[i] = static_cast<uint8_t>((i * 7) % 3);
  for (size_t i = 0; i < probs.size(); ++i) probs[i] = static_cast<float>(i) / static_cast<float>(probs.size());
  const std::string path = d.file("masks.nc");
  formats::write_netcdf_masks(path, grid, masks, probs, {"background", "tropical cyclone", "atmospheric river"},
                         {.source = "squall deepcam", .history = "squall predict (test)", .checkpoint = "ckpt-000100"});
  const std::string script = R"(import sys, json, numpy as np, xarray as xr
ds = xr.open_dataset(sys.argv[1], decode_times=False)
m = ds["mask"]
out = {
  "dims": list(m.dims),
  "lat_units": ds["lat"].attrs.get("units"), "lon_units": ds["lon"].attrs.get("units"),
  "lat_axis": ds["lat"].attrs.get("axis"), "lon_standard_name": ds["lon"].attrs.get("standard_name"),
  "time_units": ds["time"].attrs.get("units"), "calendar": ds["time"].attrs.get("calendar"),
  "lat": ds["lat"].values.tolist(), "lon": ds["lon"].values.tolist(), "time": ds["time"].values.tolist(),
  "flag_values": np.asarray(m.attrs["flag_values"]).tolist(), "flag_meanings": m.attrs["flag_meanings"],
  "mask": m.values.astype(int).ravel().tolist(),
  "prob_dims": list(ds["probability"].dims), "prob": ds["probability"].values.ravel().tolist(),
  "conventions": ds.attrs.get("Conventions"), "source": ds.attrs.get("source"),
  "history": ds.attrs.get("history"), "checkpoint": ds.attrs.get("checkpoint"),
}
# The probabilities indexed by class name (class is a Python keyword: sel takes a dict).
out["classes"] = [str(c) for c in ds["class"].values.tolist()]
out["class_indexed"] = "class" in ds.indexes
out["river"] = ds["probability"].sel({"class": "atmospheric river"}).values.ravel().tolist()
dt = xr.open_dataset(sys.argv[1])  # CF time decoding with the calendar must work too
out["decoded_year"] = int(dt["time"].values[0].year)
print(json.dumps(out))
)";
  const auto r = python(d.path.string(), "read_masks.py", script, path);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["dims"] == nlohmann::json::array({"time", "lat", "lon"}));
  CHECK(j["lat_units"] == "degrees_north");
  CHECK(j["lon_units"] == "degrees_east");
  CHECK(j["lat_axis"] == "Y");
  CHECK(j["lon_standard_name"] == "longitude");
  CHECK(j["time_units"] == "days since 2000-01-01 00:00:00");
  CHECK(j["calendar"] == "noleap");
  CHECK(j["lat"].get<std::vector<double>>() == grid.lat);
  CHECK(j["lon"].get<std::vector<double>>() == grid.lon);
  CHECK(j["time"].get<std::vector<double>>() == grid.time);
  CHECK(j["flag_values"] == nlohmann::json::array({0, 1, 2}));
  CHECK(j["flag_meanings"] == "background tropical_cyclone atmospheric_river");
  const auto back = j["mask"].get<std::vector<int>>();
  REQUIRE(back.size() == masks.size());
  for (size_t i = 0; i < masks.size(); ++i) REQUIRE(back[i] == masks[i]);
  CHECK(j["prob_dims"] == nlohmann::json::array({"time", "class", "lat", "lon"}));
  const auto p = j["prob"].get<std::vector<double>>();
  REQUIRE(p.size() == probs.size());
  for (size_t i = 0; i < probs.size(); ++i) REQUIRE(static_cast<float>(p[i]) == probs[i]);
  CHECK(j["classes"] == nlohmann::json::array({"background", "tropical cyclone", "atmospheric river"}));
  CHECK(j["class_indexed"] == true);
  const auto river = j["river"].get<std::vector<double>>();
  REQUIRE(river.size() == static_cast<size_t>(nt * ny * nx));
  for (int64_t t = 0; t < nt; ++t)
    for (int64_t i = 0; i < ny * nx; ++i)
      REQUIRE(static_cast<float>(river[static_cast<size_t>(t * ny * nx + i)]) ==
              probs[static_cast<size_t>((t * nk + 2) * ny * nx + i)]);
  CHECK(j["conventions"] == "CF-1.8");
  CHECK(j["source"] == "squall deepcam");
  CHECK(j["history"] == "squall predict (test)");
  CHECK(j["checkpoint"] == "ckpt-000100");
  CHECK(j["decoded_year"] == 2001);  // 365 days after 2000-01-01 in the noleap calendar
}

TEST_CASE("netCDF input: packed variables unpacked, fill values are bad samples, reads from several threads agree",
          "[io][netcdf]") {
  squall::test::TempDir d("squall-netcdf-packed");
  const std::string path = d.file("packed.nc");
  write_nc(path, NcSpec{});
  {
    // TS (channel 11) rewritten as a packed short, with a fill value at step 1, pixel 5.
    int ncid = -1, old = -1, dims[3], v = -1;
    ok(nc_open(path.c_str(), NC_WRITE, &ncid));
    ok(nc_inq_varid(ncid, "TS", &old));
    ok(nc_inq_vardimid(ncid, old, dims));
    ok(nc_rename_var(ncid, old, "TS_float"));
    ok(nc_redef(ncid));
    ok(nc_def_var(ncid, "TS", NC_SHORT, 3, dims, &v));
    const float scale = 0.5f, offset = 11000.0f;
    const short fill = -32767;
    ok(nc_put_att_float(ncid, v, "scale_factor", NC_FLOAT, 1, &scale));
    ok(nc_put_att_float(ncid, v, "add_offset", NC_FLOAT, 1, &offset));
    ok(nc_put_att_short(ncid, v, "_FillValue", NC_SHORT, 1, &fill));
    ok(nc_enddef(ncid));
    std::vector<short> packed(3 * 6 * 8);
    for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<short>(i);
    packed[48 + 5] = fill;
    ok(nc_put_var_short(ncid, v, packed.data()));
    ok(nc_close(ncid));
  }
  auto source = formats::open_netcdf_files({path}, "", k_raw);
  const int64_t plane = 6 * 8;
  std::vector<float> image(static_cast<size_t>(16 * plane));
  std::vector<int32_t> labels(static_cast<size_t>(plane));
  const int64_t zero = 0, one = 1;
  source->read(std::span<const int64_t>(&zero, 1), image.data(), labels.data());
  CHECK(image[static_cast<size_t>(11 * plane + 3)] == 3 * 0.5f + 11000.0f);
  try {
    source->read(std::span<const int64_t>(&one, 1), image.data(), labels.data());
    FAIL("a fill value was read as data");
  } catch (const squall::data::BadSample& e) {
    CHECK(e.index() == 1);
    CHECK(e.file() == path);
    CHECK_THAT(std::string(e.what()), Catch::Contains("'TS'") && Catch::Contains("time step 1, pixel 5"));
  }

  // The loader reads from several threads: the reads are serialised and agree with one thread.
  squall::test::TempDir m("squall-netcdf-threads");
  for (int f = 0; f < 3; ++f) write_nc(m.file("f" + std::to_string(f) + ".nc"), NcSpec{});
  auto many = formats::open_netcdf(m.path.string(), k_raw);
  REQUIRE(many->size() == 9);
  const size_t per = static_cast<size_t>(16 * plane);
  std::vector<float> expected(per * 9);
  std::vector<int32_t> lab(static_cast<size_t>(plane) * 9);
  for (int64_t i = 0; i < 9; ++i) many->read(std::span<const int64_t>(&i, 1), expected.data() + per * static_cast<size_t>(i), lab.data());
  std::vector<std::vector<float>> got(4, std::vector<float>(per * 9));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<int32_t> l(static_cast<size_t>(plane));
      for (int round = 0; round < 5; ++round)
        for (int64_t i = 8; i >= 0; --i)
          many->read(std::span<const int64_t>(&i, 1), got[t].data() + per * static_cast<size_t>(i), l.data());
    });
  for (std::thread& t : threads) t.join();
  for (const auto& g : got) CHECK(g == expected);
}
