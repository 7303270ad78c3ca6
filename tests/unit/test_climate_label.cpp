// `squall data label`'s heuristics on hand-made fields: an idealised cyclone (found only
// with the rotation of its hemisphere), a poleward moisture filament (a river) against a
// round moist blob (not one), a calm field, a filament across longitude 0, and the command
// run end to end on DeepCAM-layout files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include <nlohmann/json.hpp>

#include "io/formats/deepcam_file.hpp"
#include "src/data/climate_label.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using namespace squall::data;

constexpr double k_deg = std::numbers::pi / 180.0;
constexpr double k_km_per_deg = k_earth_radius_km * k_deg;

// A global grid, by default 1-degree: row i at latitude -89.5 + i, column j at longitude j + 0.5.
struct Field {
  int64_t h, w;
  std::vector<float> hwc;
  explicit Field(int64_t rows = 180, int64_t cols = 360)
      : h(rows), w(cols), hwc(static_cast<size_t>(rows * cols * k_climate_channels)) {}
  float& at(int64_t i, int64_t j, int c) { return hwc[static_cast<size_t>((i * w + j) * k_climate_channels + c)]; }
  double lat(int64_t i) const { return row_latitude(i, h); }
  double lon(int64_t j) const { return column_longitude(j, w); }
  ClimateFields view() const { return {h, w, hwc}; }
};

// Longitude difference wrapped into [-180, 180).
double dlon(double a, double b) { return std::fmod(a - b + 540.0, 360.0) - 180.0; }

double great_circle_km(double lat1, double lon1, double lat2, double lon2) {
  const double s1 = std::sin(0.5 * (lat1 - lat2) * k_deg), s2 = std::sin(0.5 * dlon(lon1, lon2) * k_deg);
  const double a = s1 * s1 + std::cos(lat1 * k_deg) * std::cos(lat2 * k_deg) * s2 * s2;
  return 2 * std::asin(std::sqrt(std::min(1.0, a))) * k_earth_radius_km;
}

// A calm atmosphere that varies with latitude only: moist tropics, no wind, uniform pressure.
Field calm(int64_t h = 180, int64_t w = 360) {
  Field f(h, w);
  for (int64_t i = 0; i < f.h; ++i)
    for (int64_t j = 0; j < f.w; ++j) {
      const double lat = f.lat(i), x = lat / 30.0;
      const float values[k_climate_channels] = {
          static_cast<float>(40 * std::exp(-x * x)), 0, 0, 0, 0, 0.01f, 100000, 101325,
          220, static_cast<float>(260 - 20 * std::abs(lat) / 90), 1e-8f, 290, 288, 100, 11800, 60};
      for (int c = 0; c < k_climate_channels; ++c) f.at(i, j, c) = values[c];
    }
  return f;
}

// An idealised tropical cyclone at (lat0, lon0): tangential wind vmax * (r/rm) e^(1 - r/rm)
// turning counterclockwise for sense = +1 (cyclonic in the north), a 50 hPa PSL low, a 4 K
// warm core, 25 kg/m^2 of extra water vapour and heavy rain, all decaying over a few 100 km.
void add_vortex(Field& f, double lat0, double lon0, int sense) {
  const double vmax = 40, rm = 150;
  for (int64_t i = 0; i < f.h; ++i)
    for (int64_t j = 0; j < f.w; ++j) {
      const double x = dlon(f.lon(j), lon0) * std::cos(lat0 * k_deg) * k_km_per_deg;
      const double y = (f.lat(i) - lat0) * k_km_per_deg;
      const double r = great_circle_km(f.lat(i), f.lon(j), lat0, lon0);
      if (r > 3000) continue;
      const double vt = sense * vmax * (r / rm) * std::exp(1 - r / rm), theta = std::atan2(y, x);
      const double u = -vt * std::sin(theta), v = vt * std::cos(theta);
      const double g = std::exp(-(r / 300) * (r / 300));
      f.at(i, j, k_u850) += static_cast<float>(u);
      f.at(i, j, k_v850) += static_cast<float>(v);
      f.at(i, j, k_ubot) += static_cast<float>(0.9 * u);
      f.at(i, j, k_vbot) += static_cast<float>(0.9 * v);
      f.at(i, j, k_psl) -= static_cast<float>(5000 * g);
      f.at(i, j, k_ps) -= static_cast<float>(5000 * g);
      f.at(i, j, k_t200) += static_cast<float>(4 * g);
      f.at(i, j, k_t500) += static_cast<float>(4 * g);
      f.at(i, j, k_tmq) += static_cast<float>(25 * g);
      f.at(i, j, k_prect) += static_cast<float>(5e-6 * std::exp(-(r / 200) * (r / 200)));
    }
}

