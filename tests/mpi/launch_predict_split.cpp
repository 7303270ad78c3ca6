// `squall predict` and `squall eval` with each sample split over a group of ranks (docs/inference.md,
// "One sample across ranks"): a 1440 x 2880 netCDF field predicted on 4 ranks of [2, 2] writes
// the CF mask one rank writes, whole, as Python's netCDF4 reads it; a split eval's confusion
// matrix is the unsplit one's, count for count, on 1, 2 and 4 ranks; a split run predicts and
// evaluates on its own split by default, whole samples with --spatial 1,1, and is refused,
// naming the split and the world size, on a world its split does not divide; a mask the first
// rank cannot write stops its whole group; `squall export` of a split run writes its one model.
//
// Tolerance: a tile's convolutions round differently from the whole sample's (the whole
// sample's forward-only 3x3 convolutions sum in Winograd's order, the tile's edge strips in the
// direct kernel's: src/nn/layers/halo.hpp), so the softmax agrees to float rounding, not bit for
// bit, and a pixel whose two best classes tie within that rounding may take either. The masks
// must be equal everywhere else: every differing pixel must be such a tie in the whole run's
// own probabilities (top two within 1e-5), and there may be only a handful of them.
#include <netcdf.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/support/must_run.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::must_run;
using squall::test::output_tail;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string k_climate = std::string(SQUALL_SOURCE_DIR) + "/configs/climate-tiny.toml";

// Labelled climate files of 16 x 24 (8 to train on, 4 held out) and a U-Net of width 8 and
// depth 2 trained on them for 4 steps: `whole` on one rank, `split` on 2 ranks with
// parallel.spatial = [2, 1] (tiles of 8 rows). Made once per test process.
struct Runs {
  TempDir dir{"squall-launch-predict-split"};
  std::string test = dir.file("test"), whole = dir.file("whole"), split = dir.file("split");

  Runs() {
    const std::string bin = squall_bin();
    for (const auto& [name, samples, seed] : {std::tuple{"train", 8, 3}, std::tuple{"test", 4, 4}}) {
      must_run(bin + " data climate --out " + dir.file(std::string("raw-") + name) + " --samples " +
               std::to_string(samples) + " --height 16 --width 24 --seed " + std::to_string(seed));
      must_run(bin + " data label --in " + dir.file(std::string("raw-") + name) + " --out " + dir.file(name));
    }
    const std::string train = bin + " train --config " + k_climate + " --set data.train=" + dir.file("train") +
                              " --set data.test=" + test +
                              " --set train.max_steps=4 --set train.batch_size=4 --set model.width=8"
                              " --set model.depth=2 --set schedule.warmup_steps=0 --set run.threads=1";
    must_run(train + " --set run.dir=" + whole);
    must_run(mpiexec(2) + " " + train + " --set run.dir=" + split + " --set parallel.spatial=[2,1]");
  }
};

const Runs& runs() {
  static const Runs r;
  return r;
}

// A netCDF mask file's `mask` variable, read with the C library.
std::vector<signed char> read_nc_mask(const std::string& path) {
  INFO(path);
  int nc = -1, var = -1, ndims = 0, ids[NC_MAX_VAR_DIMS] = {};
  REQUIRE(nc_open(path.c_str(), NC_NOWRITE, &nc) == NC_NOERR);
  REQUIRE(nc_inq_varid(nc, "mask", &var) == NC_NOERR);
  REQUIRE(nc_inq_varndims(nc, var, &ndims) == NC_NOERR);
  REQUIRE(nc_inq_vardimid(nc, var, ids) == NC_NOERR);
  size_t n = 1;
  for (int i = 0; i < ndims; ++i) {
    size_t len = 0;
    REQUIRE(nc_inq_dimlen(nc, ids[i], &len) == NC_NOERR);
    n *= len;
  }
  std::vector<signed char> v(n);
  REQUIRE(nc_get_var_schar(nc, var, v.data()) == NC_NOERR);
  nc_close(nc);
  return v;
}

json eval_json(const std::string& command) {
  const auto r = run_command(command + " --json");
  INFO(command << "\n" << output_tail(r));
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

std::vector<std::string> names_in(const std::string& folder) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(folder)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool have_python_netcdf() { return run_command("/usr/bin/python3 -c 'import netCDF4, h5py, numpy'").exit_code == 0; }

}  // namespace

