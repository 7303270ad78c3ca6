// The synthetic climate generator (src/data/climate_gen.hpp) and `squall data climate`:
// determinism, the physics of the placed cyclones and rivers, plausible ranges, and files
// that the DeepCAM reader and `data inspect` accept.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/formats/dataset.hpp"
#include "io/formats/shard.hpp"
#include "src/data/climate_gen.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using Catch::Contains;
using namespace squall::data;

namespace {

constexpr double k_earth_m = 6.371e6;
constexpr double k_deg = 3.14159265358979323846 / 180.0;

int64_t wrap(int64_t x, int64_t w) { return (x % w + w) % w; }

// Relative vorticity dv/dx - du/dy (1/s) at (y, x) on the sphere, by central differences.
double vorticity_850(const ClimateSample& s, int64_t y, int64_t x) {
  const double lat = grid_lat(s.height, y) * k_deg;
  const double dlon = 360.0 / s.width * k_deg, dlat = 180.0 / s.height * k_deg;
  const double dv = s.at(y, wrap(x + 1, s.width), k_v850) - s.at(y, wrap(x - 1, s.width), k_v850);
  const double cos_n = std::cos(grid_lat(s.height, y + 1) * k_deg), cos_s = std::cos(grid_lat(s.height, y - 1) * k_deg);
  const double du_cos = s.at(y + 1, x, k_u850) * cos_n - s.at(y - 1, x, k_u850) * cos_s;
  return dv / (2 * dlon * k_earth_m * std::cos(lat)) - du_cos / (2 * dlat * k_earth_m * std::cos(lat));
}

bool is_local_min(const ClimateSample& s, int64_t y, int64_t x, int c) {
  for (int64_t dy = -1; dy <= 1; ++dy)
    for (int64_t dx = -1; dx <= 1; ++dx)
      if ((dy || dx) && s.at(y + dy, wrap(x + dx, s.width), c) <= s.at(y, x, c)) return false;
  return true;
}

bool is_local_max(const ClimateSample& s, int64_t y, int64_t x, int c) {
  for (int64_t dy = -1; dy <= 1; ++dy)
    for (int64_t dx = -1; dx <= 1; ++dx)
      if ((dy || dx) && s.at(y + dy, wrap(x + dx, s.width), c) >= s.at(y, x, c)) return false;
  return true;
}

// Mean of channel c over the grid points between r0 and r1 km from (lat, lon).
double ring_mean(const ClimateSample& s, double lat, double lon, double r0, double r1, int c) {
  double sum = 0;
  int n = 0;
  for (int64_t y = 0; y < s.height; ++y)
    for (int64_t x = 0; x < s.width; ++x) {
      const double d = great_circle_km(lat, lon, grid_lat(s.height, y), grid_lon(s.width, x));
      if (d >= r0 && d <= r1) sum += s.at(y, x, c), ++n;
    }
  REQUIRE(n > 0);
  return sum / n;
}

struct Grid {
  int64_t h, w;
};
const Grid k_grids[] = {{48, 72}, {96, 144}};
const Grid k_range_grids[] = {{48, 72}, {96, 144}, {384, 576}};

}  // namespace

TEST_CASE("climate generator: same seed and index give identical samples, others differ", "[climate]") {
  const ClimateSample a = generate_climate_sample(48, 72, 7, 3);
  const ClimateSample b = generate_climate_sample(48, 72, 7, 3);
  REQUIRE(a.hwc.size() == size_t{48 * 72 * 16});
  CHECK(a.hwc == b.hwc);  // bit for bit
  CHECK(a.cyclones.size() == b.cyclones.size());
  CHECK(generate_climate_sample(48, 72, 8, 3).hwc != a.hwc);
  CHECK(generate_climate_sample(48, 72, 7, 4).hwc != a.hwc);
  for (const float v : a.hwc) REQUIRE(std::isfinite(v));
  CHECK_THROWS_WITH(generate_climate_sample(8, 72, 1, 0), Contains("below the minimum"));
}

