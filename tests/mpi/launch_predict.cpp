// `squall predict`: a small climate run's checkpoint applied to held-out files writes one mask
// per file whose IoU against the labels is exactly what `squall eval` scores, with the grid,
// the class names and the softmax; the same files without labels, on 2 ranks, give the same
// masks; the same fields under ERA5's or other CF names, latitude descending, give the same
// masks on the input's own grid; bad arguments end with exit 2 naming the thing.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <netcdf.h>

#include "io/formats/deepcam_file.hpp"
#include "tests/support/must_run.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::must_run;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string k_climate = std::string(SQUALL_SOURCE_DIR) + "/configs/climate-tiny.toml";

// A mask file's /mask [t, h, w], /probabilities [t, c, h, w] (empty when absent) and the
// class names.
struct Mask {
  std::vector<hsize_t> dims;
  std::vector<uint8_t> mask;
  std::vector<float> probabilities;
  bool has_lat = false, has_lon = false;
  std::string model;
};

Mask read_mask(const std::string& path) {
  Mask m;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t ds = H5Dopen2(f, "/mask", H5P_DEFAULT);
  REQUIRE(ds >= 0);
  const hid_t space = H5Dget_space(ds);
  m.dims.resize(3);
  REQUIRE(H5Sget_simple_extent_ndims(space) == 3);
  H5Sget_simple_extent_dims(space, m.dims.data(), nullptr);
  m.mask.resize(m.dims[0] * m.dims[1] * m.dims[2]);
  REQUIRE(H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.mask.data()) >= 0);
  H5Sclose(space);
  H5Dclose(ds);
  if (H5Lexists(f, "/probabilities", H5P_DEFAULT) > 0) {
    const hid_t p = H5Dopen2(f, "/probabilities", H5P_DEFAULT);
    m.probabilities.resize(m.mask.size() * 3);
    REQUIRE(H5Dread(p, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.probabilities.data()) >= 0);
    H5Dclose(p);
  }
  m.has_lat = H5Lexists(f, "/lat", H5P_DEFAULT) > 0;
  m.has_lon = H5Lexists(f, "/lon", H5P_DEFAULT) > 0;
  H5Fclose(f);
  return m;
}

// The data file `src` copied to `dst` without /climate/labels_0: new simulation output.
void copy_without_labels(const fs::path& src, const fs::path& dst) {
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
  const hid_t f = H5Fopen(dst.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  REQUIRE(H5Ldelete(f, "/climate/labels_0", H5P_DEFAULT) >= 0);
  H5Fclose(f);
}

// A netCDF mask file's `mask` variable (time x lat x lon).
std::vector<uint8_t> read_nc_mask(const std::string& path) {
  int nc = -1, var = -1, dims[3] = {};
  REQUIRE(nc_open(path.c_str(), NC_NOWRITE, &nc) == NC_NOERR);
  REQUIRE(nc_inq_varid(nc, "mask", &var) == NC_NOERR);
  int ndims = 0;
  REQUIRE(nc_inq_varndims(nc, var, &ndims) == NC_NOERR);
  REQUIRE(ndims == 3);
  REQUIRE(nc_inq_vardimid(nc, var, dims) == NC_NOERR);
  size_t n = 1;
  for (int d : dims) {
    size_t len = 0;
    REQUIRE(nc_inq_dimlen(nc, d, &len) == NC_NOERR);
    n *= len;
  }
  std::vector<uint8_t> out(n);
  REQUIRE(nc_get_var_uchar(nc, var, out.data()) == NC_NOERR);
  nc_close(nc);
  return out;
}

// Held-out climate files, labelled, and a small U-Net run trained on others (with the
// augmentation on the sphere on, so that the trainer's path through it runs): tmp/train,
// tmp/test, tmp/run.
std::string small_climate_run(const TempDir& tmp) {
  const std::string bin = squall_bin();
  for (const auto& [split, samples, seed] : {std::tuple{"train", 8, 3}, std::tuple{"test", 4, 4}}) {
    must_run(bin + " data climate --out " + tmp.file(std::string("raw-") + split) + " --samples " +
             std::to_string(samples) + " --height 16 --width 24 --seed " + std::to_string(seed));
    must_run(bin + " data label --in " + tmp.file(std::string("raw-") + split) + " --out " + tmp.file(split));
  }
  const std::string run = tmp.file("run");
  must_run(bin + " train --config " + k_climate + " --set data.train=" + tmp.file("train") +
           " --set data.test=" + tmp.file("test") + " --set run.dir=" + run +
           " --set train.max_steps=4 --set train.batch_size=4 --set model.width=8 --set model.depth=2" +
           " --set schedule.warmup_steps=0 --set data.augment_roll=true --set data.augment_flip=true");
  return run;
}

std::string mask_name(int i, const std::string& ext) {
  char name[40];
  std::snprintf(name, sizeof(name), "data-%06d-mask.%s", i, ext.c_str());
  return name;
}

}  // namespace

