// Grids at training and at `squall predict` (docs/training.md, "Grids the model's stride does
// not divide"; docs/inference.md, "Grids" and "Input statistics"): a grid the U-Net's stride
// does not divide is refused under data.pad = none and trains padded; predict writes its masks
// on each input's own grid, padded or cropped (cropped pixels missing in the netCDF mask); a
// grid of twice the training resolution is refused unless --any-grid; a region at the
// training spacing runs with a line naming both grids; and a file whose pressure is in hPa
// warns, naming the channel and the file, where the same file in Pa does not.
#include <hdf5.h>
#include <netcdf.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/must_run.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using squall::test::must_run;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Labelled synthetic climate files of `h` x `w` in tmp/<name> (`squall data climate`, then
// `squall data label`).
void climate_files(const TempDir& tmp, const std::string& name, int samples, int h, int w, int seed) {
  const std::string bin = squall_bin();
  must_run(bin + " data climate --out " + tmp.file("raw-" + name) + " --samples " + std::to_string(samples) +
           " --height " + std::to_string(h) + " --width " + std::to_string(w) + " --seed " + std::to_string(seed));
  must_run(bin + " data label --in " + tmp.file("raw-" + name) + " --out " + tmp.file(name));
}

// A small U-Net of depth 2 (sides multiples of 4) trained for 4 steps on tmp/train, tested on
// tmp/test, with `extra` settings: the command line, for the caller to run.
std::string train_command(const TempDir& tmp, const std::string& run, const std::string& extra) {
  return squall_bin() + " train --config " + std::string(SQUALL_SOURCE_DIR) + "/configs/climate-tiny.toml" +
         " --set data.train=" + tmp.file("train") + " --set data.test=" + tmp.file("test") + " --set run.dir=" + run +
         " --set train.max_steps=4 --set train.batch_size=4 --set model.width=8 --set model.depth=2" +
         " --set schedule.warmup_steps=0 " + extra;
}

// A netCDF variable: its dimension lengths and its values as doubles (or bytes).
struct NcVar {
  std::vector<size_t> dims;
  std::vector<double> values;
  std::vector<signed char> bytes;
  bool has_fill = false;
  double fill = 0;
};

NcVar read_nc(const std::string& path, const std::string& name, bool as_bytes = false) {
  NcVar v;
  int nc = -1, var = -1, ndims = 0, ids[NC_MAX_VAR_DIMS] = {};
  INFO(path << ": variable " << name);
  REQUIRE(nc_open(path.c_str(), NC_NOWRITE, &nc) == NC_NOERR);
  REQUIRE(nc_inq_varid(nc, name.c_str(), &var) == NC_NOERR);
  REQUIRE(nc_inq_varndims(nc, var, &ndims) == NC_NOERR);
  REQUIRE(nc_inq_vardimid(nc, var, ids) == NC_NOERR);
  size_t n = 1;
  for (int i = 0; i < ndims; ++i) {
    size_t len = 0;
    REQUIRE(nc_inq_dimlen(nc, ids[i], &len) == NC_NOERR);
    v.dims.push_back(len);
    n *= len;
  }
  if (as_bytes) {
    v.bytes.resize(n);
    REQUIRE(nc_get_var_schar(nc, var, v.bytes.data()) == NC_NOERR);
  } else {
    v.values.resize(n);
    REQUIRE(nc_get_var_double(nc, var, v.values.data()) == NC_NOERR);
  }
  v.has_fill = nc_get_att_double(nc, var, "_FillValue", &v.fill) == NC_NOERR;
  nc_close(nc);
  return v;
}

// A DeepCAM file's /climate/lat or /climate/lon.
std::vector<double> read_h5_doubles(const std::string& path, const std::string& name) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  REQUIRE(ds >= 0);
  const hid_t space = H5Dget_space(ds);
  const auto n = static_cast<size_t>(H5Sget_simple_extent_npoints(space));
  std::vector<double> v(n);
  REQUIRE(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(f);
  return v;
}

std::string data_file(int i) {
  char name[32];
  std::snprintf(name, sizeof(name), "data-%06d", i);
  return name;
}

}  // namespace