TEST_CASE("climate generator: every channel stays within plausible physical ranges", "[climate]") {
  struct Range {
    int c;
    double lo, hi;
  };
  const Range ranges[] = {{k_tmq, 0, 100},         {k_u850, -100, 100},      {k_v850, -100, 100},
                          {k_ubot, -100, 100},      {k_vbot, -100, 100},      {k_qrefht, 0, 0.04},
                          {k_ps, 50000, 108000},    {k_psl, 88000, 108000},   {k_t200, 190, 250},
                          {k_t500, 215, 290},       {k_prect, 0, 1e-3},       {k_ts, 200, 330},
                          {k_trefht, 200, 330},     {k_z1000, -1200, 600},    {k_z200, 10000, 13500},
                          {k_zbot, 20, 120}};
  for (const Grid g : k_range_grids)
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const ClimateSample s = generate_climate_sample(g.h, g.w, seed, 0);
      for (const Range& r : ranges) {
        double lo = INFINITY, hi = -INFINITY;
        for (int64_t p = 0; p < g.h * g.w; ++p) {
          lo = std::min<double>(lo, s.hwc[static_cast<size_t>(p * 16 + r.c)]);
          hi = std::max<double>(hi, s.hwc[static_cast<size_t>(p * 16 + r.c)]);
        }
        INFO("grid " << g.h << "x" << g.w << " seed " << seed << " channel " << climate_channel_names()[r.c]);
        CHECK(lo >= r.lo);
        CHECK(hi <= r.hi);
        CHECK(hi > lo);  // not a constant field
      }
      // The tropics are warmer and wetter than the poles.
      CHECK(s.at(g.h / 2, 0, k_ts) > s.at(0, 0, k_ts) + 20);
      CHECK(s.at(g.h / 2, 0, k_tmq) > s.at(g.h - 1, 0, k_tmq));
    }
}

TEST_CASE("climate generator: cyclones have a pressure minimum, cyclonic winds and a warm, wet core", "[climate]") {
  int checked = 0, north = 0, south = 0;
  for (const Grid g : k_grids)
    for (uint64_t seed = 1; seed <= 4; ++seed)
      for (int64_t index = 0; index < 2; ++index) {
        const ClimateSample s = generate_climate_sample(g.h, g.w, seed, index);
        CHECK(!s.cyclones.empty());
        for (const PlacedCyclone& c : s.cyclones) {
          INFO("grid " << g.h << "x" << g.w << " seed " << seed << " sample " << index << " cyclone at " << c.lat
                       << ", " << c.lon);
          CHECK(std::abs(c.lat) >= 6);
          CHECK(std::abs(c.lat) <= 32);
          CHECK(is_local_min(s, c.row, c.col, k_psl));
          CHECK(is_local_min(s, c.row, c.col, k_ps));
          const double zeta = vorticity_850(s, c.row, c.col);
          if (c.lat > 0) CHECK(zeta > 0);  // counter-clockwise in the north
          else CHECK(zeta < 0);            // clockwise in the south
          (c.lat > 0 ? north : south)++;
          // Warm core aloft: warmer at the centre than 500+ km away.
          const double r0 = 1000, r1 = 2000;
          CHECK(s.at(c.row, c.col, k_t200) > ring_mean(s, c.lat, c.lon, r0, r1, k_t200) + 1.0);
          CHECK(s.at(c.row, c.col, k_t500) > ring_mean(s, c.lat, c.lon, r0, r1, k_t500) + 0.5);
          CHECK(s.at(c.row, c.col, k_tmq) > ring_mean(s, c.lat, c.lon, r0, r1, k_tmq) + 5);
          CHECK(s.at(c.row, c.col, k_qrefht) > ring_mean(s, c.lat, c.lon, r0, r1, k_qrefht));
          CHECK(is_local_max(s, c.row, c.col, k_prect));
          ++checked;
        }
      }
  CHECK(checked >= 16);
  CHECK(north > 0);
  CHECK(south > 0);
}

TEST_CASE("climate generator: atmospheric rivers are long moist filaments reaching poleward", "[climate]") {
  int checked = 0;
  for (const Grid g : k_grids)
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const ClimateSample s = generate_climate_sample(g.h, g.w, seed, 0);
      CHECK(!s.rivers.empty());
      const double cell_km = 180.0 / g.h * 111.19;
      for (const PlacedRiver& r : s.rivers) {
        INFO("grid " << g.h << "x" << g.w << " seed " << seed << " river from " << r.lat0 << ", " << r.lon0 << " to "
                     << r.lat1 << ", " << r.lon1);
        CHECK(r.length_km >= 2000);
        CHECK(r.half_width_km <= std::max(300.0, cell_km));
        const auto axis = river_axis(r, 25.0);
        double lat_lo = 90, lat_hi = -90;
        for (int64_t y = 0; y < g.h; ++y)
          for (int64_t x = 0; x < g.w; ++x) {
            const double lat = grid_lat(g.h, y), lon = grid_lon(g.w, x);
            double d = INFINITY;
            for (const auto& [alat, alon] : axis) d = std::min(d, great_circle_km(lat, lon, alat, alon));
            if (d <= std::max(r.half_width_km, 0.75 * cell_km) && s.at(y, x, k_tmq) >= 20) {
              lat_lo = std::min(lat_lo, lat);
              lat_hi = std::max(lat_hi, lat);
            }
          }
        CHECK(lat_hi - lat_lo >= 15);
        // It reaches the mid-latitudes, where the background holds well under 20 kg/m^2.
        CHECK(std::max(std::abs(lat_lo), std::abs(lat_hi)) >= 40);
        ++checked;
      }
    }
  CHECK(checked >= 8);
}