TEST_CASE("predict writes masks that score exactly what eval scores, with or without labels, on 1 or 2 ranks",
          "[launch][predict]") {
  TempDir tmp("squall-launch-predict");
  const std::string bin = squall_bin();
  const std::string run = small_climate_run(tmp);
  const auto ev = run_command(bin + " eval --run " + run + " --json");
  INFO(ev.out << ev.err);
  REQUIRE(ev.exit_code == 0);
  const json e = json::parse(ev.out);

  const std::string masks = tmp.file("masks");
  const auto p = run_command(bin + " predict --run " + run + " --data " + tmp.file("test") + " --out " + masks +
                             " --format h5 --probabilities --png");
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, Catch::Contains("-mask.h5: 1 time step; background ") && Catch::Contains(" regions)") &&
                        Catch::Contains("4 files, 4 time steps in ") && Catch::Contains(", masks in " + masks));

  // IoU from the masks against the labels: the confusion matrix eval builds.
  int64_t cm[3][3] = {};
  std::vector<std::vector<uint8_t>> labelled_masks;
  for (int i = 0; i < 4; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "data-%06d", i);
    const std::string input = tmp.file("test") + "/" + name + ".h5";
    const Mask m = read_mask(masks + "/" + name + "-mask.h5");
    REQUIRE(fs::exists(masks + "/" + name + "-mask.png"));
    CHECK(m.dims == std::vector<hsize_t>{1, 16, 24});
    CHECK((m.has_lat && m.has_lon));
    const std::vector<int32_t> labels = squall::formats::read_deepcam_labels(input);
    REQUIRE(labels.size() == m.mask.size());
    for (size_t k = 0; k < labels.size(); ++k) ++cm[labels[k]][m.mask[k]];
    // The softmax: sums to 1, and its largest class is the mask's.
    const size_t hw = m.mask.size();
    size_t bad_sum = 0, bad_argmax = 0;
    for (size_t k = 0; k < hw; ++k) {
      const float a = m.probabilities[k], b = m.probabilities[hw + k], c = m.probabilities[2 * hw + k];
      bad_sum += std::abs(a + b + c - 1.0f) > 1e-5f;
      const int best = a >= b && a >= c ? 0 : (b >= c ? 1 : 2);
      bad_argmax += best != m.mask[k];
    }
    CHECK(bad_sum == 0);
    CHECK(bad_argmax == 0);
    labelled_masks.push_back(m.mask);
  }
  const json& iou = e.at("test_iou_per_class");
  for (int c = 0; c < 3; ++c) {
    int64_t row = 0, col = 0;
    for (int k = 0; k < 3; ++k) {
      row += cm[c][k];
      col += cm[k][c];
    }
    const int64_t uni = row + col - cm[c][c];
    INFO("class " << c);
    if (uni == 0) continue;
    CHECK(static_cast<double>(cm[c][c]) / static_cast<double>(uni) == Approx(iou.at(c).get<double>()).epsilon(1e-12));
  }

  // The same files without labels, on 2 ranks: the same masks.
  const fs::path bare = tmp.file("bare");
  fs::create_directories(bare);
  for (int i = 0; i < 4; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "data-%06d.h5", i);
    copy_without_labels(fs::path(tmp.file("test")) / name, bare / name);
  }
  const std::string masks2 = tmp.file("masks2");
  const auto p2 = run_command(mpiexec(2) + " " + bin + " predict --run " + run + " --data " + bare.string() +
                              " --out " + masks2);
  INFO(p2.out << p2.err);
  REQUIRE(p2.exit_code == 0);
  for (int i = 0; i < 4; ++i)  // the default format: CF netCDF
    CHECK(read_nc_mask(masks2 + "/" + mask_name(i, "nc")) == labelled_masks[static_cast<size_t>(i)]);

  // Usage errors name what is wrong.
  const auto missing = run_command(bin + " predict --run " + run + " --data " + tmp.file("nowhere") + " --out " + masks2);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("nowhere"));
  const auto both = run_command(bin + " predict --run " + run + " --checkpoint x --data " + bare.string() + " --out " + masks2);
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.err, Catch::Contains("not both"));
}

