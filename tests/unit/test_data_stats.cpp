// `squall data stats` (docs/data.md, "Statistics"): the moments it accumulates, the stats.h5 it
// writes (DeepCAM's layout plus attributes), and what training does with it: normalises with it,
// refuses one that names other channels, and says how to make one when there is none.
// The statistics are checked against tests/support/stats_data.hpp's long double sums.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/formats/dataset.hpp"
#include "io/formats/deepcam_file.hpp"
#include "io/formats/h5_util.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/stats_file.hpp"
#include "io/input/open_dataset.hpp"
#include "src/config/config.hpp"
#include "src/config/setup.hpp"
#include "src/core/error.hpp"
#include "tests/support/process.hpp"
#include "tests/support/stats_data.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
namespace formats = squall::formats;
namespace sd = squall::test::stats_data;
using nlohmann::json;
using sd::read_bytes;
using sd::stats_dataset;
using squall::test::run_command;
using squall::test::squall_bin;

// The stored file against the reference. Tolerances: squall sums in double (two passes per
// sample, Chan's merge across samples), the reference in long double in another order. A double
// sum of n values errs by at most n·eps (eps = 1.1e-16) of the magnitudes summed: ~1e-13 for
// the few hundred values a channel has here. So the mean is held to 1e-12 of |mean| + spread
// (PS: 1e5 Pa with a spread of 57 Pa) and the variance, whose deviations are formed after the
// mean is known, to 1e-12 of itself: room for rounding, none for a wrong formula (float32
// sqmean - mean^2 would lose a fifth of PS's variance here). min, max and count are exact.
void check_against(const std::string& path, const sd::Reference& ref) {
  const std::vector<double> count = stats_dataset(path, "count"), mean = stats_dataset(path, "mean"),
                            sqmean = stats_dataset(path, "sqmean"), minval = stats_dataset(path, "minval"),
                            maxval = stats_dataset(path, "maxval");
  REQUIRE(mean.size() == static_cast<size_t>(sd::k_channels));
  for (size_t c = 0; c < mean.size(); ++c) {
    INFO("channel " << c);
    CHECK(count[c] == ref.count[c]);
    CHECK(minval[c] == ref.min[c]);
    CHECK(maxval[c] == ref.max[c]);
    const double scale = std::abs(ref.mean[c]) + std::sqrt(ref.var[c]);
    CHECK(std::abs(mean[c] - ref.mean[c]) <= 1e-12 * scale);
    // sqmean - mean^2 in double, as training forms it: its error is ~1e-16 of sqmean (1e10 for
    // PS), ~1e-9 of PS's variance (3e3).
    const double var = sqmean[c] - mean[c] * mean[c];
    CHECK(std::abs(var - ref.var[c]) <= 1e-8 * ref.var[c]);
  }
  // What training reads (float32 mean and std): within float rounding of the reference.
  const formats::ChannelStats s = formats::read_deepcam_stats(path);
  for (size_t c = 0; c < s.mean.size(); ++c) {
    INFO("channel " << c);
    CHECK(s.mean[c] == Approx(ref.mean[c]).epsilon(1e-7));
    CHECK(s.std[c] == Approx(std::sqrt(ref.var[c])).epsilon(1e-6));
    CHECK(s.min[c] == static_cast<float>(ref.min[c]));
    CHECK(s.max[c] == static_cast<float>(ref.max[c]));
  }
}

squall::test::ProcessResult stats_command(const std::string& args) {
  return run_command(squall_bin() + " data stats " + args);
}