TEST_CASE("data.pad: a grid the stride does not divide trains padded, predict masks it on its own grid, padded or "
          "cropped, and twice the resolution is refused unless --any-grid",
          "[launch][predict][pad]") {
  TempDir tmp("squall-launch-predict-grid");
  const std::string bin = squall_bin();
  // 62 x 94: a U-Net of depth 2 needs multiples of 4, so 64 x 96 padded, 60 x 92 cropped.
  climate_files(tmp, "train", 8, 62, 94, 3);
  climate_files(tmp, "test", 4, 62, 94, 4);

  // data.pad = none (the default): refused before anything is built, saying what to set.
  const auto refused = run_command(train_command(tmp, tmp.file("run-none"), ""));
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("data.train = " + tmp.file("train")) && Catch::Contains("62 x 94") &&
                              Catch::Contains("multiples of 4") && Catch::Contains("data.pad = \"pad\"") &&
                              Catch::Contains("64 x 96") && Catch::Contains("60 x 92"));
  // A roll in longitude would move the padded columns into the grid: refused too.
  const auto roll = run_command(train_command(tmp, tmp.file("run-roll"), "--set data.pad=pad --set data.augment_roll=true"));
  CHECK(roll.exit_code == 2);
  CHECK_THAT(roll.err, Catch::Contains("data.augment_roll") && Catch::Contains("padded to 96"));

  const std::string run = tmp.file("run");
  must_run(train_command(tmp, run, "--set data.pad=pad --set data.augment_flip=true"));
  // The checkpoint's test evaluation went through the padded test set too.
  must_run(bin + " eval --run " + run);

  // Padded: masks of 62 x 94 with the inputs' coordinates, every pixel a class.
  const std::string masks = tmp.file("masks");
  const auto p = run_command(bin + " predict --run " + run + " --data " + tmp.file("test") + " --out " + masks +
                             " --probabilities");
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, Catch::Contains("4 files, 4 time steps") && Catch::Contains("; no warnings"));
  CHECK_THAT(p.out, !Catch::Contains("another size"));  // the grid it was trained on
  for (int i = 0; i < 4; ++i) {
    const std::string input = tmp.file("test") + "/" + data_file(i) + ".h5", mask = masks + "/" + data_file(i) + "-mask.nc";
    INFO(mask);
    const NcVar m = read_nc(mask, "mask", true);
    CHECK(m.dims == std::vector<size_t>{1, 62, 94});
    CHECK(!m.has_fill);  // no pixel without a class: no _FillValue, xarray reads integers
    CHECK(read_nc(mask, "lat").values == read_h5_doubles(input, "/climate/lat"));
    CHECK(read_nc(mask, "lon").values == read_h5_doubles(input, "/climate/lon"));
    size_t not_class = 0;
    for (signed char v : m.bytes) not_class += v < 0 || v > 2;
    CHECK(not_class == 0);
  }

  // Cropped to 60 x 92 (one row and column off each side): the masks are still 62 x 94, the
  // pixels the model never saw missing (the byte -1, the declared _FillValue; NaN
  // probabilities), the others classes.
  const std::string cropped = tmp.file("cropped");
  must_run(bin + " predict --run " + run + " --data " + tmp.file("test") + " --out " + cropped +
           " --probabilities --set data.pad=crop");
  {
    const std::string mask = cropped + "/" + data_file(0) + "-mask.nc";
    const NcVar m = read_nc(mask, "mask", true);
    const NcVar prob = read_nc(mask, "probability");
    REQUIRE(m.dims == std::vector<size_t>{1, 62, 94});
    CHECK(m.has_fill);  // pixels without a class: the _FillValue is declared
    CHECK(m.fill == -1);
    REQUIRE(prob.values.size() == 3 * m.bytes.size());
    size_t wrong = 0, nan_wrong = 0;
    for (int y = 0; y < 62; ++y)
      for (int x = 0; x < 94; ++x) {
        const bool seen = y >= 1 && y < 61 && x >= 1 && x < 93;
        const signed char v = m.bytes[static_cast<size_t>(y * 94 + x)];
        wrong += seen ? (v < 0 || v > 2) : v != -1;
        for (int c = 0; c < 3; ++c) nan_wrong += std::isnan(prob.values[static_cast<size_t>((c * 62 + y) * 94 + x)]) == seen;
      }
    CHECK(wrong == 0);
    CHECK(nan_wrong == 0);
    CHECK(read_nc(mask, "lat").values == read_h5_doubles(tmp.file("test") + "/" + data_file(0) + ".h5", "/climate/lat"));
  }
  // data.pad = none at predict: refused, naming the file, its grid and the key.
  const auto none = run_command(bin + " predict --run " + run + " --data " + tmp.file("test") + " --out " +
                                tmp.file("none") + " --set data.pad=none");
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err, Catch::Contains(data_file(0) + ".h5") && Catch::Contains("62 x 94") &&
                           Catch::Contains("data.pad"));

  // Twice the resolution (124 x 188, which the stride divides): another spacing, refused with
  // both grids and the way out (the training grid's spacing from its coordinates, which the
  // checkpoint keeps: 180 / 62 x 360 / 94 degrees, the padded rows and columns extending it); with --any-grid, predicted with a warning that the summary counts.
  climate_files(tmp, "fine", 1, 124, 188, 5);
  const std::string fine = tmp.file("fine") + "/" + data_file(0) + ".h5";
  const auto spacing = run_command(bin + " predict --run " + run + " --data " + fine + " --out " + tmp.file("fine-masks"));
  INFO(spacing.out << spacing.err);
  CHECK(spacing.exit_code == 2);
  CHECK_THAT(spacing.err, Catch::Contains(fine) && Catch::Contains("124 x 188 (rows x columns) at 1.452 x 1.915 degrees") &&
                              Catch::Contains("64 x 96 (rows x columns) at 2.903 x 3.83 degrees") &&
                              Catch::Contains("--any-grid"));
  CHECK_FALSE(fs::exists(tmp.file("fine-masks") + "/" + data_file(0) + "-mask.nc"));
  const auto any = run_command(bin + " predict --run " + run + " --data " + fine + " --out " + tmp.file("fine-masks") +
                               " --any-grid");
  INFO(any.out << any.err);
  REQUIRE(any.exit_code == 0);
  CHECK_THAT(any.err, Catch::Contains("warning") && Catch::Contains(fine) && Catch::Contains("--any-grid"));
  CHECK_THAT(any.out, Catch::Contains("; 1 warning (on stderr)"));
  CHECK(read_nc(tmp.file("fine-masks") + "/" + data_file(0) + "-mask.nc", "mask", true).dims ==
        std::vector<size_t>{1, 124, 188});
}