TEST_CASE("predict on netCDF files written by Python from the same fields gives the same masks", "[launch][predict]") {
  if (run_command("/usr/bin/python3 -c 'import netCDF4, h5py, numpy'").exit_code != 0)
    SQUALL_SKIP("/usr/bin/python3 cannot import netCDF4, h5py and numpy (install python3-netcdf4 python3-h5py)");
  TempDir tmp("squall-launch-predict-nc");
  const std::string bin = squall_bin();
  const std::string run = small_climate_run(tmp);
  // The 4 held-out samples as one netCDF-4 file of 4 time steps (CAM5-style variables).
  const std::string script = tmp.file("to_nc.py");
  {
    std::ofstream py(script);
    py << R"(import sys, glob, h5py, numpy as np, netCDF4
src, dst = sys.argv[1], sys.argv[2]
names = ["TMQ", "U850", "V850", "UBOT", "VBOT", "QREFHT", "PS", "PSL", "T200", "T500", "PRECT", "TS", "TREFHT",
         "Z1000", "Z200", "ZBOT"]
fields = []
for f in sorted(glob.glob(src + "/data-*.h5")):
    with h5py.File(f, "r") as h:
        fields.append(h["climate/data"][...])
        lat, lon = h["climate/lat"][...], h["climate/lon"][...]
fields = np.stack(fields)
with netCDF4.Dataset(dst, "w", format="NETCDF4") as d:
    d.createDimension("time", None)
    d.createDimension("lat", len(lat))
    d.createDimension("lon", len(lon))
    t = d.createVariable("time", "f8", ("time",))
    t.units = "hours since 2001-01-01 00:00:00"
    t.calendar = "noleap"
    t[:] = 3.0 * np.arange(len(fields))
    d.createVariable("lat", "f8", ("lat",))[:] = lat
    d.createVariable("lon", "f8", ("lon",))[:] = lon
    for c, n in enumerate(names):
        d.createVariable(n, "f4", ("time", "lat", "lon"))[:] = fields[..., c]
)";
  }
  fs::create_directories(tmp.file("nc"));
  must_run("/usr/bin/python3 " + script + " " + tmp.file("test") + " " + tmp.file("nc") + "/cam5-h3.nc");
  must_run(bin + " predict --run " + run + " --data " + tmp.file("test") + " --out " + tmp.file("from-h5"));
  const auto p = run_command(bin + " predict --run " + run + " --data " + tmp.file("nc") + "/cam5-h3.nc --out " +
                             tmp.file("from-nc"));
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, Catch::Contains("cam5-h3-mask.nc: 4 time steps;"));
  const std::vector<uint8_t> all = read_nc_mask(tmp.file("from-nc") + "/cam5-h3-mask.nc");
  REQUIRE(all.size() == 4 * 16 * 24);
  for (int i = 0; i < 4; ++i) {
    const std::vector<uint8_t> one = read_nc_mask(tmp.file("from-h5") + "/" + mask_name(i, "nc"));
    INFO("time step " << i);
    CHECK(std::equal(one.begin(), one.end(), all.begin() + i * 16 * 24));
  }

  // Both kinds at once in batches of 3, which cross files: the netCDF file's last time step
  // shares a batch with the first DeepCAM files. The same masks, each in its own file.
  const auto mixed = run_command(bin + " predict --run " + run + " --data " + tmp.file("nc") + "/cam5-h3.nc " +
                                 tmp.file("test") + " --out " + tmp.file("mixed") + " --set train.eval_batch_size=3");
  INFO(mixed.out << mixed.err);
  REQUIRE(mixed.exit_code == 0);
  CHECK_THAT(mixed.out, Catch::Contains("5 files, 8 time steps in "));
  CHECK(read_nc_mask(tmp.file("mixed") + "/cam5-h3-mask.nc") == all);
  for (int i = 0; i < 4; ++i) {
    INFO("DeepCAM file " << i);
    CHECK(read_nc_mask(tmp.file("mixed") + "/" + mask_name(i, "nc")) ==
          read_nc_mask(tmp.file("from-h5") + "/" + mask_name(i, "nc")));
  }

  // A variable the file does not have is a usage error (exit 2) naming the file and the
  // variable, and no mask is left behind.
  const auto wrong = run_command(bin + " predict --run " + run + " --data " + tmp.file("nc") + "/cam5-h3.nc --out " +
                                 tmp.file("wrong") + " --set 'data.netcdf_variables=PSL=slp'");
  INFO(wrong.out << wrong.err);
  CHECK(wrong.exit_code == 2);
  CHECK_THAT(wrong.err, Catch::Contains("cam5-h3.nc") && Catch::Contains("no variable 'slp'"));
  CHECK_FALSE(fs::exists(tmp.file("wrong") + "/cam5-h3-mask.nc"));
}