// Extra water vapour peak * exp(-(d / scale)^2), d the distance to the segment from
// (lat1, lon1) to (lat2, lon2), measured in a plane tangent at the segment's middle.
void add_filament(Field& f, double lat1, double lon1, double lat2, double lon2, double peak, double scale_km) {
  const double lat_m = 0.5 * (lat1 + lat2), lon_m = lon1 + 0.5 * dlon(lon2, lon1), c = std::cos(lat_m * k_deg);
  const double ax = dlon(lon1, lon_m) * c, ay = lat1 - lat_m, bx = dlon(lon2, lon_m) * c, by = lat2 - lat_m;
  for (int64_t i = 0; i < f.h; ++i)
    for (int64_t j = 0; j < f.w; ++j) {
      const double px = dlon(f.lon(j), lon_m) * c, py = f.lat(i) - lat_m;
      const double t = std::clamp(((px - ax) * (bx - ax) + (py - ay) * (by - ay)) /
                                      ((bx - ax) * (bx - ax) + (by - ay) * (by - ay)), 0.0, 1.0);
      const double d = std::hypot(px - ax - t * (bx - ax), py - ay - t * (by - ay)) * k_km_per_deg;
      f.at(i, j, k_tmq) += static_cast<float>(peak * std::exp(-(d / scale_km) * (d / scale_km)));
    }
}

void add_blob(Field& f, double lat0, double lon0, double peak, double scale_km) {
  for (int64_t i = 0; i < f.h; ++i)
    for (int64_t j = 0; j < f.w; ++j) {
      const double r = great_circle_km(f.lat(i), f.lon(j), lat0, lon0);
      f.at(i, j, k_tmq) += static_cast<float>(peak * std::exp(-(r / scale_km) * (r / scale_km)));
    }
}

int64_t count(const std::vector<int32_t>& labels, int32_t value) {
  return std::count(labels.begin(), labels.end(), value);
}

int64_t pixel(const Field& f, double lat, double lon) {
  const auto i = static_cast<int64_t>(std::floor((lat + 90) * static_cast<double>(f.h) / 180));
  const auto j = static_cast<int64_t>(std::floor(lon * static_cast<double>(f.w) / 360));
  return i * f.w + j;
}

}  // namespace

TEST_CASE("grid convention: row 0 southernmost, columns eastward from longitude 0, cell centres", "[climate-label]") {
  CHECK(row_latitude(0, 180) == Approx(-89.5));
  CHECK(row_latitude(179, 180) == Approx(89.5));
  CHECK(column_longitude(0, 360) == Approx(0.5));
  CHECK(column_longitude(359, 360) == Approx(359.5));
}

TEST_CASE("a calm field that varies with latitude only gets no labels", "[climate-label]") {
  const Field f = calm();
  const std::vector<int32_t> labels = label_climate(f.view(), LabelParams{});
  CHECK(count(labels, k_background) == f.h * f.w);
  CHECK(find_tc_centres(f.view(), LabelParams{}).empty());
}

TEST_CASE("vorticity on the sphere: solid-body rotation about the pole has zeta = 2 omega sin(lat)",
          "[climate-label]") {
  Field f = calm();
  const double omega = 1e-5;  // 1/s, the rotation rate of the flow
  for (int64_t i = 0; i < f.h; ++i)
    for (int64_t j = 0; j < f.w; ++j) f.at(i, j, k_u850) = static_cast<float>(omega * k_earth_radius_km * 1e3 * std::cos(f.lat(i) * k_deg));
  const std::vector<float> plain = vorticity_850(f.view(), false), cyclonic = vorticity_850(f.view(), true);
  for (const int64_t i : {10, 60, 100, 150}) {
    INFO("row " << i);
    const double expected = 2 * omega * std::sin(f.lat(i) * k_deg);
    CHECK(plain[static_cast<size_t>(i * f.w + 7)] == Approx(expected).epsilon(1e-3));
    CHECK(cyclonic[static_cast<size_t>(i * f.w + 7)] == Approx(std::abs(expected)).epsilon(1e-3));
  }
}

