// `squall data fashion-mnist | deepcam | inspect | stats`: converting datasets to native shards
// (docs/formats.md), checking datasets by reading every chunk of every file, and computing the
// statistics climate data is normalised with (stats.h5, docs/data.md, "Statistics").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/formats/dataset.hpp"
#include "io/formats/inspect.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/shard.hpp"
#include "io/formats/stats_file.hpp"
#include "mpi/comm.hpp"
#include "squall/version.hpp"
#include "src/app/cli.hpp"
#include "src/config/config.hpp"
#include "src/core/clock.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "io/input/open_dataset.hpp"

namespace squall::app {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The training-set pixel statistics open_idx normalises with (io/formats/idx_source.cpp).
constexpr float k_idx_mean = 0.2860f, k_idx_std = 0.3530f;

// DeepCAM's 16 CAM5 variables, in the order of /climate/data's last axis.
const std::vector<std::string>& deepcam_channel_names() {
  static const std::vector<std::string> names = {"TMQ",  "U850", "V850", "UBOT",   "VBOT",  "QREFHT", "PS",    "PSL",
                                                 "T200", "T500", "PRECT", "TS",    "TREFHT", "Z1000", "Z200", "ZBOT"};
  return names;
}

void make_out_dir(const std::string& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) throw Error(out + ": cannot create output folder: " + ec.message());
}

// Per-channel mean, std, min and max of raw values (accumulated in double).
struct StatsAccumulator {
  std::vector<double> sum, sqsum;
  std::vector<float> min, max;
  int64_t per_channel = 0;
  explicit StatsAccumulator(int64_t c)
      : sum(static_cast<size_t>(c)), sqsum(static_cast<size_t>(c)), min(static_cast<size_t>(c), INFINITY),
        max(static_cast<size_t>(c), -INFINITY) {}
  template <typename T>
  void add(const T* sample, int64_t plane) {
    for (size_t c = 0; c < sum.size(); ++c)
      for (int64_t p = 0; p < plane; ++p) {
        const float v = static_cast<float>(sample[static_cast<int64_t>(c) * plane + p]);
        sum[c] += v;
        sqsum[c] += static_cast<double>(v) * v;
        min[c] = std::min(min[c], v);
        max[c] = std::max(max[c], v);
      }
    per_channel += plane;
  }
  void store(formats::ShardMeta& meta) const {
    meta.mean.clear();
    meta.std.clear();
    for (size_t c = 0; c < sum.size(); ++c) {
      const double m = sum[c] / static_cast<double>(per_channel);
      meta.mean.push_back(static_cast<float>(m));
      meta.std.push_back(static_cast<float>(std::sqrt(std::max(0.0, sqsum[c] / static_cast<double>(per_channel) - m * m))));
    }
    meta.min = min;
    meta.max = max;
  }
};

// ---- fashion-mnist ---------------------------------------------------------------------

struct FashionArgs {
  std::string from = input::k_debian_fashion_mnist_dir;
  std::string out;
  int shards = 1;
  int compression = 0;  // 28x28 bytes deflate to little, and reading them raw is fastest
};

// open_idx hands out normalised floats; the stored bytes come back exactly by undoing the
// normalisation and rounding (the error is ~1e-5 of one grey level).
std::vector<uint8_t> raw_pixels(const data::DataSource& source) {
  const int64_t per = source.info().sample.per_sample(), n = source.size();
  std::vector<uint8_t> out(static_cast<size_t>(n * per));
  std::vector<float> image(static_cast<size_t>(per));
  int32_t label = 0;
  for (int64_t i = 0; i < n; ++i) {
    source.read(std::span<const int64_t>(&i, 1), image.data(), &label);
    for (int64_t p = 0; p < per; ++p) {
      const float v = (image[static_cast<size_t>(p)] * k_idx_std + k_idx_mean) * 255.0f;
      const float r = std::round(v);
      if (std::fabs(v - r) > 0.05f || r < 0.0f || r > 255.0f)
        throw Error(source.info().description + ": sample " + std::to_string(i) + " does not map back to bytes");
      out[static_cast<size_t>(i * per + p)] = static_cast<uint8_t>(r);
    }
  }
  return out;
}