std::string thrown_by(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("ChannelMoments: sample by sample, merged in blocks, agree with long double sums", "[stats]") {
  const int64_t samples = 9, h = 5, w = 7, plane = h * w;
  std::vector<std::vector<float>> data;
  for (int64_t s = 0; s < samples; ++s) {
    std::vector<float> chw(static_cast<size_t>(sd::k_channels * plane));
    for (int64_t c = 0; c < sd::k_channels; ++c)
      for (int64_t p = 0; p < plane; ++p) chw[static_cast<size_t>(c * plane + p)] = sd::value(c, s, p / w, p % w);
    data.push_back(chw);
  }
  formats::ChannelMoments one(sd::k_channels);
  for (const auto& chw : data) one.add_sample(chw.data(), plane);
  // Blocks of 4, 0, 3 and 2 samples, as ranks would hold them, merged in order.
  std::vector<formats::ChannelMoments> blocks;
  const int64_t bounds[] = {0, 4, 4, 7, 9};
  for (int b = 0; b < 4; ++b) {
    formats::ChannelMoments m(sd::k_channels);
    for (int64_t s = bounds[b]; s < bounds[b + 1]; ++s) m.add_sample(data[static_cast<size_t>(s)].data(), plane);
    blocks.push_back(formats::ChannelMoments::decode(m.encode()));  // through the bytes rank 0 receives
  }
  formats::ChannelMoments merged(sd::k_channels);
  for (const auto& b : blocks) merged.merge(b);

  const sd::Reference ref = sd::reference(sd::sample_range(samples));
  CHECK(one.samples() == samples);
  CHECK(merged.samples() == samples);
  for (int64_t c = 0; c < sd::k_channels; ++c) {
    INFO("channel " << c);
    const size_t i = static_cast<size_t>(c);
    for (const formats::ChannelMoments* m : {&one, &merged}) {
      CHECK(m->channel(c).count == samples * plane);
      CHECK(m->channel(c).min == ref.min[i]);
      CHECK(m->channel(c).max == ref.max[i]);
      // See check_against for the tolerances.
      CHECK(std::abs(m->channel(c).mean - ref.mean[i]) <= 1e-12 * (std::abs(ref.mean[i]) + std::sqrt(ref.var[i])));
      CHECK(std::abs(m->variance(c) - ref.var[i]) <= 1e-12 * ref.var[i]);
    }
  }
  const std::string bytes = merged.encode();
  CHECK(formats::ChannelMoments::decode(bytes).encode() == bytes);
  CHECK_THROWS_WITH(formats::ChannelMoments::decode(bytes.substr(0, bytes.size() - 3)), Catch::Contains("truncated"));
  CHECK_THROWS_AS(merged.merge(formats::ChannelMoments(3)), squall::Error);
}

TEST_CASE("data stats writes DeepCAM's stats.h5 of a netCDF folder, and training normalises with it", "[stats]") {
  squall::test::TempDir d("squall-stats-nc");
  const std::string dir = d.path.string();
  sd::NcFile spec;
  spec.psl_name = "slp";  // read through data.netcdf_variables, as training would
  sd::write_nc_folder(dir, 3, 4, spec);

  // Without stats.h5, training stops and says how to make one or do without.
  squall::config::Config cfg = squall::config::parse_config(
      "[data]\ntrain = \"" + dir + "\"\nnetcdf_variables = \"PSL=slp\"\n", "test.toml");
  const std::string missing = thrown_by([&] { squall::config::open_data(cfg.data, dir, "train", nullptr, false); });
  CHECK_THAT(missing, Catch::Contains("no stats.h5") && Catch::Contains("`squall data stats --in " + dir + "`") &&
                          Catch::Contains("data.normalize = false"));

  const auto r = stats_command("--in " + dir + " --set data.netcdf_variables=PSL=slp --json");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string path = dir + "/stats.h5";
  REQUIRE(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  check_against(path, sd::reference(sd::sample_range(12)));
  const json doc = json::parse(r.out);
  CHECK(doc.at("out") == path);
  CHECK(doc.at("samples") == 12);
  CHECK(doc.at("channels").size() == 16);
  CHECK(doc.at("channels")[7].at("name") == "PSL");

  const formats::StatsProvenance p = formats::read_stats_provenance(path);
  CHECK(p.channel_names == formats::deepcam_channel_names());
  CHECK(p.channel_units.size() == 16);
  CHECK(p.samples == 12);
  CHECK(p.skipped_samples == 0);
  CHECK(p.source == dir);
  CHECK_FALSE(p.squall_version.empty());
  CHECK(p.created_by == "squall data stats");

  // Training's way in, normalisation on: the values come out as (raw - mean) / std.
  auto source = squall::config::open_data(cfg.data, dir, "train", nullptr, false);
  CHECK(source->normalization().source == path);
  const formats::ChannelStats s = formats::read_deepcam_stats(path);
  std::vector<float> image(static_cast<size_t>(16 * 35));
  std::vector<int32_t> labels(35);
  const int64_t index = 5;
  source->read(std::span<const int64_t>(&index, 1), image.data(), labels.data());
  for (const int64_t c : {0, 7, 15})
    CHECK(image[static_cast<size_t>(c * 35 + 9)] ==
          Approx((sd::value(c, index, 1, 2) - s.mean[static_cast<size_t>(c)]) / s.std[static_cast<size_t>(c)]).margin(1e-5));
}

TEST_CASE("data stats refuses to replace a statistics file unless --overwrite", "[stats]") {
  squall::test::TempDir d("squall-stats-overwrite");
  const std::string dir = d.path.string();
  sd::write_nc_folder(dir, 1, 2);
  const std::string out = d.file("elsewhere.h5");
  REQUIRE(stats_command("--in " + dir + " --out " + out).exit_code == 0);
  const std::string before = read_bytes(out);

  sd::write_nc_folder(dir, 2, 2);  // more data: a new file would differ
  const auto again = stats_command("--in " + dir + " --out " + out);
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.err, Catch::Contains(out) && Catch::Contains("already exists") && Catch::Contains("--overwrite"));
  CHECK(read_bytes(out) == before);

  const auto replaced = stats_command("--in " + dir + " --out " + out + " --overwrite");
  INFO(replaced.err);
  CHECK(replaced.exit_code == 0);
  CHECK(formats::read_stats_provenance(out).samples == 4);
  check_against(out, sd::reference(sd::sample_range(4)));
}

TEST_CASE("a fill value stops data stats naming the file and time step, and skip_bad_samples leaves the sample out",
          "[stats]") {
  squall::test::TempDir d("squall-stats-bad");
  const std::string dir = d.path.string();
  sd::write_nc_folder(dir, 1, 3);
  sd::NcFile bad;
  bad.first_sample = 3;
  bad.steps = 3;
  bad.fill_step = 1;  // sample 4
  sd::write_nc(dir + "/part-1.nc", bad);

  const auto r = stats_command("--in " + dir);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains(dir + "/part-1.nc") && Catch::Contains("time step 1") &&
                        Catch::Contains("'TMQ'") && Catch::Contains("data.skip_bad_samples"));
  CHECK_FALSE(fs::exists(dir + "/stats.h5"));
  CHECK_FALSE(fs::exists(dir + "/stats.h5.tmp"));

  const auto skipped = stats_command("--in " + dir + " --set data.skip_bad_samples=true --json");
  INFO(skipped.err);
  REQUIRE(skipped.exit_code == 0);
  CHECK_THAT(skipped.err, Catch::Contains("1 bad sample(s) left out") && Catch::Contains("part-1.nc"));
  const json doc = json::parse(skipped.out);
  CHECK(doc.at("samples") == 5);
  CHECK(doc.at("skipped_samples") == 1);
  const formats::StatsProvenance p = formats::read_stats_provenance(dir + "/stats.h5");
  CHECK(p.samples == 5);
  CHECK(p.skipped_samples == 1);
  check_against(dir + "/stats.h5", sd::reference(sd::sample_range(6, 4)));
}