TEST_CASE("data climate writes DeepCAM files that open_deepcam and data inspect read", "[climate]") {
  squall::test::TempDir d("squall-climate");
  const std::string out = d.file("climate");
  const auto gen = squall::test::run_command(squall::test::squall_bin() + " data climate --out " + out +
                                             " --samples 3 --height 48 --width 72 --seed 5");
  INFO(gen.out << gen.err);
  REQUIRE(gen.exit_code == 0);
  CHECK(std::filesystem::exists(out + "/stats.h5"));
  CHECK(std::filesystem::exists(out + "/data-000002.h5"));

  auto raw =
      squall::formats::open_deepcam(out, squall::formats::OpenOptions{false, squall::data::NormalizationKind::zscore});
  REQUIRE(raw->size() == 3);
  CHECK(raw->info().sample == squall::nn::Shape(1, 16, 48, 72));
  const int64_t plane = 48 * 72;
  std::vector<float> image(static_cast<size_t>(16 * plane));
  std::vector<int32_t> labels(static_cast<size_t>(plane), 7);
  const int64_t index = 2;
  raw->read(std::span<const int64_t>(&index, 1), image.data(), labels.data());
  const ClimateSample s = generate_climate_sample(48, 72, 5, 2);
  for (int c = 0; c < 16; ++c)
    for (int64_t p = 0; p < plane; p += 97)
      REQUIRE(image[static_cast<size_t>(c * plane + p)] == s.hwc[static_cast<size_t>(p * 16 + c)]);
  CHECK(std::all_of(labels.begin(), labels.end(), [](int32_t l) { return l == 0; }));

  // stats.h5 is what the normalising reader needs; its statistics match the files.
  const squall::formats::ChannelStats st = squall::formats::read_deepcam_stats(out + "/stats.h5");
  REQUIRE(st.mean.size() == 16);
  CHECK(st.mean[k_psl] > 99000);
  CHECK(st.mean[k_psl] < 103000);
  CHECK(st.std[k_ts] > 5);
  CHECK(st.min[k_prect] >= 0);
  auto normalised = squall::formats::open_deepcam(out, squall::formats::OpenOptions{});
  CHECK(normalised->size() == 3);

  const auto ins = squall::test::run_command(squall::test::squall_bin() + " data inspect --json " + out);
  INFO(ins.out << ins.err);
  REQUIRE(ins.exit_code == 0);
  const auto j = nlohmann::json::parse(ins.out);
  CHECK(j["format"] == "deepcam");
  CHECK(j["samples"] == 3);
  CHECK(j["errors"].empty());
  for (int c = 0; c < 16; ++c)
    CHECK(j["statistics"]["stored"]["mean"][c].get<double>() ==
          Approx(j["statistics"]["measured"]["mean"][c].get<double>()).epsilon(1e-4));
}