int run_fashion_mnist(const FashionArgs& args) {
  auto train_source = formats::open_idx(args.from, "train");
  auto test_source = formats::open_idx(args.from, "test");
  const nn::Shape sample = train_source->info().sample;
  const int64_t per = sample.per_sample();
  make_out_dir(args.out);

  formats::ShardMeta meta;
  meta.class_names = train_source->info().class_names;
  meta.channel_names = {"gray"};
  const std::vector<uint8_t> train_pixels = raw_pixels(*train_source);
  // Both splits carry the training set's statistics: the test set is normalised like the
  // data the model was trained on.
  StatsAccumulator stats(sample.c());
  for (int64_t i = 0; i < train_source->size(); ++i) stats.add(train_pixels.data() + i * per, per);
  stats.store(meta);

  for (auto* source : {train_source.get(), test_source.get()}) {
    const bool is_train = source == train_source.get();
    const std::string split = is_train ? "train" : "test";
    const std::vector<uint8_t> test_pixels = is_train ? std::vector<uint8_t>{} : raw_pixels(*source);
    const std::vector<uint8_t>& pixels = is_train ? train_pixels : test_pixels;
    const int64_t n = source->size();
    const int shards = static_cast<int>(std::min<int64_t>(args.shards, n));
    meta.source = "Fashion-MNIST " + split + " (IDX files in " + args.from + ")";
    std::vector<int32_t> labels(static_cast<size_t>(n));
    {
      std::vector<float> image(static_cast<size_t>(per));
      for (int64_t i = 0; i < n; ++i) source->read(std::span<const int64_t>(&i, 1), image.data(), &labels[static_cast<size_t>(i)]);
    }
    for (int s = 0; s < shards; ++s) {
      const std::string path = (fs::path(args.out) / formats::shard_name(split, s, shards)).string();
      formats::ShardWriter writer(path, sample, formats::SampleType::uint8, false, args.compression, meta);
      for (int64_t i = formats::shard_begin(n, shards, s); i < formats::shard_begin(n, shards, s + 1); ++i)
        writer.append(pixels.data() + i * per, &labels[static_cast<size_t>(i)]);
      writer.close();
    }
    std::cout << "wrote " << shards << " " << split << " shard(s), " << n << " samples, to " << args.out << "\n";
  }
  return 0;
}

// ---- deepcam ---------------------------------------------------------------------------

struct DeepcamArgs {
  std::string from, out, split = "train";
  int shards = 1;
  int compression = 0;
};

int run_deepcam(const DeepcamArgs& args) {
  auto source = formats::open_deepcam(args.from, formats::OpenOptions{false, data::NormalizationKind::zscore});
  const std::string stats_path = formats::find_deepcam_stats(args.from);
  if (stats_path.empty()) throw Error(args.from + ": no stats.h5 (beside the data-*.h5 files or one folder up)");
  const formats::ChannelStats stats = formats::read_deepcam_stats(stats_path);
  const nn::Shape sample = source->info().sample;
  if (static_cast<int64_t>(stats.mean.size()) != sample.c())
    throw Error(stats_path + ": statistics for " + std::to_string(stats.mean.size()) + " channels, the files have " +
                std::to_string(sample.c()));
  make_out_dir(args.out);

  formats::ShardMeta meta;
  meta.class_names = source->info().class_names;
  if (sample.c() == static_cast<int64_t>(deepcam_channel_names().size())) meta.channel_names = deepcam_channel_names();
  meta.mean = stats.mean;
  meta.std = stats.std;
  meta.min = stats.min;
  meta.max = stats.max;
  meta.source = "DeepCAM (" + args.from + ", statistics from " + stats_path + ")";

  const int64_t n = source->size(), plane = sample.h() * sample.w();
  const int shards = static_cast<int>(std::min<int64_t>(args.shards, n));
  std::vector<float> image(static_cast<size_t>(sample.per_sample()));
  std::vector<int32_t> labels(static_cast<size_t>(plane));
  for (int s = 0; s < shards; ++s) {
    const std::string path = (fs::path(args.out) / formats::shard_name(args.split, s, shards)).string();
    formats::ShardWriter writer(path, sample, formats::SampleType::float32, true, args.compression, meta);
    for (int64_t i = formats::shard_begin(n, shards, s); i < formats::shard_begin(n, shards, s + 1); ++i) {
      source->read(std::span<const int64_t>(&i, 1), image.data(), labels.data());
      writer.append(image.data(), labels.data());
    }
    writer.close();
  }
  std::cout << "wrote " << shards << " " << args.split << " shard(s), " << n << " samples, to " << args.out << "\n";
  return 0;
}

// ---- inspect ---------------------------------------------------------------------------

