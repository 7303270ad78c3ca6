// `squall predict --png`: a picture per time step. A netCDF input of 3 time steps (written here
// with the netCDF C library from 3 generated climate samples) gives 3 PNGs named by the step's
// index, each of its own step (they differ as the steps' fields do), the size of the grid's
// two panels; a file of one step keeps its single `-mask.png`.
#include <catch2/catch.hpp>

#include <netcdf.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "io/formats/deepcam_file.hpp"
#include "src/data/climate_gen.hpp"
#include "tests/support/must_run.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using squall::test::must_run;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string k_climate = std::string(SQUALL_SOURCE_DIR) + "/configs/climate-tiny.toml";

void nc_ok(int status, const std::string& what) {
  INFO(what << ": " << nc_strerror(status));
  REQUIRE(status == NC_NOERR);
}

// The DeepCAM-layout samples `files` as one CAM5-style netCDF-4 file of as many time steps:
// time (hours since 2001-01-01, 3 h apart), lat, lon and one (time, lat, lon) variable per
// channel, named as CAM5 names them.
void write_netcdf(const std::vector<std::string>& files, const std::string& path) {
  std::vector<squall::formats::DeepcamFields> fields;
  for (const std::string& f : files) fields.push_back(squall::formats::read_deepcam_fields(f));
  const auto h = static_cast<size_t>(fields[0].h), w = static_cast<size_t>(fields[0].w);
  const auto c = static_cast<size_t>(fields[0].c);
  const std::vector<std::string>& names = squall::data::climate_channel_names();
  REQUIRE(names.size() == c);
  int nc = 0, dims[3] = {}, time_var = 0, lat_var = 0, lon_var = 0;
  nc_ok(nc_create(path.c_str(), NC_NETCDF4 | NC_CLOBBER, &nc), "create " + path);
  nc_ok(nc_def_dim(nc, "time", NC_UNLIMITED, &dims[0]), "time");
  nc_ok(nc_def_dim(nc, "lat", h, &dims[1]), "lat");
  nc_ok(nc_def_dim(nc, "lon", w, &dims[2]), "lon");
  nc_ok(nc_def_var(nc, "time", NC_DOUBLE, 1, &dims[0], &time_var), "time variable");
  const std::string units = "hours since 2001-01-01 00:00:00", calendar = "noleap";
  nc_ok(nc_put_att_text(nc, time_var, "units", units.size(), units.c_str()), "time units");
  nc_ok(nc_put_att_text(nc, time_var, "calendar", calendar.size(), calendar.c_str()), "time calendar");
  nc_ok(nc_def_var(nc, "lat", NC_DOUBLE, 1, &dims[1], &lat_var), "lat variable");
  nc_ok(nc_def_var(nc, "lon", NC_DOUBLE, 1, &dims[2], &lon_var), "lon variable");
  std::vector<int> vars(c);
  for (size_t k = 0; k < c; ++k) nc_ok(nc_def_var(nc, names[k].c_str(), NC_FLOAT, 3, dims, &vars[k]), names[k]);
  nc_ok(nc_enddef(nc), "enddef");
  std::vector<double> lat(h), lon(w), time(files.size());
  for (size_t y = 0; y < h; ++y) lat[y] = -90.0 + (static_cast<double>(y) + 0.5) * 180.0 / static_cast<double>(h);
  for (size_t x = 0; x < w; ++x) lon[x] = static_cast<double>(x) * 360.0 / static_cast<double>(w);
  for (size_t t = 0; t < time.size(); ++t) time[t] = 3.0 * static_cast<double>(t);
  const size_t zero = 0, steps = files.size();
  nc_ok(nc_put_vara_double(nc, time_var, &zero, &steps, time.data()), "time values");
  nc_ok(nc_put_var_double(nc, lat_var, lat.data()), "lat values");
  nc_ok(nc_put_var_double(nc, lon_var, lon.data()), "lon values");
  std::vector<float> plane(h * w);
  for (size_t t = 0; t < steps; ++t)
    for (size_t k = 0; k < c; ++k) {
      for (size_t p = 0; p < h * w; ++p) plane[p] = fields[t].hwc[p * c + k];
      const size_t start[3] = {t, 0, 0}, count[3] = {1, h, w};
      nc_ok(nc_put_vara_float(nc, vars[k], start, count, plane.data()), names[k] + " values");
    }
  nc_ok(nc_close(nc), "close " + path);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A PNG's width and height from its IHDR chunk (0 x 0 when the file is not a PNG).
std::pair<uint32_t, uint32_t> png_size(const std::string& bytes) {
  if (bytes.size() < 24 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 || bytes.compare(12, 4, "IHDR") != 0)
    return {0, 0};
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

}  // namespace

TEST_CASE("predict --png draws every time step of a netCDF input, each under its step's index", "[launch][predict]") {
  TempDir tmp("squall-launch-predict-png");
  const std::string bin = squall_bin();
  must_run(bin + " data climate --out " + tmp.file("raw") + " --samples 3 --height 16 --width 24 --seed 5");
  const std::string run = tmp.file("run");
  must_run(bin + " train --config " + k_climate + " --set data.train=" + tmp.file("raw") + " --set data.test=" +
           tmp.file("raw") + " --set run.dir=" + run + " --set train.max_steps=2 --set train.batch_size=2" +
           " --set model.width=4 --set model.depth=2 --set schedule.warmup_steps=0");
  fs::create_directories(tmp.file("nc"));
  const std::string nc = tmp.file("nc") + "/cam5-h3.nc";
  write_netcdf({tmp.file("raw") + "/data-000000.h5", tmp.file("raw") + "/data-000001.h5",
                tmp.file("raw") + "/data-000002.h5"},
               nc);

  const std::string out = tmp.file("masks");
  const auto p = run_command(bin + " predict --run " + run + " --data " + nc + " --out " + out + " --png");
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, Catch::Contains("cam5-h3-mask.nc: 3 time steps;"));
  std::vector<std::string> pngs;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().extension() == ".png") pngs.push_back(e.path().filename().string());
  std::sort(pngs.begin(), pngs.end());
  CHECK(pngs == std::vector<std::string>{"cam5-h3-mask-0000.png", "cam5-h3-mask-0001.png", "cam5-h3-mask-0002.png"});
  REQUIRE(pngs.size() == 3);
  std::vector<std::string> bytes;
  for (const std::string& name : pngs) {
    INFO(name);
    bytes.push_back(slurp(out + "/" + name));
    // The first channel and the mask side by side, 4 pixels apart: 2 x 24 + 4 by 16.
    CHECK(png_size(bytes.back()) == std::pair<uint32_t, uint32_t>{52, 16});
  }
  // Each step's own picture: the generated samples' fields differ, so do their pictures.
  CHECK(bytes[0] != bytes[1]);
  CHECK(bytes[1] != bytes[2]);
  CHECK(bytes[0] != bytes[2]);

  // An input of one time step keeps the name without an index.
  const auto one = run_command(bin + " predict --run " + run + " --data " + tmp.file("raw") + "/data-000001.h5 --out " +
                               tmp.file("one") + " --format h5 --png");
  INFO(one.out << one.err);
  REQUIRE(one.exit_code == 0);
  CHECK(fs::exists(tmp.file("one") + "/data-000001-mask.png"));
  // ... and is the same picture as the netCDF file's step 1, drawn from the same fields.
  CHECK(slurp(tmp.file("one") + "/data-000001-mask.png") == bytes[1]);
}
