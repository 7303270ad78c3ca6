// inspect_paths: read everything, report everything (see inspect.hpp).
#include "io/formats/inspect.hpp"

#include <cmath>
#include <filesystem>
#include <regex>

#include "io/formats/dataset.hpp"
#include "io/formats/mask.hpp"
#include "io/formats/shard.hpp"
#include "src/core/error.hpp"
#include "src/data/data_source.hpp"

namespace squall::formats {
namespace {

namespace fs = std::filesystem;

constexpr size_t k_errors_per_file = 10;  // then one line counting the rest

// Running per-channel sums of raw values, in double (70000 x 784 values and more).
struct Accumulator {
  std::vector<double> sum, sqsum;
  std::vector<float> min, max;
  int64_t per_channel = 0;  // values seen per channel

  void add(const float* sample, int64_t c, int64_t plane) {
    if (sum.empty()) {
      sum.assign(static_cast<size_t>(c), 0.0);
      sqsum.assign(static_cast<size_t>(c), 0.0);
      min.assign(static_cast<size_t>(c), INFINITY);
      max.assign(static_cast<size_t>(c), -INFINITY);
    }
    for (int64_t ch = 0; ch < c; ++ch) {
      double s = 0, q = 0;
      float lo = min[static_cast<size_t>(ch)], hi = max[static_cast<size_t>(ch)];
      for (int64_t p = 0; p < plane; ++p) {
        const float v = sample[ch * plane + p];
        s += v;
        q += static_cast<double>(v) * v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      sum[static_cast<size_t>(ch)] += s;
      sqsum[static_cast<size_t>(ch)] += q;
      min[static_cast<size_t>(ch)] = lo;
      max[static_cast<size_t>(ch)] = hi;
    }
    per_channel += plane;
  }

  ChannelSummary summary() const {
    ChannelSummary out;
    if (per_channel == 0) return out;
    for (size_t ch = 0; ch < sum.size(); ++ch) {
      const double m = sum[ch] / static_cast<double>(per_channel);
      out.mean.push_back(static_cast<float>(m));
      out.std.push_back(static_cast<float>(std::sqrt(std::max(0.0, sqsum[ch] / static_cast<double>(per_channel) - m * m))));
    }
    out.min = min;
    out.max = max;
    return out;
  }
};

class Inspector {
 public:
  Inspector(InspectReport& report, const NetcdfOptions& netcdf) : m_report(report), m_netcdf(netcdf) {}

  void add_path(const std::string& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return error(path + ": does not exist");
    const DatasetFormat format = detect_format(path);
    if (format == DatasetFormat::none)
      return error(path + ": holds no Fashion-MNIST IDX files, no squall shards (*-NNNNN-of-MMMMM.h5), no "
                          "DeepCAM files (data-*.h5) and no netCDF files (*.nc)");
    note_format(format);
    const bool is_dir = fs::is_directory(path, ec);
    if (format == DatasetFormat::idx) return add_idx(is_dir ? path : fs::path(path).parent_path().string());
    if (format == DatasetFormat::shards) {
      for (const std::string& f : is_dir ? list_shards(path, "") : std::vector<std::string>{path}) add_shard(f);
      return;
    }
    const std::string dir = is_dir ? path : fs::path(path).parent_path().string();
    add_deepcam_stats(find_deepcam_stats(dir));
    const std::vector<std::string> files = without_masks(
        path, is_dir ? (format == DatasetFormat::netcdf ? list_netcdf_files(path) : list_deepcam_files(path))
                     : std::vector<std::string>{path});
    for (const std::string& f : files) {
      if (format == DatasetFormat::netcdf) add_netcdf(f);
      else add_deepcam(f);
    }
  }

  void finish() { m_report.measured = m_acc.summary(); }

 private:
  void error(const std::string& message) { m_report.errors.push_back(message); }