struct InspectArgs {
  std::vector<std::string> paths;
  bool json = false;
  std::string config;                  // --config: its data.channels, data.netcdf_variables, data.netcdf_labels
  std::vector<std::string> overrides;  // --set section.key=value
  std::string netcdf_variables;        // --netcdf-variables, over the config's
};

// The netCDF channel list inspect checks files against: the config's (defaults without one).
formats::NetcdfOptions inspect_netcdf_options(const InspectArgs& args) {
  const config::Config cfg = load_command_config(args.config, args.overrides);
  const std::string variables = args.netcdf_variables.empty() ? cfg.data.netcdf_variables : args.netcdf_variables;
  return formats::netcdf_options(cfg.data.channels, variables, cfg.data.netcdf_labels);
}

// IDX folders are opened here, where the IDX reader is linked (io/ only lists them).
void add_idx_details(const std::vector<std::string>& paths, formats::InspectReport& report) {
  for (const std::string& path : paths) {
    if (formats::detect_format(path) != formats::DatasetFormat::idx) continue;
    const std::string dir = fs::is_directory(path) ? path : fs::path(path).parent_path().string();
    for (const char* split : {"train", "test"}) {
      try {
        auto source = formats::open_idx(dir, split);
        const nn::Shape& s = source->info().sample;
        if (report.shape.empty()) {
          report.shape = {s.c(), s.h(), s.w()};
          report.dtype = "uint8";
          report.class_names = source->info().class_names;
          report.classes = source->info().classes;
        }
        report.samples += source->size();
        report.splits[split] += source->size();
      } catch (const std::exception& e) {
        report.errors.push_back(e.what());
      }
    }
  }
}

json summary_json(const formats::ChannelSummary& s) {
  return json{{"mean", s.mean}, {"std", s.std}, {"min", s.min}, {"max", s.max}};
}

json netcdf_json(const std::vector<formats::NetcdfFileInfo>& files) {
  json out = json::array();
  for (const formats::NetcdfFileInfo& f : files) {
    json dims = json::object(), vars = json::array();
    for (const auto& [name, len] : f.dims) dims[name] = len;
    for (const formats::NetcdfVariableInfo& v : f.variables)
      vars.push_back({{"name", v.name}, {"type", v.type}, {"dims", v.dims}, {"shape", v.shape}, {"units", v.units},
                      {"long_name", v.long_name}, {"coordinate", v.coordinate}});
    json channels = json::array();
    for (const formats::NetcdfChannelInfo& c : f.channels)
      channels.push_back({{"name", c.name}, {"spec", c.spec}, {"variable", c.variable}, {"level", c.level},
                          {"units", c.units}, {"target_units", c.target}, {"conversion", c.conversion},
                          {"readable", c.problem.empty()}, {"problem", c.problem}});
    out.push_back({{"file", f.path}, {"format", f.format}, {"dims", dims}, {"variables", vars}, {"time_steps", f.steps},
                   {"time_dim", f.time_dim}, {"labels", f.has_labels}, {"time_units", f.grid.time_units},
                   {"calendar", f.grid.calendar}, {"channels", channels}, {"channel_error", f.channel_error}});
  }
  return out;
}