TEST_CASE("an idealised cyclone is labelled around its centre, in either hemisphere", "[climate-label]") {
  const auto [lat0, lon0, sense] = GENERATE(std::tuple{15.0, 140.0, +1}, std::tuple{-20.0, 75.0, -1});
  INFO("vortex at " << lat0 << ", " << lon0);
  Field f = calm();
  add_vortex(f, lat0, lon0, sense);
  const LabelParams p;
  const std::vector<TcCentre> centres = find_tc_centres(f.view(), p);
  REQUIRE(centres.size() == 1);
  CHECK(std::abs(row_latitude(centres[0].row, f.h) - lat0) <= 1.0);
  CHECK(std::abs(dlon(column_longitude(centres[0].col, f.w), lon0)) <= 1.0);
  CHECK(centres[0].vorticity >= p.tc_vorticity);
  CHECK(centres[0].pressure_rise >= p.tc_pressure_delta);
  CHECK(centres[0].warm_core >= p.tc_warm_core_delta);

  const std::vector<int32_t> labels = label_climate(f.view(), p);
  CHECK(labels[static_cast<size_t>(pixel(f, lat0, lon0))] == k_tropical_cyclone);
  const int64_t storm = count(labels, k_tropical_cyclone);
  CHECK(storm >= 15);   // a disc of ~350 km radius on a 1-degree grid: ~35 pixels
  CHECK(storm <= 100);  // never beyond 500 km (~80 pixels at most)
  CHECK(count(labels, k_atmospheric_river) == 0);
  for (int64_t i = 0; i < f.h; ++i)
    for (int64_t j = 0; j < f.w; ++j)
      if (labels[static_cast<size_t>(i * f.w + j)] == k_tropical_cyclone)
        CHECK(great_circle_km(f.lat(i), f.lon(j), lat0, lon0) <= p.tc_radius_km + 1);
}

TEST_CASE("on DeepCAM's 768 x 1152 grid the same cyclone and river are found", "[climate-label]") {
  Field f = calm(768, 1152);
  add_vortex(f, 15, 140, +1);
  add_filament(f, 15, 200, 50, 230, 25, 250);
  const std::vector<TcCentre> centres = find_tc_centres(f.view(), LabelParams{});
  REQUIRE(centres.size() == 1);
  CHECK(std::abs(row_latitude(centres[0].row, f.h) - 15) <= 0.5);
  const std::vector<int32_t> labels = label_climate(f.view(), LabelParams{});
  CHECK(labels[static_cast<size_t>(pixel(f, 15, 140))] == k_tropical_cyclone);
  CHECK(labels[static_cast<size_t>(pixel(f, 32.5, 215))] == k_atmospheric_river);
  // ~35 one-degree pixels of storm on the 1-degree grid: ~16 times as many here.
  CHECK(count(labels, k_tropical_cyclone) > 300);
  CHECK(count(labels, k_tropical_cyclone) < 1600);
}

TEST_CASE("the same vortex turning the wrong way for its hemisphere is no cyclone", "[climate-label]") {
  const auto [lat0, lon0, sense] = GENERATE(std::tuple{15.0, 140.0, -1}, std::tuple{-20.0, 75.0, +1});
  INFO("vortex at " << lat0 << ", " << lon0);
  Field f = calm();
  add_vortex(f, lat0, lon0, sense);
  CHECK(find_tc_centres(f.view(), LabelParams{}).empty());
  const std::vector<int32_t> labels = label_climate(f.view(), LabelParams{});
  CHECK(count(labels, k_tropical_cyclone) == 0);
  CHECK(count(labels, k_atmospheric_river) == 0);
}

TEST_CASE("a cyclone without its warm core or its pressure low is no cyclone", "[climate-label]") {
  Field f = calm();
  add_vortex(f, 15, 140, +1);
  LabelParams strict;
  SECTION("warm core") { strict.tc_warm_core_delta = 10; }  // the vortex has 4 K
  SECTION("pressure") { strict.tc_pressure_delta = 6000; }  // the low is 50 hPa deep
  CHECK(find_tc_centres(f.view(), strict).empty());
}