TEST_CASE("data stats of a DeepCAM folder, and DeepCAM's own stats.h5 without attributes still reads", "[stats]") {
  squall::test::TempDir d("squall-stats-deepcam");
  const std::string dir = d.path.string();
  sd::write_deepcam_folder(dir, 5);
  const std::string missing = thrown_by([&] {
    squall::input::open_dataset(dir, "train", {.normalize = true, .cache_mb = 0});
  });
  CHECK_THAT(missing, Catch::Contains("no stats.h5") && Catch::Contains("squall data stats --in " + dir) &&
                          Catch::Contains("data.normalize = false"));

  const auto r = stats_command("--in " + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("wrote " + dir + "/stats.h5") && Catch::Contains("5 sample(s)"));
  check_against(dir + "/stats.h5", sd::reference(sd::sample_range(5)));
  auto source = squall::input::open_dataset(dir, "train", {.normalize = true, .cache_mb = 0});
  CHECK(source->normalization().kind == "zscore");

  // A stats.h5 as DeepCAM's tools write it (no attributes): read as before, nothing to check.
  formats::DeepcamStatsOut old;
  for (int c = 0; c < 16; ++c) {
    old.count.push_back(175);
    old.mean.push_back(c);
    old.sqmean.push_back(c * c + 4.0);
    old.minval.push_back(-1);
    old.maxval.push_back(1);
  }
  formats::write_deepcam_stats(dir + "/stats.h5", old);
  const formats::StatsProvenance p = formats::read_stats_provenance(dir + "/stats.h5");
  CHECK(p.channel_names.empty());
  CHECK(p.samples == 0);
  CHECK(formats::read_deepcam_stats(dir + "/stats.h5").std[3] == 2.0f);
  CHECK_NOTHROW(squall::input::open_dataset(dir, "train", {.normalize = true, .cache_mb = 0}));
}

