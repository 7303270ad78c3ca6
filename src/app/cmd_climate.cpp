// `squall data climate`: synthetic CAM5-like climate samples (src/data/climate_gen.hpp) in
// DeepCAM's layout, one data-*.h5 per sample plus stats.h5 (docs/data.md). Under mpirun each
// rank generates and writes a contiguous share of the samples; rank 0 writes stats.h5 from
// per-sample sums that every rank contributes, added in sample order, so files and
// statistics are the same for any number of ranks.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/dataset.hpp"
#include "io/deepcam_writer.hpp"
#include "mpi/comm.hpp"
#include "src/app/cli.hpp"
#include "src/core/error.hpp"
#include "src/data/climate_gen.hpp"

namespace squall::app {
namespace {

namespace fs = std::filesystem;
constexpr int k_c = data::k_climate_channels;

struct ClimateArgs {
  std::string out;
  int64_t samples = 16;
  int64_t height = 96;
  int64_t width = 144;
  int64_t seed = 1;
  std::string layout = "deepcam";
};

void validate(const ClimateArgs& a) {
  if (a.samples < 1) throw UsageError("--samples must be at least 1, got " + std::to_string(a.samples));
  if (a.height < data::k_climate_min_height)
    throw UsageError("--height must be at least " + std::to_string(data::k_climate_min_height) + ", got " +
                     std::to_string(a.height));
  if (a.width < data::k_climate_min_width)
    throw UsageError("--width must be at least " + std::to_string(data::k_climate_min_width) + ", got " +
                     std::to_string(a.width));
  if (a.height * a.width > (int64_t{1} << 26))
    throw UsageError("--height x --width is " + std::to_string(a.height * a.width) + " cells, more than 2^26");
  if (a.seed < 0) throw UsageError("--seed must not be negative, got " + std::to_string(a.seed));
  if (a.layout == "shards")
    throw UsageError("--layout shards is not available yet; write --layout deepcam and convert the folder with "
                     "`squall data deepcam --from DIR --out SHARDS`");
  if (a.layout != "deepcam") throw UsageError("--layout must be deepcam or shards, got '" + a.layout + "'");
}

// "data-000042.h5": zero-padded so that name order is sample order.
std::string sample_name(int64_t index, int64_t samples) {
  const int digits = std::max(6, static_cast<int>(std::to_string(samples - 1).size()));
  char name[64];
  std::snprintf(name, sizeof name, "data-%0*lld.h5", digits, static_cast<long long>(index));
  return name;
}

// Rank 0's check of the output folder: created, and no data-*.h5 of another run that would
// mix with ours. Returns "" when fine, else the message.
std::string prepare_out(const ClimateArgs& a) {
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec || !fs::is_directory(a.out)) return a.out + ": cannot create output folder: " + ec.message();
  std::set<std::string> ours;
  for (int64_t i = 0; i < a.samples; ++i) ours.insert(sample_name(i, a.samples));
  for (const std::string& f : io::list_deepcam_files(a.out))
    if (!ours.count(fs::path(f).filename().string()))
      return "--out " + a.out + " already holds " + fs::path(f).filename().string() +
             ", a sample this run would not overwrite; use an empty folder";
  return "";
}

// Per-sample statistics, one row of k_c per sample, filled by the rank that made it.
struct SampleSums {
  std::vector<double> sum, sqsum, max, neg_min;
  explicit SampleSums(int64_t samples)
      : sum(static_cast<size_t>(samples * k_c), 0.0), sqsum(sum.size(), 0.0),
        max(sum.size(), -std::numeric_limits<double>::infinity()), neg_min(max) {}
  void add(int64_t index, const std::vector<float>& hwc) {
    const size_t row = static_cast<size_t>(index * k_c);
    for (size_t p = 0; p < hwc.size(); p += k_c)
      for (size_t c = 0; c < static_cast<size_t>(k_c); ++c) {
        const double v = hwc[p + c];
        sum[row + c] += v;
        sqsum[row + c] += v * v;
        max[row + c] = std::max(max[row + c], v);
        neg_min[row + c] = std::max(neg_min[row + c], -v);
      }
  }
};

int run_climate(const ClimateArgs& a) {
  validate(a);
  const mpi::Communicator world = mpi::Communicator::world();
  const int rank = world.rank(), size = world.size();
  const std::string problem = world.broadcast_string(rank == 0 ? prepare_out(a) : std::string(), 0);
  if (!problem.empty()) throw UsageError(problem);

  const int64_t begin = a.samples * rank / size, end = a.samples * (rank + 1) / size;
  std::vector<double> lat(static_cast<size_t>(a.height)), lon(static_cast<size_t>(a.width));
  for (int64_t y = 0; y < a.height; ++y) lat[static_cast<size_t>(y)] = data::grid_lat(a.height, y);
  for (int64_t x = 0; x < a.width; ++x) lon[static_cast<size_t>(x)] = data::grid_lon(a.width, x);

  SampleSums sums(a.samples);
  int64_t cyclones = 0, rivers = 0;
  std::string failure;
  try {
    for (int64_t i = begin; i < end; ++i) {
      const data::ClimateSample s = data::generate_climate_sample(a.height, a.width, static_cast<uint64_t>(a.seed), i);
      const std::string path = (fs::path(a.out) / sample_name(i, a.samples)).string();
      io::write_deepcam_file(path, s.hwc.data(), a.height, a.width, k_c, nullptr, lat, lon);
      sums.add(i, s.hwc);
      cyclones += static_cast<int64_t>(s.cyclones.size());
      rivers += static_cast<int64_t>(s.rivers.size());
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // Every rank reaches the collectives whatever happened above, so nobody waits forever.
  const int64_t failed = world.allreduce_sum(failure.empty() ? int64_t{0} : int64_t{1});
  if (failed) {
    const std::vector<std::string> all = world.gather_strings(failure, 0);
    if (rank != 0) return 1;
    for (size_t r = 0; r < all.size(); ++r)
      if (!all[r].empty()) throw Error("data climate failed on rank " + std::to_string(r) + ": " + all[r]);
    return 1;
  }
  // Each entry has one contributor (zeros, or -inf for the extremes, elsewhere): the sums
  // are exact, and the per-channel totals below are added in sample order on rank 0.
  world.allreduce_sum(sums.sum);
  world.allreduce_sum(sums.sqsum);
  world.allreduce_max(sums.max);
  world.allreduce_max(sums.neg_min);
  cyclones = world.allreduce_sum(cyclones);
  rivers = world.allreduce_sum(rivers);
  if (rank != 0) return 0;

  io::DeepcamStatsOut stats;
  const double count = static_cast<double>(a.samples * a.height * a.width);
  for (size_t c = 0; c < static_cast<size_t>(k_c); ++c) {
    double sum = 0, sqsum = 0, max = -INFINITY, neg_min = -INFINITY;
    for (int64_t i = 0; i < a.samples; ++i) {
      const size_t at = static_cast<size_t>(i * k_c) + c;
      sum += sums.sum[at];
      sqsum += sums.sqsum[at];
      max = std::max(max, sums.max[at]);
      neg_min = std::max(neg_min, sums.neg_min[at]);
    }
    stats.count.push_back(count);
    stats.mean.push_back(sum / count);
    stats.sqmean.push_back(sqsum / count);
    stats.minval.push_back(-neg_min);
    stats.maxval.push_back(max);
  }
  io::write_deepcam_stats((fs::path(a.out) / "stats.h5").string(), stats);
  std::cout << "wrote " << a.samples << " climate sample(s) of " << a.height << "x" << a.width << "x" << k_c
            << " (seed " << a.seed << ", " << cyclones << " tropical cyclones, " << rivers
            << " atmospheric rivers; labels all 0, see `squall data label`) and stats.h5 to " << a.out << "\n";
  return 0;
}

}  // namespace

void add_climate_command(CLI::App& data, Context&, Actions& actions) {
  CLI::App* sub = data.add_subcommand(
      "climate", "Generate synthetic CAM5-like climate samples in DeepCAM's layout (run under mpirun to split the work)");
  auto args = std::make_shared<ClimateArgs>();
  sub->add_option("--out", args->out, "Output folder for data-*.h5 and stats.h5")->required();
  sub->add_option("--samples", args->samples, "Number of samples (files)")->capture_default_str();
  sub->add_option("--height", args->height, "Grid rows (latitudes), at least 16")->capture_default_str();
  sub->add_option("--width", args->width, "Grid columns (longitudes), at least 16")->capture_default_str();
  sub->add_option("--seed", args->seed, "Seed: the same seed gives the same samples")->capture_default_str();
  sub->add_option("--layout", args->layout, "deepcam (one data-*.h5 per sample) or shards (not available yet)")
      ->capture_default_str();
  actions[sub] = [args] { return run_climate(*args); };
}

}  // namespace squall::app