TEST_CASE("a long, narrow moist filament reaching poleward is an atmospheric river", "[climate-label]") {
  Field f = calm();
  add_filament(f, 15, 200, 50, 230, 25, 250);
  std::vector<ArBlob> blobs;
  const std::vector<uint8_t> ar = ar_mask(f.view(), LabelParams{}, &blobs);
  REQUIRE(blobs.size() == 1);
  CHECK(blobs[0].kept);
  CHECK(blobs[0].length_km > 3500);  // the segment is ~4800 km long
  CHECK(blobs[0].length_km > 4 * blobs[0].width_km);
  const std::vector<int32_t> labels = label_climate(f.view(), LabelParams{});
  CHECK(labels[static_cast<size_t>(pixel(f, 32.5, 215))] == k_atmospheric_river);  // the middle
  CHECK(labels[static_cast<size_t>(pixel(f, 32.5, 140))] == k_background);
  CHECK(count(labels, k_atmospheric_river) == std::count(ar.begin(), ar.end(), uint8_t{1}));
  CHECK(count(labels, k_tropical_cyclone) == 0);
}

TEST_CASE("a long, narrow moist band that stays in the subtropics is no river", "[climate-label]") {
  Field f = calm();
  add_filament(f, 20, 100, 24, 160, 30, 250);  // ~6000 km along the subtropics, never past 26 degrees
  std::vector<ArBlob> blobs;
  const std::vector<uint8_t> ar = ar_mask(f.view(), LabelParams{}, &blobs);
  REQUIRE(blobs.size() == 1);
  CHECK(blobs[0].length_km > 4000);                         // long and narrow enough ...
  CHECK(blobs[0].length_km > 4 * blobs[0].width_km);
  CHECK(blobs[0].max_abs_lat < LabelParams{}.ar_min_reach_lat);  // ... but never poleward
  CHECK_FALSE(blobs[0].kept);
  CHECK(std::count(ar.begin(), ar.end(), uint8_t{1}) == 0);
  LabelParams lower;
  lower.ar_min_reach_lat = 20;  // the flag decides
  CHECK(ar_mask(f.view(), lower)[static_cast<size_t>(pixel(f, 22, 130))] == 1);
}

TEST_CASE("a round moist blob of the same peak is long enough but too wide to be a river", "[climate-label]") {
  Field f = calm();
  add_blob(f, 25, 300, 25, 1000);
  std::vector<ArBlob> blobs;
  const std::vector<uint8_t> ar = ar_mask(f.view(), LabelParams{}, &blobs);
  REQUIRE(blobs.size() == 1);
  CHECK(blobs[0].length_km >= LabelParams{}.ar_min_length_km);  // rejected for its shape, not its size
  CHECK(blobs[0].length_km < 2 * blobs[0].width_km);
  CHECK_FALSE(blobs[0].kept);
  CHECK(std::count(ar.begin(), ar.end(), uint8_t{1}) == 0);
}

TEST_CASE("a filament across longitude 0/360 is one river (the grid wraps)", "[climate-label]") {
  Field f = calm();
  add_filament(f, 25, 340, 45, 20, 25, 250);
  std::vector<ArBlob> blobs;
  const std::vector<uint8_t> ar = ar_mask(f.view(), LabelParams{}, &blobs);
  REQUIRE(blobs.size() == 1);
  CHECK(blobs[0].kept);
  CHECK(blobs[0].length_km > 3000);  // the whole segment (~4200 km), not one half of it
  const int64_t row = pixel(f, 35, 0) / f.w;
  CHECK(ar[static_cast<size_t>(row * f.w + 0)] == 1);
  CHECK(ar[static_cast<size_t>(row * f.w + f.w - 1)] == 1);
}

TEST_CASE("where a cyclone sits on a river, its pixels are the cyclone's", "[climate-label]") {
  Field f = calm();
  add_filament(f, 10, 150, 45, 180, 25, 250);
  add_vortex(f, 15, 155, +1);
  const std::vector<int32_t> labels = label_climate(f.view(), LabelParams{});
  CHECK(labels[static_cast<size_t>(pixel(f, 15, 155))] == k_tropical_cyclone);
  CHECK(labels[static_cast<size_t>(pixel(f, 35, 170))] == k_atmospheric_river);
  const std::vector<uint8_t> ar = ar_mask(f.view(), LabelParams{});
  CHECK(ar[static_cast<size_t>(pixel(f, 15, 155))] == 1);  // both apply there
}