json report_json(const formats::InspectReport& r) {
  return json{{"format", formats::k_dataset_formats.name(r.format)},
              {"netcdf", netcdf_json(r.netcdf)},
              {"files", r.files},
              {"skipped", r.skipped},
              {"samples", r.samples},
              {"time_steps", r.time_steps},
              {"splits", r.splits},
              {"shape", r.shape},
              {"dtype", r.dtype},
              {"per_pixel_labels", r.per_pixel_labels},
              {"classes", r.classes},
              {"class_names", r.class_names},
              {"channels", r.shape.empty() ? 0 : r.shape[0]},
              {"channel_names", r.channels},
              {"channel_units", r.channel_units},
              {"statistics", {{"stored", summary_json(r.stored)}, {"measured", summary_json(r.measured)}}},
              {"label_counts", r.label_counts},
              {"errors", r.errors}};
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

// One netCDF file: its variables, time steps and which channels it supplies (and how).
std::string netcdf_text(const formats::NetcdfFileInfo& f) {
  std::string out = "netCDF " + f.path + ": " + f.format + ", " + std::to_string(f.steps) + " time step" +
                    (f.steps == 1 ? "" : "s") + (f.time_dim.empty() ? "" : " (" + f.time_dim + ")");
  if (f.channel_error.empty()) out += std::string(", ") + (f.has_labels ? "with" : "without") + " labels";
  if (!f.grid.time_units.empty()) out += ", time in " + f.grid.time_units;
  if (!f.grid.calendar.empty()) out += " (" + f.grid.calendar + " calendar)";
  out += "\n  dims:";
  for (const auto& [name, len] : f.dims) out += " " + name + "=" + std::to_string(len);
  out += "\n  variables:\n";
  for (const formats::NetcdfVariableInfo& v : f.variables) {
    std::string dims, shape;
    for (size_t i = 0; i < v.dims.size(); ++i) {
      dims += (i ? ", " : "") + v.dims[i];
      shape += (i ? "x" : "") + std::to_string(v.shape[i]);
    }
    out += "    " + v.name + "(" + dims + ") " + v.type + (shape.empty() ? "" : " " + shape) + ", " +
           (v.units.empty() ? "(no units)" : v.units) + (v.long_name.empty() ? "" : ", \"" + v.long_name + "\"") +
           (v.coordinate ? " (coordinate)" : "") + "\n";
  }
  size_t readable = 0;
  for (const formats::NetcdfChannelInfo& c : f.channels) readable += c.problem.empty();
  out += "  channels: " + std::to_string(readable) + " of " + std::to_string(f.channels.size()) + " can be read\n";
  char line[64];
  for (const formats::NetcdfChannelInfo& c : f.channels) {
    std::snprintf(line, sizeof line, "    %-8s ", c.name.c_str());
    out += line;
    if (!c.problem.empty()) {
      out += "cannot: " + c.problem + "\n";
      continue;
    }
    out += c.variable + (c.level.empty() ? "" : " at " + c.level) + ", ";
    if (c.units.empty()) out += "(no units)" + (c.target.empty() ? std::string() : ", taken as " + c.target);
    else if (!c.conversion.empty()) out += c.units + " -> " + c.target + " (" + c.conversion + ")";
    else out += c.units;
    out += "\n";
  }
  return out;
}

std::string report_text(const formats::InspectReport& r) {
  std::string out = "format: " +
                    std::string(r.format == formats::DatasetFormat::none ? "(none found)"
                                                                          : formats::k_dataset_formats.name(r.format)) +
                    "\n";
  out += "files: " + std::to_string(r.files.size()) + "\n";
  for (const std::string& f : r.files) out += "  " + f + "\n";
  if (!r.skipped.empty()) {
    out += "left out: " + std::to_string(r.skipped.size()) + " mask file(s) squall predict wrote\n";
    for (const std::string& f : r.skipped) out += "  " + f + "\n";
  }
  out += "samples: " + std::to_string(r.samples);
  std::string splits;
  for (const auto& [name, n] : r.splits) splits += (splits.empty() ? "" : ", ") + name + " " + std::to_string(n);
  out += (splits.empty() ? "" : " (" + splits + ")") + std::string("\n");
  // netCDF time steps whose channels cannot be read are not samples; say how many there are.
  if (!r.netcdf.empty() && r.time_steps != r.samples)
    out += "time steps: " + std::to_string(r.time_steps) + " in the netCDF files, " +
           std::to_string(r.time_steps - r.samples) + " not read (see errors)\n";
  if (!r.shape.empty()) {
    out += "shape: [" + std::to_string(r.shape[0]) + "," + std::to_string(r.shape[1]) + "," + std::to_string(r.shape[2]) +
           "] " + r.dtype + (r.per_pixel_labels ? ", per-pixel labels" : ", one label per sample") + "\n";
    out += "classes: " + std::to_string(r.classes) + (r.class_names.empty() ? "" : " (" + join(r.class_names) + ")") + "\n";
    std::vector<std::string> named = r.channels;
    for (size_t c = 0; c < named.size() && c < r.channel_units.size(); ++c)
      if (!r.channel_units[c].empty()) named[c] += " [" + r.channel_units[c] + "]";
    out += "channels: " + std::to_string(r.shape[0]) + (named.empty() ? "" : " (" + join(named) + ")") + "\n";
  }
  char line[256];
  for (const auto& [label, s] : {std::pair{"stored", &r.stored}, {"measured", &r.measured}}) {
    if (s->mean.empty()) continue;
    out += std::string("statistics (") + label + "):\n";
    for (size_t c = 0; c < s->mean.size(); ++c) {
      std::snprintf(line, sizeof line, "  channel %-3zu %-8s mean %-12.6g std %-12.6g min %-12.6g max %-12.6g\n", c,
                    c < r.channels.size() ? r.channels[c].c_str() : "", s->mean[c],
                    c < s->std.size() ? s->std[c] : NAN, c < s->min.size() ? s->min[c] : NAN,
                    c < s->max.size() ? s->max[c] : NAN);
      out += line;
    }
  }
  for (const formats::NetcdfFileInfo& f : r.netcdf) out += netcdf_text(f);
  if (!r.label_counts.empty()) {
    out += std::string("labels (") + (r.per_pixel_labels ? "pixels" : "samples") + " per class):";
    for (int64_t n : r.label_counts) out += " " + std::to_string(n);
    out += "\n";
  }
  if (r.errors.empty()) {
    out += "errors: none (every sample of every file read)\n";
  } else {
    out += "errors: " + std::to_string(r.errors.size()) + "\n";
    for (const std::string& e : r.errors) out += "  " + e + "\n";
  }
  return out;
}

int run_inspect(const InspectArgs& args) {
  formats::InspectReport report = formats::inspect_paths(args.paths, inspect_netcdf_options(args));
  add_idx_details(args.paths, report);
  print_result(args.json, report_json(report), report_text(report));
  return report.errors.empty() && report.format != formats::DatasetFormat::none ? 0 : 1;
}

// ---- stats -----------------------------------------------------------------------------

struct StatsArgs {
  std::string in, out, config;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string netcdf_variables;        // --netcdf-variables: data.netcdf_variables
  bool overwrite = false;
  bool json = false;
};

// At most this many rounds: after each, the ranks agree that none failed (so a bad sample on
// one rank ends the job within a round) and rank 0 learns the job's progress.
constexpr int64_t k_stats_rounds = 200;
constexpr double k_progress_every_s = 5.0;  // seconds between progress lines
constexpr size_t k_named_skips = 10;        // skipped samples named by message, per rank and in the report

// The fields of a climate dataset as training reads them: the readers config::open_data uses
// (DeepCAM files, netCDF files with data.netcdf_variables), so the channels come in training's
// order and units, but raw (normalize = false) and without labels: statistics are of the fields
// only, and data not labelled yet (before `squall data label`, which copies stats.h5 along) has
// them too. Keep in step with config::open_data when it learns a key that changes the channels.
struct StatsInput {
  std::unique_ptr<data::DataSource> source;
  bool labels_buffer = false;  // the reader writes labels whatever it is asked (netCDF): give it room
};

StatsInput open_stats_input(const std::string& in, const config::DataConfig& d) {
  std::error_code ec;
  if (!fs::exists(in, ec)) throw UsageError("--in " + in + ": no such file or folder");
  const formats::DatasetFormat format = formats::detect_format(in);
  formats::OpenOptions raw;
  raw.normalize = false;
  raw.labels_optional = true;
  if (format == formats::DatasetFormat::netcdf) {
    // data.channels or data.netcdf_variables, as training reads them (netcdf_options names the
    // key at fault); labels "": never read, the reader then gives all-background labels.
    return {formats::open_netcdf(in, raw, formats::netcdf_options(d.channels, d.netcdf_variables, "")), true};
  }
  if (format == formats::DatasetFormat::deepcam) {
    const std::vector<std::string> files =
        fs::is_directory(in, ec) ? formats::list_deepcam_files(in) : std::vector<std::string>{in};
    return {formats::open_deepcam_files(files, "", raw), false};
  }
  if (format == formats::DatasetFormat::shards)
    throw UsageError("--in " + in + " holds squall shards, which carry their statistics in their own attributes "
                     "(written by `squall data deepcam` and `squall data fashion-mnist`); `squall data stats` is for "
                     "folders of DeepCAM files (data-*.h5) and netCDF files (*.nc)");
  if (format == formats::DatasetFormat::idx)
    throw UsageError("--in " + in + " holds Fashion-MNIST IDX files, which are normalised with fixed constants; "
                     "`squall data stats` is for folders of DeepCAM files (data-*.h5) and netCDF files (*.nc)");
  throw UsageError("--in " + in + ": no DeepCAM files (data-*.h5) and no netCDF files (*.nc) (docs/data.md)");
}

// Where training looks for the statistics of `in` (formats::find_deepcam_stats): inside a
// folder, beside a file.
std::string default_stats_path(const std::string& in) {
  std::error_code ec;
  if (fs::is_directory(in, ec)) return (fs::path(in) / "stats.h5").string();
  return (fs::path(in).parent_path() / "stats.h5").string();
}

void refuse_existing(const std::string& out) {
  std::error_code ec;
  if (fs::exists(out, ec))
    throw UsageError("--out " + out + " already exists: `squall data stats` replaces a statistics file only with "
                     "--overwrite (models trained with the old one were normalised with it)");
}

// The whole job's share of a failure message for a bad sample: what to do about it.
std::string bad_sample_advice(const std::string& what) {
  return what + ". Statistics need every value finite: repair or remove that sample, or set "
                "data.skip_bad_samples = true (--set data.skip_bad_samples=true) to leave such samples out of the "
                "statistics, as training then leaves them out";
}

nlohmann::json stats_json(const formats::ChannelMoments& m, const formats::StatsProvenance& p,
                          const std::string& out, const std::vector<std::string>& skipped) {
  json channels = json::array();
  for (int64_t c = 0; c < m.channels(); ++c) {
    const auto& ch = m.channel(c);
    const auto i = static_cast<size_t>(c);
    channels.push_back({{"name", i < p.channel_names.size() ? p.channel_names[i] : std::to_string(c)},
                        {"units", i < p.channel_units.size() ? p.channel_units[i] : ""},
                        {"count", ch.count},
                        {"mean", ch.mean},
                        {"std", std::sqrt(m.variance(c))},
                        {"min", ch.min},
                        {"max", ch.max}});
  }
  return json{{"out", out},           {"source", p.source},     {"samples", p.samples},
              {"skipped_samples", p.skipped_samples}, {"skipped", skipped}, {"channels", channels}};
}

std::string stats_text(const formats::ChannelMoments& m, const formats::StatsProvenance& p, const std::string& out) {
  std::string text;
  char line[256];
  for (int64_t c = 0; c < m.channels(); ++c) {
    const auto& ch = m.channel(c);
    const auto i = static_cast<size_t>(c);
    const std::string name = i < p.channel_names.size() ? p.channel_names[i] : "channel " + std::to_string(c);
    const std::string units = i < p.channel_units.size() && !p.channel_units[i].empty() ? " " + p.channel_units[i] : "";
    std::snprintf(line, sizeof line, "  %-10s mean %-13.7g std %-13.7g min %-13.7g max %.7g%s\n", name.c_str(),
                  ch.mean, std::sqrt(m.variance(c)), ch.min, ch.max, units.c_str());
    text += line;
  }
  text += "wrote " + out + ": statistics of " + std::to_string(p.samples) + " sample(s)" +
          (p.skipped_samples > 0 ? " (" + std::to_string(p.skipped_samples) + " bad sample(s) left out)" : "") +
          " of " + p.source + ", " + std::to_string(m.channels()) + " channel(s)\n";
  return text;
}

int run_stats(const StatsArgs& a) {
  const mpi::Communicator world = mpi::Communicator::world();
  const int rank = world.rank(), size = world.size();
  config::Config cfg;
  StatsInput input;
  std::string out;
  // Every rank reads the config and opens the data; a failure on any ends all of them alike.
  run_share_agreed(world, "data stats", [&] {
    cfg = load_command_config(a.config, a.overrides);
    if (!a.netcdf_variables.empty()) {
      try {
        formats::netcdf_variable_map(a.netcdf_variables);
      } catch (const Error& e) {
        throw UsageError(std::string("--netcdf-variables: ") + e.what());
      }
      cfg.data.netcdf_variables = a.netcdf_variables;
    }
    out = a.out.empty() ? default_stats_path(a.in) : a.out;
    if (rank == 0 && !a.overwrite) refuse_existing(out);
    input = open_stats_input(a.in, cfg.data);
    if (input.source->size() == 0) throw UsageError("--in " + a.in + ": no samples");
  });
  const data::DataSource& source = *input.source;
  const data::DatasetInfo& info = source.info();
  const int64_t n = source.size(), c = info.sample.c(), plane = info.sample.h() * info.sample.w();
  // Contiguous blocks: rank r reads samples [n r / size, n (r + 1) / size), files in order.
  const int64_t begin = n * rank / size, end = n * (rank + 1) / size;
  const int64_t rounds = std::clamp<int64_t>((n + size - 1) / size, 1, k_stats_rounds);

  formats::ChannelMoments mine(c);
  int64_t skipped = 0;
  std::vector<std::string> skipped_named;
  std::vector<float> image(static_cast<size_t>(c * plane));
  std::vector<int32_t> labels(input.labels_buffer ? static_cast<size_t>(plane) : 0);
  const Stopwatch timer;
  double printed_at = 0;
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t lo = begin + (end - begin) * r / rounds, hi = begin + (end - begin) * (r + 1) / rounds;
    run_share_agreed(world, "data stats", [&] {
      for (int64_t i = lo; i < hi; ++i) {
        try {
          source.read(std::span<const int64_t>(&i, 1), image.data(), labels.empty() ? nullptr : labels.data());
        } catch (const data::BadSample& e) {
          if (!cfg.data.skip_bad_samples) throw Error(bad_sample_advice(e.what()));
          ++skipped;
          if (skipped_named.size() < k_named_skips) skipped_named.push_back(e.what());
          continue;
        }
        mine.add_sample(image.data(), plane);
      }
    });
    const int64_t done = world.allreduce_sum(hi - begin);
    const double seconds = timer.seconds();
    if (rank == 0 && (seconds - printed_at >= k_progress_every_s || r + 1 == rounds)) {
      printed_at = seconds;
      char line[200];
      std::snprintf(line, sizeof line, "data stats: %lld/%lld samples (%.0f%%), %.1f samples/s on %d rank(s)\n",
                    static_cast<long long>(done), static_cast<long long>(n),
                    100.0 * static_cast<double>(done) / static_cast<double>(n),
                    seconds > 0 ? static_cast<double>(done) / seconds : 0.0, size);
      std::fputs(line, stderr);
      std::fflush(stderr);
    }
  }

  // Rank 0 merges the ranks' moments in rank order (the same file whatever the timing) and
  // writes the file; a failure there ends every rank with its message.
  const std::vector<std::string> parts = world.gather_strings(mine.encode(), 0);
  json named = json::array();
  for (const std::string& s : skipped_named) named.push_back(s);
  const std::vector<std::string> named_parts = world.gather_strings(named.dump(), 0);
  const int64_t skipped_total = world.allreduce_sum(skipped);
  formats::ChannelMoments all(c);
  formats::StatsProvenance provenance;
  std::vector<std::string> skipped_report;
  run_share_agreed(world, "data stats", [&] {
    if (rank != 0) return;
    for (const std::string& p : parts) all.merge(formats::ChannelMoments::decode(p));
    for (const std::string& p : named_parts)
      for (const json& m : json::parse(p))
        if (skipped_report.size() < k_named_skips) skipped_report.push_back(m.get<std::string>());
    if (all.samples() == 0)
      throw Error("every sample of " + a.in + " is bad and was left out (data.skip_bad_samples = true): no "
                  "statistics to write; the first: " + (skipped_report.empty() ? "" : skipped_report.front()));
    provenance.channel_names = info.channel_names;
    provenance.channel_units = info.channel_units;
    provenance.samples = all.samples();
    provenance.skipped_samples = skipped_total;
    provenance.source = a.in;
    provenance.squall_version = k_version;
    provenance.created_by = "squall data stats";
    if (!a.overwrite) refuse_existing(out);  // made while this ran
    formats::write_stats_file(out, all, provenance);
  });
  if (rank != 0) return 0;

  if (skipped_total > 0) {
    std::string list;
    for (const std::string& s : skipped_report) list += "\n  " + s;
    log::warn("data stats: " + std::to_string(skipped_total) + " bad sample(s) left out of the statistics "
              "(data.skip_bad_samples = true)" + (skipped_total > static_cast<int64_t>(skipped_report.size())
                                                      ? ", the first " + std::to_string(skipped_report.size())
                                                      : std::string()) + ":" + list);
  }
  for (int64_t k = 0; k < c; ++k)
    if (all.variance(k) == 0.0) {
      const auto i = static_cast<size_t>(k);
      log::warn("data stats: channel " + (i < info.channel_names.size() ? info.channel_names[i] : std::to_string(k)) +
                " has the same value (" + std::to_string(all.channel(k).mean) + ") in every sample: training "
                "refuses to normalise a channel without spread (remove it from the data, or set data.normalize = "
                "false)");
    }
  print_result(a.json, stats_json(all, provenance, out, skipped_report), stats_text(all, provenance, out));
  return 0;
}

}  // namespace