TEST_CASE("predict of a 1440 x 2880 netCDF field on 4 ranks of [2, 2] writes the CF mask one rank writes",
          "[launch][predict][spatial]") {
  if (!have_python_netcdf())
    SQUALL_SKIP("/usr/bin/python3 cannot import netCDF4, h5py and numpy (install python3-netcdf4 python3-h5py)");
  const Runs& r = runs();
  TempDir tmp("squall-launch-predict-split-big");
  // One held-out field stretched onto a 1440 x 2880 grid (a 0.125 degree grid of one time step),
  // rippled so that no two tiles hold the same values, as a CF netCDF file.
  const std::string make = tmp.file("make.py"), check = tmp.file("check.py");
  {
    std::ofstream py(make);
    py << R"(import sys, h5py, numpy as np, netCDF4
src, dst, h, w = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
names = ["TMQ", "U850", "V850", "UBOT", "VBOT", "QREFHT", "PS", "PSL", "T200", "T500", "PRECT", "TS", "TREFHT",
         "Z1000", "Z200", "ZBOT"]
with h5py.File(src, "r") as f:
    small = f["climate/data"][...]
h0, w0, _ = small.shape
rows = np.minimum((np.arange(h) * h0) // h, h0 - 1)
cols = np.minimum((np.arange(w) * w0) // w, w0 - 1)
ripple = (1 + 0.05 * np.sin(np.arange(h) / 37.0)[:, None] * np.cos(np.arange(w) / 53.0)[None, :]).astype(np.float32)
with netCDF4.Dataset(dst, "w", format="NETCDF4") as d:
    d.createDimension("time", None)
    d.createDimension("lat", h)
    d.createDimension("lon", w)
    t = d.createVariable("time", "f8", ("time",))
    t.units = "hours since 2001-01-01 00:00:00"
    t.calendar = "noleap"
    t[:] = [6.0]
    d.createVariable("lat", "f8", ("lat",))[:] = -90 + (np.arange(h) + 0.5) * 180.0 / h
    d.createVariable("lon", "f8", ("lon",))[:] = np.arange(w) * 360.0 / w
    for c, n in enumerate(names):
        d.createVariable(n, "f4", ("time", "lat", "lon"))[0] = small[:, :, c][rows][:, cols] * ripple
)";
  }
  {
    // The two masks as Python's netCDF4 reads them: what a CF reader sees of each, and how they differ.
    std::ofstream py(check);
    py << R"(import sys, json, netCDF4, numpy as np
def look(path):
    d = netCDF4.Dataset(path)
    m = d["mask"]
    return d, {"conventions": d.getncattr("Conventions"), "mask_dims": list(m.dimensions), "shape": list(m.shape),
               "flag_values": [int(v) for v in m.getncattr("flag_values")], "has_fill": "_FillValue" in m.ncattrs(),
               "lat_units": d["lat"].units, "lon_units": d["lon"].units, "time": [float(v) for v in d["time"][:]],
               "lat_first": float(d["lat"][0]), "lat_last": float(d["lat"][-1]),
               "attributes": {k: str(d.getncattr(k)) for k in d.ncattrs()}}
dw, whole = look(sys.argv[1])
ds, split = look(sys.argv[2])
a, b = np.asarray(dw["mask"][...]), np.asarray(ds["mask"][...])
pa, pb = np.asarray(dw["probability"][...]), np.asarray(ds["probability"][...])
top2 = np.sort(pa, axis=1)[:, -2:, :, :]
margin = top2[:, 1] - top2[:, 0]
differ = a != b
print(json.dumps({"whole": whole, "split": split, "differ": int(differ.sum()),
                  "differ_max_margin": float(margin[differ].max()) if differ.any() else 0.0,
                  "classes_seen": sorted(int(v) for v in np.unique(a)),
                  "probability_max_diff": float(np.abs(pa - pb).max()),
                  "probability_sums_off": float(np.abs(pb.sum(axis=1) - 1).max())}))
)";
  }
  fs::create_directories(tmp.file("in"));
  const std::string field = tmp.file("in") + "/field.nc";
  must_run("/usr/bin/python3 " + make + " " + r.test + "/data-000000.h5 " + field + " 1440 2880");
  // One time step per batch, one thread per rank: the whole field once on one rank, a quarter on each of 4.
  const std::string predict = squall_bin() + " predict --run " + r.whole + " --data " + field +
                              " --any-grid --probabilities --set train.eval_batch_size=1 --set run.threads=1";
  const auto one = run_command(predict + " --out " + tmp.file("one"));
  INFO(output_tail(one));
  REQUIRE(one.exit_code == 0);
  const auto four = run_command(mpiexec(4) + " " + predict + " --out " + tmp.file("four") + " --spatial 2,2");
  INFO(output_tail(four));
  REQUIRE(four.exit_code == 0);
  // One file reported once, by the group's first rank; one mask file left, no temporary.
  CHECK_THAT(four.out, Contains("field.nc -> " + tmp.file("four") + "/field-mask.nc: 1 time step;") &&
                           Contains("1 file, 1 time step in "));
  CHECK(names_in(tmp.file("four")) == std::vector<std::string>{"field-mask.nc"});

  const auto compared = run_command("/usr/bin/python3 " + check + " " + tmp.file("one") + "/field-mask.nc " +
                                    tmp.file("four") + "/field-mask.nc");
  INFO(output_tail(compared));
  REQUIRE(compared.exit_code == 0);
  const json c = json::parse(compared.out);
  const json& split = c.at("split");
  // Whole and CF: the input's grid and time, the classes as flags, every pixel a class.
  CHECK(split.at("conventions") == "CF-1.8");
  CHECK(split.at("mask_dims") == json::array({"time", "lat", "lon"}));
  CHECK(split.at("shape") == json::array({1, 1440, 2880}));
  CHECK(split.at("flag_values") == json::array({0, 1, 2}));
  CHECK_FALSE(split.at("has_fill").get<bool>());
  CHECK(split.at("lat_units") == "degrees_north");
  CHECK(split.at("lon_units") == "degrees_east");
  CHECK(split.at("time") == json::array({6.0}));
  CHECK(split.at("lat_first").get<double>() < split.at("lat_last").get<double>());  // the input's order
  // The same metadata as one rank's, attribute for attribute.
  CHECK(split == c.at("whole"));
  // The masks: equal but for ties within rounding, and those few (see the top of the file).
  INFO("pixels that differ: " << c.at("differ") << ", their largest top-two margin " << c.at("differ_max_margin"));
  CHECK(c.at("differ").get<int64_t>() <= 40);  // 1e-5 of the 4147200 pixels
  CHECK(c.at("differ_max_margin").get<double>() <= 1e-5);
  CHECK(c.at("probability_max_diff").get<double>() <= 1e-4);
  CHECK(c.at("probability_sums_off").get<double>() <= 1e-5);
  CHECK(c.at("classes_seen").size() >= 2);  // a mask of one class would compare equal trivially
}

