// `squall data climate`: synthetic CAM5-like climate samples (src/data/climate_gen.hpp) in
// DeepCAM's layout (one data-*.h5 per sample plus stats.h5) or as native shards
// (docs/data.md). Under mpirun each rank generates and writes its share of the samples (of
// the shards); statistics come from per-sample sums that every rank contributes, added in
// sample order, so files and statistics are the same for any number of ranks.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/formats/dataset.hpp"
#include "io/formats/deepcam_file.hpp"
#include "io/formats/shard.hpp"
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
  int shards = 1;               // --layout shards only
  std::string split = "train";  // --layout shards only
};

void validate(const ClimateArgs& a) {
  if (a.samples < 1) throw UsageError("--samples must be at least 1, got " + std::to_string(a.samples));
  if (a.height < data::k_climate_min_height)
    throw UsageError("--height must be at least " + std::to_string(data::k_climate_min_height) + ", got " +
                     std::to_string(a.height));
  if (a.width < data::k_climate_min_width)
    throw UsageError("--width must be at least " + std::to_string(data::k_climate_min_width) + ", got " +
                     std::to_string(a.width));
  if (a.height > (int64_t{1} << 16) || a.width > (int64_t{1} << 16) || a.height * a.width > (int64_t{1} << 26))
    throw UsageError("--height x --width is " + std::to_string(a.height * a.width) + " cells, more than 2^26");
  if (a.seed < 0) throw UsageError("--seed must not be negative, got " + std::to_string(a.seed));
  if (a.layout != "deepcam" && a.layout != "shards")
    throw UsageError("--layout must be deepcam or shards, got '" + a.layout + "'");
  if (a.shards < 1) throw UsageError("--shards must be at least 1, got " + std::to_string(a.shards));
  if (a.layout == "shards" && a.shards > a.samples)
    throw UsageError("--shards " + std::to_string(a.shards) + " is more than --samples " + std::to_string(a.samples));
  if (a.split.empty() || a.split.find_first_of("/-") != std::string::npos)
    throw UsageError("--split must be a plain name such as train or test, got '" + a.split + "'");
}

// "data-000042.h5": zero-padded so that name order is sample order.
std::string sample_name(int64_t index, int64_t samples) {
  const size_t digits = std::max<size_t>(6, std::to_string(samples - 1).size());
  const std::string number = std::to_string(index);
  return "data-" + std::string(digits - std::min(digits, number.size()), '0') + number + ".h5";
}

// The files this run writes, by name (no folder).
std::set<std::string> output_names(const ClimateArgs& a) {
  std::set<std::string> names;
  if (a.layout == "shards")
    for (int i = 0; i < a.shards; ++i) names.insert(formats::shard_name(a.split, i, a.shards));
  else
    for (int64_t i = 0; i < a.samples; ++i) names.insert(sample_name(i, a.samples));
  return names;
}

// Rank 0's check of the output folder: created, and no data-*.h5 or shards of the same
// split from another run that would mix with ours. Returns "" when fine, else the message.
std::string prepare_out(const ClimateArgs& a) {
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec || !fs::is_directory(a.out)) return a.out + ": cannot create output folder: " + ec.message();
  const std::set<std::string> ours = output_names(a);
  std::vector<std::string> present = formats::list_deepcam_files(a.out);
  for (const std::string& f : formats::list_shards(a.out, a.split)) present.push_back(f);
  for (const std::string& f : present)
    if (!ours.count(fs::path(f).filename().string()))
      return "--out " + a.out + " already holds " + fs::path(f).filename().string() +
             ", a file this run would not overwrite; use an empty folder";
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

// Per-channel totals over all samples, added in sample order (every rank gets the same).
formats::DeepcamStatsOut totals(const SampleSums& sums, const ClimateArgs& a) {
  formats::DeepcamStatsOut stats;
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
  return stats;
}

// Writes this rank's shards (samples generated again: cheaper than holding them).
void write_shards(const ClimateArgs& a, const std::vector<int>& my_shards, const formats::DeepcamStatsOut& stats) {
  formats::ShardMeta meta;
  meta.class_names = {"background", "tropical cyclone", "atmospheric river"};
  meta.channel_names = data::climate_channel_names();
  for (int c = 0; c < k_c; ++c) {
    meta.mean.push_back(static_cast<float>(stats.mean[c]));
    meta.std.push_back(static_cast<float>(std::sqrt(std::max(0.0, stats.sqmean[c] - stats.mean[c] * stats.mean[c]))));
    meta.min.push_back(static_cast<float>(stats.minval[c]));
    meta.max.push_back(static_cast<float>(stats.maxval[c]));
  }
  meta.source = "squall data climate (seed " + std::to_string(a.seed) + ", " + std::to_string(a.samples) +
                " samples; labels all 0 until `squall data label`)";
  const int64_t plane = a.height * a.width;
  std::vector<float> chw(static_cast<size_t>(plane * k_c));
  const std::vector<int32_t> labels(static_cast<size_t>(plane), 0);
  for (const int sh : my_shards) {
    formats::ShardWriter writer((fs::path(a.out) / formats::shard_name(a.split, sh, a.shards)).string(),
                           nn::Shape(1, k_c, a.height, a.width), formats::SampleType::float32, true, 0, meta);
    for (int64_t i = formats::shard_begin(a.samples, a.shards, sh);
         i < formats::shard_begin(a.samples, a.shards, sh + 1); ++i) {
      const data::ClimateSample s = data::generate_climate_sample(a.height, a.width, static_cast<uint64_t>(a.seed), i);
      for (int64_t p = 0; p < plane; ++p)
        for (int64_t c = 0; c < k_c; ++c) chw[static_cast<size_t>(c * plane + p)] = s.hwc[static_cast<size_t>(p * k_c + c)];
      writer.append(chw.data(), labels.data());
    }
    writer.close();
  }
}