TEST_CASE("squall data label relabels DeepCAM-layout files into --out and copies stats.h5", "[climate-label]") {
  using squall::test::run_command;
  using squall::test::squall_bin;
  squall::test::TempDir dir("squall-climate-label");
  const fs::path in = dir.path / "in", out = dir.path / "out";
  fs::create_directories(in);

  Field storm = calm(), river = calm();
  add_vortex(storm, 15, 140, +1);
  add_filament(river, 15, 200, 50, 230, 25, 250);
  const std::vector<int32_t> zeros(static_cast<size_t>(storm.h * storm.w), 0);
  for (const auto& [name, field] : {std::pair{"data-0001.h5", &storm}, std::pair{"data-0002.h5", &river}})
    squall::formats::write_deepcam_file((in / name).string(), {field->h, field->w, k_climate_channels, field->hwc},
                                        zeros);
  std::ofstream(in / "stats.h5") << "statistics stand-in";

  const auto r = run_command(squall_bin() + " data label --json --in " + in.string() + " --out " + out.string());
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["cyclones"] == 1);
  CHECK(doc["rivers"] == 1);
  CHECK(fs::exists(out / "stats.h5"));
  for (const auto& e : fs::directory_iterator(out)) CHECK(e.path().extension() != ".tmp");

  const std::vector<int32_t> storm_labels = squall::formats::read_deepcam_labels((out / "data-0001.h5").string());
  const std::vector<int32_t> river_labels = squall::formats::read_deepcam_labels((out / "data-0002.h5").string());
  CHECK(storm_labels == label_climate(storm.view(), LabelParams{}));
  CHECK(river_labels == label_climate(river.view(), LabelParams{}));
  CHECK(storm_labels[static_cast<size_t>(pixel(storm, 15, 140))] == k_tropical_cyclone);
  CHECK(count(river_labels, k_atmospheric_river) > 0);
  CHECK(squall::formats::read_deepcam_fields((out / "data-0002.h5").string()).hwc == river.hwc);  // data copied as is
  CHECK(squall::formats::read_deepcam_labels((in / "data-0001.h5").string()) == zeros);           // input untouched

  SECTION("--out naming --in is refused") {
    const auto same = run_command(squall_bin() + " data label --in " + in.string() + " --out " + in.string() + "/.");
    CHECK(same.exit_code == 2);
    CHECK_THAT(same.err, Catch::Contains("--in folder"));
  }
  SECTION("two ranks share the files and agree with one") {
    const fs::path out2 = dir.path / "out2";
    const auto m = run_command(squall::test::mpiexec(2) + " " + squall_bin() + " data label --in " + in.string() +
                               " --out " + out2.string());
    INFO(m.out << m.err);
    REQUIRE(m.exit_code == 0);
    CHECK_THAT(m.out, Catch::Contains("labelled 2 file(s)"));
    CHECK(squall::formats::read_deepcam_labels((out2 / "data-0001.h5").string()) == storm_labels);
    CHECK(squall::formats::read_deepcam_labels((out2 / "data-0002.h5").string()) == river_labels);
  }
}

TEST_CASE("squall data label names a file it cannot read and leaves no partial output", "[climate-label]") {
  using squall::test::run_command;
  using squall::test::squall_bin;
  squall::test::TempDir dir("squall-climate-label-bad");
  const fs::path in = dir.path / "in", out = dir.path / "out";
  fs::create_directories(in);
  std::ofstream(in / "data-0001.h5") << "not an HDF5 file";
  const auto r = run_command(squall_bin() + " data label --in " + in.string() + " --out " + out.string());
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("data-0001.h5"));
  CHECK_FALSE(fs::exists(out / "data-0001.h5"));
  CHECK_FALSE(fs::exists(out / "data-0001.h5.tmp"));

  const auto empty = run_command(squall_bin() + " data label --in " + out.string() + " --out " + in.string());
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.err, Catch::Contains("no DeepCAM files"));
}