TEST_CASE("eval by tile gives the unsplit confusion matrix, count for count, on 1, 2 and 4 ranks",
          "[launch][eval][spatial]") {
  const Runs& r = runs();
  const std::string eval = squall_bin() + " eval --run " + r.split + " --set run.threads=1";
  const json whole = eval_json(eval + " --spatial 1,1");
  CHECK(whole.at("spatial") == json::array({1, 1}));
  const json rows = eval_json(mpiexec(2) + " " + eval);  // the run's own split
  CHECK(rows.at("spatial") == json::array({2, 1}));
  const json cols = eval_json(mpiexec(2) + " " + eval + " --spatial 1,2");
  CHECK(cols.at("spatial") == json::array({1, 2}));
  const json groups = eval_json(mpiexec(4) + " " + eval);  // 2 groups of 2, 2 samples each
  CHECK(groups.at("world_size") == 4);
  const json whole2 = eval_json(mpiexec(2) + " " + eval + " --spatial 1,1");  // 2 ranks of whole samples
  int64_t pixels = 0;
  for (const json& row : whole.at("test_confusion"))
    for (const json& v : row) pixels += v.get<int64_t>();
  CHECK(pixels == 4 * 16 * 24);
  for (const json* j : {&rows, &cols, &groups, &whole2}) {
    INFO(j->dump());
    CHECK(j->at("samples") == whole.at("samples"));
    CHECK(j->at("test_confusion") == whole.at("test_confusion"));
    CHECK(j->at("test_miou") == whole.at("test_miou"));
    CHECK(j->at("test_iou_per_class") == whole.at("test_iou_per_class"));
    CHECK(j->at("test_accuracy") == whole.at("test_accuracy"));
  }
  // The loss sums each tile's share of its samples' weighted mean: equal to rounding where the
  // samples fall into the same batches (one group against whole samples on one rank, two groups
  // against two ranks of whole samples; class weights make a batch's mean depend on its samples).
  const auto loss = [](const json& j) { return j.at("test_loss").get<double>(); };
  for (const auto& [split, plain] : {std::pair{&rows, &whole}, std::pair{&cols, &whole}, std::pair{&groups, &whole2}}) {
    INFO("loss " << loss(*split) << " against " << loss(*plain));
    CHECK(std::abs(loss(*split) - loss(*plain)) <= 1e-5 * loss(*plain));
  }
}