TEST_CASE("data climate gives the same files and statistics on 1 and 3 ranks", "[climate]") {
  squall::test::TempDir d("squall-climate-mpi");
  const std::string one = d.file("one"), three = d.file("three");
  const std::string args = " data climate --samples 4 --height 16 --width 24 --seed 9 --out ";
  const auto a = squall::test::run_command(squall::test::squall_bin() + args + one);
  INFO(a.out << a.err);
  REQUIRE(a.exit_code == 0);
  const auto b = squall::test::run_command(squall::test::mpiexec(3) + " " + squall::test::squall_bin() + args + three);
  INFO(b.out << b.err);
  REQUIRE(b.exit_code == 0);
  auto sa = squall::formats::open_deepcam(one, squall::formats::OpenOptions{});
  auto sb = squall::formats::open_deepcam(three, squall::formats::OpenOptions{});
  REQUIRE(sa->size() == 4);
  REQUIRE(sb->size() == 4);
  const size_t n = static_cast<size_t>(16 * 16 * 24);
  std::vector<float> ia(n), ib(n);
  std::vector<int32_t> la(16 * 24), lb(16 * 24);
  for (int64_t i = 0; i < 4; ++i) {
    sa->read(std::span<const int64_t>(&i, 1), ia.data(), la.data());
    sb->read(std::span<const int64_t>(&i, 1), ib.data(), lb.data());
    CHECK(ia == ib);  // normalised by each run's stats.h5: equal only if those are equal too
  }
  const auto st1 = squall::formats::read_deepcam_stats(one + "/stats.h5");
  const auto st3 = squall::formats::read_deepcam_stats(three + "/stats.h5");
  CHECK(st1.mean == st3.mean);
  CHECK(st1.std == st3.std);
  CHECK(st1.min == st3.min);
  CHECK(st1.max == st3.max);
}

TEST_CASE("data climate --layout shards writes shards equal to the DeepCAM files, on 1 and 2 ranks", "[climate]") {
  squall::test::TempDir d("squall-climate-shards");
  const std::string files = d.file("files"), one = d.file("one"), two = d.file("two");
  const std::string args = " data climate --samples 5 --height 16 --width 24 --seed 4 --out ";
  for (const std::string& cmd :
       {squall::test::squall_bin() + args + files, squall::test::squall_bin() + args + one + " --layout shards --shards 3",
        squall::test::mpiexec(2) + " " + squall::test::squall_bin() + args + two + " --layout shards --shards 3"}) {
    const auto r = squall::test::run_command(cmd);
    INFO(cmd << ": " << r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
  CHECK(std::filesystem::exists(one + "/train-00002-of-00003.h5"));
  const squall::formats::OpenOptions raw{false, squall::data::NormalizationKind::zscore};
  auto ref = squall::formats::open_deepcam(files, raw);
  auto sa = squall::formats::open_shards(one, "train", raw);
  auto sb = squall::formats::open_shards(two, "train", raw);
  REQUIRE(sa->size() == 5);
  REQUIRE(sb->size() == 5);
  CHECK(sa->info().per_pixel_labels);
  CHECK(sa->info().classes == 3);
  const size_t n = static_cast<size_t>(16 * 16 * 24);
  std::vector<float> ir(n), ia(n), ib(n);
  std::vector<int32_t> lr(16 * 24), la(16 * 24), lb(16 * 24);
  for (int64_t i = 0; i < 5; ++i) {
    ref->read(std::span<const int64_t>(&i, 1), ir.data(), lr.data());
    sa->read(std::span<const int64_t>(&i, 1), ia.data(), la.data());
    sb->read(std::span<const int64_t>(&i, 1), ib.data(), lb.data());
    CHECK(ia == ir);
    CHECK(ib == ir);
    CHECK(la == lr);
  }
  // Every shard carries the statistics that stats.h5 holds for the same samples.
  const squall::formats::ChannelStats st = squall::formats::read_deepcam_stats(files + "/stats.h5");
  for (const std::string& dir : {one, two})
    for (const std::string& shard : squall::formats::list_shards(dir, "train")) {
      const squall::formats::ShardFileInfo info = squall::formats::read_shard_info(shard);
      CHECK(info.meta.mean == st.mean);
      CHECK(info.meta.min == st.min);
      CHECK(info.meta.max == st.max);
      CHECK(info.meta.channel_names == climate_channel_names());
    }
}

TEST_CASE("data climate rejects bad flags naming the flag", "[climate]") {
  squall::test::TempDir d("squall-climate-flags");
  const std::string base = squall::test::squall_bin() + " data climate --out " + d.file("x");
  struct Case {
    std::string flags, expect;
  };
  for (const Case& c : {Case{" --height 8", "--height"}, Case{" --width 0", "--width"}, Case{" --samples 0", "--samples"},
                        Case{" --layout zarr", "--layout"}, Case{" --layout shards --shards 20", "--shards"},
                        Case{" --layout shards --split a/b", "--split"}}) {
    const auto r = squall::test::run_command(base + c.flags);
    INFO(c.flags << ": " << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(c.expect));
  }
  // A folder with samples of a larger run is refused rather than mixed.
  REQUIRE(squall::test::run_command(base + " --samples 3 --height 16 --width 16").exit_code == 0);
  const auto r = squall::test::run_command(base + " --samples 2 --height 16 --width 16");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("data-000002.h5"));
}