  // `files` less the masks squall predict wrote there (its --out may be the input folder):
  // outputs, not data. A folder of masks only is an error.
  std::vector<std::string> without_masks(const std::string& path, const std::vector<std::string>& files) {
    std::vector<std::string> out;
    for (const std::string& f : files) {
      if (is_squall_mask(f)) m_report.skipped.push_back(f);
      else out.push_back(f);
    }
    const std::string marker = std::string("global attribute ") + k_mask_marker + " = \"" + k_mask_marker_value + "\"";
    if (out.empty() && files.size() == 1 && files[0] == path)
      error(path + ": a mask file squall predict wrote (" + marker + "), not input data");
    else if (out.empty() && !files.empty())
      error(path + ": holds only mask files squall predict wrote (" + marker + "), no input data to inspect");
    return out;
  }

  void note_format(DatasetFormat format) {
    if (m_report.format == DatasetFormat::none) m_report.format = format;
    else if (m_report.format != format) m_report.format = DatasetFormat::mixed;
  }

  // The first file fixes shape, dtype and classes; later files must agree.
  bool agree(const std::string& file, const std::vector<int64_t>& shape, const std::string& dtype, bool per_pixel) {
    if (m_report.shape.empty()) {
      m_report.shape = shape;
      m_report.dtype = dtype;
      m_report.per_pixel_labels = per_pixel;
      return true;
    }
    if (shape != m_report.shape || dtype != m_report.dtype || per_pixel != m_report.per_pixel_labels) {
      auto text = [](const std::vector<int64_t>& s) {
        std::string t = "[";
        for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
        return t + "]";
      };
      error(file + ": holds " + dtype + " samples " + text(shape) + (per_pixel ? " with per-pixel labels" : "") +
            ", unlike the first file (" + m_report.dtype + " " + text(m_report.shape) +
            (m_report.per_pixel_labels ? " with per-pixel labels" : "") + ")");
      return false;
    }
    return true;
  }

  void set_classes(const std::vector<std::string>& names) {
    if (m_report.class_names.empty()) {
      m_report.class_names = names;
      m_report.classes = static_cast<int64_t>(names.size());
      m_report.label_counts.assign(names.size(), 0);
    }
  }

  // Reads every sample of `source` one at a time, so that one bad sample hides no other.
  int64_t read_all(const data::DataSource& source, const std::string& file) {
    const data::DatasetInfo& info = source.info();
    const int64_t per = info.sample.per_sample(), plane = info.sample.h() * info.sample.w();
    std::vector<float> image(static_cast<size_t>(per));
    std::vector<int32_t> labels(static_cast<size_t>(info.per_pixel_labels ? plane : 1));
    int64_t good = 0;
    size_t bad = 0;
    for (int64_t i = 0; i < source.size(); ++i) {
      try {
        source.read(std::span<const int64_t>(&i, 1), image.data(), labels.data());
      } catch (const std::exception& e) {
        if (bad++ < k_errors_per_file) error(e.what());
        continue;
      }
      ++good;
      m_acc.add(image.data(), info.sample.c(), plane);
      for (int32_t l : labels)
        if (l >= 0 && static_cast<size_t>(l) < m_report.label_counts.size()) ++m_report.label_counts[static_cast<size_t>(l)];
    }
    if (bad > k_errors_per_file)
      error(file + ": " + std::to_string(bad - k_errors_per_file) + " more bad samples not listed (" +
            std::to_string(bad) + " in all)");
    return good;
  }