void add_data_commands(CLI::App& data, Context&, Actions& actions) {
  {
    CLI::App* sub = data.add_subcommand("fashion-mnist", "Convert Debian's Fashion-MNIST IDX files to shards");
    auto args = std::make_shared<FashionArgs>();
    sub->add_option("--from", args->from, "Folder of the IDX files")->capture_default_str();
    sub->add_option("--out", args->out, "Output folder for train-* and test-* shards")->required();
    sub->add_option("--shards", args->shards,
                    "Shards per split (the test split gets the same number, at most one per sample)")
        ->check(CLI::Range(1, 99999))
        ->capture_default_str();
    sub->add_option("--compression", args->compression, "Deflate level, 0 = none")
        ->check(CLI::Range(0, 9))
        ->capture_default_str();
    actions[sub] = [args] { return run_fashion_mnist(*args); };
  }
  {
    CLI::App* sub = data.add_subcommand("deepcam", "Convert DeepCAM files (data-*.h5 + stats.h5) to float32 shards");
    auto args = std::make_shared<DeepcamArgs>();
    sub->add_option("--from", args->from, "Folder of data-*.h5 files")->required()->check(CLI::ExistingDirectory);
    sub->add_option("--out", args->out, "Output folder")->required();
    sub->add_option("--shards", args->shards, "Number of shards")->check(CLI::Range(1, 99999))->capture_default_str();
    sub->add_option("--split", args->split, "Split name of the shards (train, test, validation, ...)")
        ->capture_default_str();
    sub->add_option("--compression", args->compression, "Deflate level, 0 = none")
        ->check(CLI::Range(0, 9))
        ->capture_default_str();
    actions[sub] = [args] { return run_deepcam(*args); };
  }
  {
    CLI::App* sub = data.add_subcommand("inspect", "Read every sample of every file and report what a dataset holds");
    auto args = std::make_shared<InspectArgs>();
    sub->add_option("paths", args->paths, "Dataset folders or files")->required();
    sub->add_flag("--json", args->json, "Print JSON (format, files, samples, shape, dtype, classes, channels, errors)");
    sub->add_option("-c,--config", args->config,
                    "netCDF input: a run config whose data.channels (or data.netcdf_variables) and data.netcdf_labels "
                    "the files are checked against")
        ->check(CLI::ExistingFile);
    sub->add_option("--set", args->overrides,
                    "Override a config key: --set section.key=value (repeatable; e.g. "
                    "--set 'data.channels=[\"U850=u@850\", \"PSL=msl\"]')")
        ->take_all()
        ->allow_extra_args(false);
    sub->add_option("--netcdf-variables", args->netcdf_variables,
                    "netCDF input: CHANNEL=variable pairs overriding the DeepCAM names (\"PSL=slp,U850=u@850\")");
    sub->footer("Exit status: 0 every file reads whole; 1 a file, sample or channel that cannot be read (each named "
                "under errors, netCDF files with what they hold); 2 a usage error (a flag, a bad config key).");
    actions[sub] = [args] { return run_inspect(*args); };
  }
  {
    CLI::App* sub = data.add_subcommand(
        "stats", "Compute the per-channel statistics (stats.h5) climate data is normalised with (run under mpirun to "
                 "split the samples)");
    auto args = std::make_shared<StatsArgs>();
    sub->add_option("--in", args->in, "Folder (or file) of DeepCAM files (data-*.h5) or netCDF files (*.nc)")
        ->required();
    sub->add_option("--out", args->out,
                    "The statistics file (default: stats.h5 in the --in folder, or beside the --in file: where "
                    "training looks)");
    sub->add_option("-c,--config", args->config,
                    "TOML run config whose data.* keys say how the data is read (as training reads it)")
        ->check(CLI::ExistingFile);
    sub->add_option("--set", args->overrides, "Override a config key: --set section.key=value (repeatable)")
        ->take_all()
        ->allow_extra_args(false);
    sub->add_option("--netcdf-variables", args->netcdf_variables,
                    "netCDF input: CHANNEL=variable pairs overriding the DeepCAM names (\"PSL=slp,TS=ts\"); "
                    "replaces data.netcdf_variables");
    sub->add_flag("--overwrite", args->overwrite, "Replace an existing statistics file instead of refusing");
    sub->add_flag("--json", args->json, "Print one JSON object (rank 0): the file, the samples and each channel's statistics");
    actions[sub] = [args] { return run_stats(*args); };
  }
}

}  // namespace squall::app