TEST_CASE("a split run predicts on its own split, whole samples with --spatial 1,1, and is refused on a world its "
          "split does not divide, and export writes its model",
          "[launch][predict][spatial][bad-input]") {
  const Runs& r = runs();
  TempDir tmp("squall-launch-predict-split-run");
  const std::string predict = squall_bin() + " predict --run " + r.split + " --data " + r.test + " --set run.threads=1";
  // One rank: [2, 1] needs 2; refused before anything is written, naming both numbers and the way out.
  const auto refused = run_command(predict + " --out " + tmp.file("refused"));
  INFO(output_tail(refused));
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Contains("the run's parallel.spatial = [2, 1]") && Contains("group of 2 ranks") &&
                              Contains("1 rank, not a multiple of 2") && Contains("--spatial 1,1"));
  CHECK_FALSE(fs::exists(tmp.file("refused") + "/data-000000-mask.nc"));
  const auto odd = run_command(mpiexec(3) + " " + squall_bin() + " eval --run " + r.split + " --spatial 1,2");
  INFO(output_tail(odd));
  CHECK(odd.exit_code == 2);
  CHECK_THAT(odd.err, Contains("--spatial 1,2") && Contains("3 ranks, not a multiple of 2"));
  for (const std::string value : {"2x1", "0,1", "2,1,1", "2,-1"}) {
    const auto bad = run_command(predict + " --out " + tmp.file("bad") + " --spatial " + value);
    INFO(value << ": " << output_tail(bad));
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Contains("--spatial " + value) && Contains("ROWS,COLS"));
  }

  // Whole samples on one rank, and the run's split on 2: the same masks, each file reported once.
  const auto whole = run_command(predict + " --out " + tmp.file("whole") + " --spatial 1,1");
  INFO(output_tail(whole));
  REQUIRE(whole.exit_code == 0);
  const auto split = run_command(mpiexec(2) + " " + predict + " --out " + tmp.file("split"));
  INFO(output_tail(split));
  REQUIRE(split.exit_code == 0);
  CHECK_THAT(split.out, Contains("4 files, 4 time steps in "));
  CHECK(names_in(tmp.file("split")) == names_in(tmp.file("whole")));
  for (int i = 0; i < 4; ++i) {
    char name[40];
    std::snprintf(name, sizeof(name), "/data-%06d-mask.nc", i);
    INFO(name);
    const std::vector<signed char> a = read_nc_mask(tmp.file("whole") + name), b = read_nc_mask(tmp.file("split") + name);
    CHECK(a.size() == 16u * 24u);
    CHECK(a == b);
  }

  // A mask the group's first rank cannot write (a folder in its place) stops both ranks of the
  // group at the next batch, naming the file, instead of leaving the other in a halo exchange.
  fs::create_directories(tmp.file("blocked") + "/data-000001-mask.nc/in-the-way");
  const auto blocked = run_command(mpiexec(2) + " " + predict + " --out " + tmp.file("blocked") +
                                   " --set train.eval_batch_size=1");
  INFO(output_tail(blocked));
  CHECK(blocked.exit_code == 1);
  CHECK_THAT(blocked.err, Contains("data-000001-mask.nc") && Contains("cannot rename"));

  // The one model of the split run, as ONNX (where this squall was built with ONNX export).
  const auto exported = run_command(squall_bin() + " export --run " + r.split + " --format onnx --out " +
                                    tmp.file("split.onnx"));
  INFO(output_tail(exported));
  if (exported.err.find("without ONNX export") == std::string::npos) {
    REQUIRE(exported.exit_code == 0);
    CHECK(fs::file_size(tmp.file("split.onnx")) > 1000);
  }
}