TEST_CASE("training refuses a stats.h5 that names other channels, naming both lists and the command", "[stats]") {
  squall::test::TempDir d("squall-stats-channels");
  const std::string dir = d.path.string();
  sd::write_nc_folder(dir, 1, 2);
  formats::ChannelMoments m(16);
  std::vector<float> chw(16 * 35);
  for (size_t i = 0; i < chw.size(); ++i) chw[i] = static_cast<float>(i % 17);
  m.add_sample(chw.data(), 35);
  formats::StatsProvenance p;
  p.channel_names = formats::deepcam_channel_names();
  std::swap(p.channel_names[0], p.channel_names[1]);  // U850 first: another order
  p.samples = 1;
  formats::write_stats_file(dir + "/stats.h5", m, p);

  const std::string e = thrown_by([&] {
    squall::input::open_dataset(dir, "train", {.normalize = true, .cache_mb = 0});
  });
  CHECK_THAT(e, Catch::Contains(dir + "/stats.h5") && Catch::Contains("[U850, TMQ, V850") &&
                    Catch::Contains("[TMQ, U850, V850") && Catch::Contains("squall data stats --in " + dir + " --overwrite"));
  // Raw values need no statistics, and a test set given the training set's is not checked here.
  CHECK_NOTHROW(squall::input::open_dataset(dir, "train", {.normalize = false, .cache_mb = 0}));
}

TEST_CASE("data stats refuses what it cannot compute statistics of, exit 2", "[stats]") {
  squall::test::TempDir d("squall-stats-usage");
  const auto none = stats_command("--in " + d.file("absent"));
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err, Catch::Contains(d.file("absent")));
  const auto empty = stats_command("--in " + d.path.string());
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.err, Catch::Contains("no DeepCAM files") && Catch::Contains("no netCDF files"));
  sd::write_nc_folder(d.path.string(), 1, 1);
  const auto bad_map = stats_command("--in " + d.path.string() + " --netcdf-variables NOPE=x");
  CHECK(bad_map.exit_code == 2);
  CHECK_THAT(bad_map.err, Catch::Contains("NOPE"));
}