namespace {

// A netCDF variable's dimension names, and a double variable's values.
struct NcVariable {
  std::vector<std::string> dims;
  std::vector<double> values;
};

NcVariable read_nc_variable(const std::string& path, const std::string& name, bool values) {
  NcVariable v;
  int nc = -1, var = -1, ndims = 0, ids[NC_MAX_VAR_DIMS] = {};
  REQUIRE(nc_open(path.c_str(), NC_NOWRITE, &nc) == NC_NOERR);
  INFO(path << ": variable " << name);
  REQUIRE(nc_inq_varid(nc, name.c_str(), &var) == NC_NOERR);
  REQUIRE(nc_inq_varndims(nc, var, &ndims) == NC_NOERR);
  REQUIRE(nc_inq_vardimid(nc, var, ids) == NC_NOERR);
  size_t n = 1;
  for (int i = 0; i < ndims; ++i) {
    char dim[NC_MAX_NAME + 1] = {0};
    size_t len = 0;
    REQUIRE(nc_inq_dim(nc, ids[i], dim, &len) == NC_NOERR);
    v.dims.emplace_back(dim);
    n *= len;
  }
  if (values) {
    v.values.resize(n);
    REQUIRE(nc_get_var_double(nc, var, v.values.data()) == NC_NOERR);
  }
  nc_close(nc);
  return v;
}

}  // namespace