int run_climate(const ClimateArgs& a) {
  validate(a);
  const mpi::Communicator world = mpi::Communicator::world();
  const int rank = world.rank(), size = world.size();
  const std::string problem = world.broadcast_string(rank == 0 ? prepare_out(a) : std::string(), 0);
  if (!problem.empty()) throw UsageError(problem);
  const bool shards = a.layout == "shards";

  // This rank's samples: a contiguous share of the files, or the samples of its shards
  // (shards rank, rank + size, ...).
  std::vector<int> my_shards;
  std::vector<int64_t> mine;
  if (shards) {
    for (int sh = rank; sh < a.shards; sh += size) {
      my_shards.push_back(sh);
      for (int64_t i = formats::shard_begin(a.samples, a.shards, sh);
           i < formats::shard_begin(a.samples, a.shards, sh + 1); ++i)
        mine.push_back(i);
    }
  } else {
    for (int64_t i = a.samples * rank / size; i < a.samples * (rank + 1) / size; ++i) mine.push_back(i);
  }
  std::vector<double> lat(static_cast<size_t>(a.height)), lon(static_cast<size_t>(a.width));
  for (int64_t y = 0; y < a.height; ++y) lat[static_cast<size_t>(y)] = data::grid_lat(a.height, y);
  for (int64_t x = 0; x < a.width; ++x) lon[static_cast<size_t>(x)] = data::grid_lon(a.width, x);

  // Pass 1: generate (and for DeepCAM's layout write) the samples, summing their statistics.
  SampleSums sums(a.samples);
  int64_t cyclones = 0, rivers = 0;
  run_share_agreed(world, "data climate", [&] {
    for (const int64_t i : mine) {
      const data::ClimateSample s = data::generate_climate_sample(a.height, a.width, static_cast<uint64_t>(a.seed), i);
      if (!shards)
        formats::write_deepcam_file((fs::path(a.out) / sample_name(i, a.samples)).string(), s.hwc.data(), a.height,
                                    a.width, k_c, nullptr, lat, lon);
      sums.add(i, s.hwc);
      cyclones += static_cast<int64_t>(s.cyclones.size());
      rivers += static_cast<int64_t>(s.rivers.size());
    }
  });
  // Each entry has one contributor (zeros, or -inf for the extremes, elsewhere), so the
  // reduction is exact and the totals do not depend on the number of ranks.
  world.allreduce_sum(sums.sum);
  world.allreduce_sum(sums.sqsum);
  world.allreduce_max(sums.max);
  world.allreduce_max(sums.neg_min);
  cyclones = world.allreduce_sum(cyclones);
  rivers = world.allreduce_sum(rivers);
  const formats::DeepcamStatsOut stats = totals(sums, a);

  // Pass 2: the statistics file, or the shards that carry the statistics in every file.
  run_share_agreed(world, "data climate", [&] {
    if (shards) write_shards(a, my_shards, stats);
    else if (rank == 0) formats::write_deepcam_stats((fs::path(a.out) / "stats.h5").string(), stats);
  });
  if (rank != 0) return 0;
  std::cout << "wrote " << a.samples << " climate sample(s) of " << a.height << "x" << a.width << "x" << k_c
            << " (seed " << a.seed << ", " << cyclones << " tropical cyclones, " << rivers << " atmospheric rivers) "
            << (shards ? "in " + std::to_string(a.shards) + " " + a.split + " shard(s)" : std::string("and stats.h5"))
            << " to " << a.out << "; labels are all 0 until `squall data label`\n";
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
  sub->add_option("--layout", args->layout, "deepcam (one data-*.h5 per sample, and stats.h5) or shards")
      ->capture_default_str();
  sub->add_option("--shards", args->shards, "Number of shards (--layout shards)")->capture_default_str();
  sub->add_option("--split", args->split, "Split name of the shards (--layout shards)")->capture_default_str();
  actions[sub] = [args] { return run_climate(*args); };
}

}  // namespace squall::app