TEST_CASE("predict: a region at the training spacing runs with a line naming both grids, and pressure in hPa warns, "
          "naming the channel and the file",
          "[launch][predict][pad]") {
  if (run_command("/usr/bin/python3 -c 'import netCDF4, h5py, numpy'").exit_code != 0)
    SQUALL_SKIP("/usr/bin/python3 cannot import netCDF4, h5py and numpy (install python3-netcdf4 python3-h5py)");
  TempDir tmp("squall-launch-predict-region");
  const std::string bin = squall_bin();
  climate_files(tmp, "h5-train", 8, 16, 24, 3);
  climate_files(tmp, "h5-test", 4, 16, 24, 4);
  // The same fields as netCDF files with coordinates (so the checkpoint records the training
  // grid's): train/ and test/ labelled, with the training set's stats.h5; and new files
  // without labels: the test fields as they are, a region of rows 3..12 of them, and the same
  // with PSL in hPa.
  const std::string script = tmp.file("to_nc.py");
  {
    std::ofstream py(script);
    py << R"(import sys, glob, shutil, os, h5py, numpy as np, netCDF4
src_train, src_test, dst = sys.argv[1], sys.argv[2], sys.argv[3]
names = ["TMQ", "U850", "V850", "UBOT", "VBOT", "QREFHT", "PS", "PSL", "T200", "T500", "PRECT", "TS", "TREFHT",
         "Z1000", "Z200", "ZBOT"]
def load(src):
    fields, labels = [], []
    for f in sorted(glob.glob(src + "/data-*.h5")):
        with h5py.File(f, "r") as h:
            fields.append(h["climate/data"][...])
            labels.append(h["climate/labels_0"][...])
            lat, lon = h["climate/lat"][...], h["climate/lon"][...]
    return np.stack(fields), np.stack(labels), lat, lon
def write(path, fields, labels, lat, lon):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as d:
        d.createDimension("time", None)
        d.createDimension("lat", len(lat))
        d.createDimension("lon", len(lon))
        t = d.createVariable("time", "f8", ("time",))
        t.units = "hours since 2001-01-01 00:00:00"
        t[:] = 6.0 * np.arange(len(fields))
        d.createVariable("lat", "f8", ("lat",))[:] = lat
        d.createVariable("lon", "f8", ("lon",))[:] = lon
        for c, n in enumerate(names):
            d.createVariable(n, "f4", ("time", "lat", "lon"))[:] = fields[..., c]
        if labels is not None:
            d.createVariable("labels", "i4", ("time", "lat", "lon"))[:] = labels
train, train_labels, lat, lon = load(src_train)
test, test_labels, _, _ = load(src_test)
write(dst + "/train/train.nc", train, train_labels, lat, lon)
shutil.copy(glob.glob(src_train + "/stats.h5")[0], dst + "/train/stats.h5")
write(dst + "/test/test.nc", test, test_labels, lat, lon)
write(dst + "/new/normal.nc", test, None, lat, lon)
write(dst + "/new/region.nc", test[:, 3:13], None, lat[3:13], lon)
hpa = test.copy()
hpa[..., names.index("PSL")] /= 100.0
write(dst + "/new/hpa.nc", hpa, None, lat, lon)
)";
  }
  REQUIRE(fs::exists(tmp.file("h5-train") + "/stats.h5"));
  must_run("/usr/bin/python3 " + script + " " + tmp.file("h5-train") + " " + tmp.file("h5-test") + " " + tmp.path.string());
  const std::string run = tmp.file("run");
  must_run(train_command(tmp, run, "--set data.pad=pad"));

  const std::string masks = tmp.file("masks"), fresh = tmp.file("new");
  // The region: accepted, one line naming both grids; its masks on its own 10 rows. (One
  // predict runs the model at one size: the region's file goes on its own.)
  const auto r = run_command(bin + " predict --run " + run + " --data " + fresh + "/region.nc --out " + masks);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("region.nc: a grid of 10 x 24 (rows x columns) at 11.25 x 15 degrees") &&
                        Catch::Contains("padded to 12 x 24") &&
                        Catch::Contains("trained on 16 x 24 (rows x columns) at 11.25 x 15 degrees") &&
                        Catch::Contains("the same spacing, another size"));
  CHECK_THAT(r.out, Catch::Contains("; no warnings"));
  const NcVar region = read_nc(masks + "/region-mask.nc", "mask", true);
  CHECK(region.dims == std::vector<size_t>{4, 10, 24});
  CHECK(read_nc(masks + "/region-mask.nc", "lat").values == read_nc(fresh + "/region.nc", "lat").values);
  CHECK(read_nc(masks + "/region-mask.nc", "lon").values == read_nc(fresh + "/region.nc", "lon").values);
  // Mixed with files of the training size: refused, saying to predict them apart.
  const auto mixed = run_command(bin + " predict --run " + run + " --data " + fresh + "/normal.nc " + fresh +
                                 "/region.nc --out " + tmp.file("mixed"));
  CHECK(mixed.exit_code == 2);
  CHECK_THAT(mixed.err, Catch::Contains("region.nc") && Catch::Contains("with another squall predict"));

  // hPa: one warning, naming the channel and the file, counted in the summary; none for the others.
  const auto p = run_command(bin + " predict --run " + run + " --data " + fresh + "/normal.nc " + fresh +
                             "/hpa.nc --out " + masks);
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, !Catch::Contains("normal.nc: a grid"));
  CHECK_THAT(p.err, Catch::Contains(fresh + "/hpa.nc: input PSL (channel 7) averages ") &&
                        Catch::Contains("standard deviations below the training mean") && Catch::Contains("units"));
  CHECK_THAT(p.err, !Catch::Contains("normal.nc: input"));
  CHECK_THAT(p.out, Catch::Contains("2 files, 8 time steps") && Catch::Contains("; 1 warning (on stderr)"));
  CHECK(fs::exists(masks + "/hpa-mask.nc"));  // a warning, not an error: the masks are written
}