TEST_CASE("predict on ERA5- and CF-named netCDF files, latitude descending, writes the masks of the lat/lon file",
          "[launch][predict]") {
  if (run_command("/usr/bin/python3 -c 'import netCDF4, h5py, numpy'").exit_code != 0)
    SQUALL_SKIP("/usr/bin/python3 cannot import netCDF4, h5py and numpy (install python3-netcdf4 python3-h5py)");
  TempDir tmp("squall-launch-predict-cf");
  const std::string bin = squall_bin();
  const std::string run = small_climate_run(tmp);
  // The 4 held-out samples three times, as 4 time steps each: latlon.nc (lat, lon, time, no
  // attributes), era5.nc (latitude north to south, longitude, valid_time: ERA5's names and
  // attributes) and xy.nc (y, x, t known only by their units, latitude north to south).
  const std::string script = tmp.file("to_nc.py");
  {
    std::ofstream py(script);
    py << R"(import sys, glob, h5py, numpy as np, netCDF4
src, dst = sys.argv[1], sys.argv[2]
names = ["TMQ", "U850", "V850", "UBOT", "VBOT", "QREFHT", "PS", "PSL", "T200", "T500", "PRECT", "TS", "TREFHT",
         "Z1000", "Z200", "ZBOT"]
fields = []
for f in sorted(glob.glob(src + "/data-*.h5")):
    with h5py.File(f, "r") as h:
        fields.append(h["climate/data"][...])
        lat, lon = h["climate/lat"][...], h["climate/lon"][...]
fields = np.stack(fields)  # time, lat (south first), lon, channel

def write(path, t, y, x, t_atts, y_atts, x_atts, north_first, unlimited):
    rows = slice(None, None, -1) if north_first else slice(None)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as d:
        d.createDimension(t, None if unlimited else len(fields))
        d.createDimension(y, len(lat))
        d.createDimension(x, len(lon))
        for name, dim, atts, values in ((t, t, t_atts, 3600.0 * np.arange(len(fields))), (y, y, y_atts, lat[rows]),
                                        (x, x, x_atts, lon)):
            v = d.createVariable(name, "f8", (dim,))
            v.setncatts(atts)
            v[:] = values
        for c, n in enumerate(names):
            d.createVariable(n, "f4", (t, y, x))[:] = fields[:, rows, :, c]

write(dst + "/latlon.nc", "time", "lat", "lon", {}, {}, {}, False, True)
write(dst + "/era5.nc", "valid_time", "latitude", "longitude",
      {"standard_name": "time", "axis": "T", "units": "seconds since 1970-01-01", "calendar": "proleptic_gregorian"},
      {"standard_name": "latitude", "units": "degrees_north", "long_name": "latitude"},
      {"standard_name": "longitude", "units": "degrees_east", "long_name": "longitude"}, True, False)
write(dst + "/xy.nc", "t", "y", "x", {"units": "hours since 2001-01-01 00:00:00"}, {"units": "degrees_north"},
      {"units": "degrees_east"}, True, False)
)";
  }
  const std::string nc = tmp.file("nc"), masks = tmp.file("masks");
  fs::create_directories(nc);
  must_run("/usr/bin/python3 " + script + " " + tmp.file("test") + " " + nc);
  const auto p = run_command(bin + " predict --run " + run + " --data " + nc + " --out " + masks + " --probabilities");
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, Catch::Contains("era5-mask.nc: 4 time steps;") && Catch::Contains("xy-mask.nc: 4 time steps;") &&
                        Catch::Contains("3 files"));

  const int64_t nt = 4, ny = 16, nx = 24, nk = 3;
  const NcVariable ref = read_nc_variable(masks + "/latlon-mask.nc", "mask", true);
  const NcVariable ref_p = read_nc_variable(masks + "/latlon-mask.nc", "probability", true);
  REQUIRE(ref.values.size() == static_cast<size_t>(nt * ny * nx));
  CHECK(ref.dims == std::vector<std::string>{"time", "lat", "lon"});
  for (const auto& [stem, t, y, x] : {std::tuple{"era5", "valid_time", "latitude", "longitude"},
                                      std::tuple{"xy", "t", "y", "x"}}) {
    INFO(stem);
    const std::string mask_file = masks + "/" + stem + "-mask.nc", input = nc + "/" + stem + ".nc";
    // The mask on the input's grid: its dimension names, its coordinates in its order.
    const NcVariable m = read_nc_variable(mask_file, "mask", true);
    CHECK(m.dims == std::vector<std::string>{t, y, x});
    CHECK(read_nc_variable(mask_file, "probability", false).dims == std::vector<std::string>{t, "class", y, x});
    CHECK(read_nc_variable(mask_file, y, true).values == read_nc_variable(input, y, true).values);
    CHECK(read_nc_variable(mask_file, x, true).values == read_nc_variable(input, x, true).values);
    CHECK(read_nc_variable(mask_file, t, true).values == read_nc_variable(input, t, true).values);
    // The values: the lat/lon file's masks and probabilities, rows north first.
    const NcVariable prob = read_nc_variable(mask_file, "probability", true);
    REQUIRE(m.values.size() == ref.values.size());
    REQUIRE(prob.values.size() == ref_p.values.size());
    size_t differ = 0, differ_p = 0;
    for (int64_t s = 0; s < nt; ++s)
      for (int64_t row = 0; row < ny; ++row)
        for (int64_t col = 0; col < nx; ++col) {
          const int64_t north_first = (s * ny + (ny - 1 - row)) * nx + col, south_first = (s * ny + row) * nx + col;
          differ += m.values[static_cast<size_t>(north_first)] != ref.values[static_cast<size_t>(south_first)];
          for (int64_t k = 0; k < nk; ++k)
            differ_p += prob.values[static_cast<size_t>(((s * nk + k) * ny + (ny - 1 - row)) * nx + col)] !=
                        ref_p.values[static_cast<size_t>(((s * nk + k) * ny + row) * nx + col)];
        }
    CHECK(differ == 0);
    CHECK(differ_p == 0);
  }
  // The probabilities differ from row to row: a mask left south first would not compare equal.
  size_t asymmetric = 0;
  for (int64_t plane = 0; plane < nt * nk; ++plane)
    for (int64_t row = 0; row < ny; ++row)
      for (int64_t col = 0; col < nx; ++col)
        asymmetric += ref_p.values[static_cast<size_t>((plane * ny + row) * nx + col)] !=
                      ref_p.values[static_cast<size_t>((plane * ny + ny - 1 - row) * nx + col)];
  CHECK(asymmetric > 0);
}
