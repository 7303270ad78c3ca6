// `squall data fashion-mnist | deepcam | inspect`: converting datasets to native shards
// (docs/formats.md) and checking datasets by reading every chunk of every file.
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
#include "io/formats/shard.hpp"
#include "src/app/cli.hpp"
#include "src/config/config.hpp"
#include "src/core/error.hpp"
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
  config::Config cfg;
  try {
    cfg = config::load_config(args.config, args.overrides);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());  // a bad config is the user's to fix: exit 2
  }
  const std::string variables = args.netcdf_variables.empty() ? cfg.data.netcdf_variables : args.netcdf_variables;
  return formats::netcdf_options(cfg.data.channels, variables, cfg.data.netcdf_labels);
}

// IDX folders are opened here, where the IDX reader is linked (io/ only lists them).
void add_idx_details(const std::vector<std::string>& paths, formats::InspectReport& report) {
  for (const std::string& path : paths) {
    if (formats::detect_format(path) != "idx") continue;
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
  return json{{"format", r.format},
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
  std::string out = "format: " + (r.format.empty() ? std::string("(none found)") : r.format) + "\n";
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
  return report.errors.empty() && !report.format.empty() ? 0 : 1;
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
    actions[sub] = [args] { return run_inspect(*args); };
  }
}

}  // namespace squall::app