  void add_shard(const std::string& file) {
    m_report.files.push_back(file);
    try {
      const ShardFileInfo fi = read_shard_info(file);
      const nn::Shape& s = fi.sample;
      if (!agree(file, {s.c(), s.h(), s.w()}, sample_type_name(fi.type), fi.per_pixel_labels)) return;
      if (m_report.channels.empty()) m_report.channels = fi.meta.channel_names;
      if (m_report.stored.mean.empty()) m_report.stored = ChannelSummary{fi.meta.mean, fi.meta.std, fi.meta.min, fi.meta.max};
      set_classes(fi.meta.class_names);
      auto source = open_shard_files({file}, OpenOptions{false, data::NormalizationKind::zscore});
      const int64_t n = read_all(*source, file);
      m_report.samples += n;
      static const std::regex split_of(R"(^(.+)-\d{5}-of-\d{5}\.h5$)");
      std::smatch m;
      const std::string name = fs::path(file).filename().string();
      m_report.splits[std::regex_match(name, m, split_of) ? m[1].str() : name] += n;
    } catch (const std::exception& e) {
      error(e.what());
    }
  }

  void add_deepcam_stats(const std::string& stats_path) {
    if (stats_path.empty() || !m_report.stored.mean.empty()) return;
    try {
      const ChannelStats s = read_deepcam_stats(stats_path);
      m_report.stored = ChannelSummary{s.mean, s.std, s.min, s.max};
      m_report.files.push_back(stats_path);
    } catch (const std::exception& e) {
      error(e.what());
    }
  }

  void add_deepcam(const std::string& file) {
    m_report.files.push_back(file);
    try {
      auto source = open_deepcam_files({file}, "", OpenOptions{false, data::NormalizationKind::zscore});
      const nn::Shape& s = source->info().sample;
      if (!agree(file, {s.c(), s.h(), s.w()}, "float32", true)) return;
      set_classes(source->info().class_names);
      const int64_t n = read_all(*source, file);
      m_report.samples += n;
      m_report.splits[fs::path(file).parent_path().filename().string()] += n;
    } catch (const std::exception& e) {
      error(e.what());
    }
  }

  // Which channels the file supplies (all listed at once when some cannot be read), then
  // every time step read like any dataset's samples.
  void add_netcdf(const std::string& file) {
    m_report.files.push_back(file);
    try {
      NetcdfFileInfo info = survey_netcdf(file, m_netcdf);
      m_report.time_steps += info.steps;
      const std::string channel_error = info.channel_error;
      m_report.netcdf.push_back(std::move(info));
      if (!channel_error.empty()) return error(channel_error);
      auto source = open_netcdf_files({file}, "", OpenOptions{false, data::NormalizationKind::zscore}, m_netcdf);
      const nn::Shape& s = source->info().sample;
      if (!agree(file, {s.c(), s.h(), s.w()}, "float32", true)) return;
      // Later files are read in the first one's units, as the training reader does.
      if (m_netcdf.units.empty()) m_netcdf.units = source->info().channel_units;
      if (m_report.channels.empty()) {
        m_report.channels = source->info().channel_names;
        m_report.channel_units = source->info().channel_units;
      }
      set_classes(source->info().class_names);
      const int64_t n = read_all(*source, file);
      m_report.samples += n;
      m_report.splits[fs::path(file).parent_path().filename().string()] += n;
    } catch (const std::exception& e) {
      error(e.what());
    }
  }

  // IDX files are read by src/train (a library above this one): only listed here; the
  // caller (cmd_data.cpp) opens them with formats::open_idx and fills in the rest.
  void add_idx(const std::string& dir) {
    for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                             "t10k-labels-idx1-ubyte"})
      for (const char* ext : {"", ".gz"}) {
        std::error_code ec;
        const fs::path p = fs::path(dir) / (std::string(stem) + ext);
        if (fs::is_regular_file(p, ec)) m_report.files.push_back(p.string());
      }
  }

  InspectReport& m_report;
  NetcdfOptions m_netcdf;
  Accumulator m_acc;
};

}  // namespace

InspectReport inspect_paths(const std::vector<std::string>& paths, const NetcdfOptions& netcdf) {
  InspectReport report;
  Inspector inspector(report, netcdf);
  for (const std::string& p : paths) inspector.add_path(p);
  inspector.finish();
  return report;
}

}  // namespace squall::formats
