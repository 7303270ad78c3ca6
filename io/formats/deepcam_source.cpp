// open_deepcam: DeepCAM's climate files read as they are (docs/formats.md). One file per
// sample: /climate/data float32 [H,W,C] (channels last, transposed to CHW here) and
// /climate/labels_0 [H,W] (0 background, 1 tropical cyclone, 2 atmospheric river, stored as
// float or integer). The full dataset has ~120k files, more than a process may hold open, so
// files are opened on first use and kept open up to k_max_open at a time.
#include <algorithm>
#include <memory>
#include <cmath>
#include <deque>
#include <filesystem>

#include "io/formats/dataset.hpp"
#include "io/formats/h5_util.hpp"
#include "src/core/error.hpp"

namespace squall::formats {
namespace {

constexpr size_t k_max_open = 512;
constexpr int64_t k_deepcam_classes = 3;

struct DeepcamFile {
  H5Handle file, data, labels;
};

// Opens one DeepCAM file and checks its layout; `h`, `w`, `c` receive its sample shape.
// labels_optional: a file without /climate/labels_0 opens with no labels handle.
DeepcamFile open_deepcam_file(const std::string& path, int64_t& h, int64_t& w, int64_t& c, bool labels_optional) {
  auto lock = h5_lock();
  DeepcamFile f;
  f.file = h5_open_file(path);
  f.data = h5_open_dataset(f.file.get(), path, "/climate/data");
  const H5DatasetDesc d = h5_describe(f.data.get());
  if (d.dims.size() != 3)
    throw Error(path + ": dataset /climate/data has shape " + h5_dims_text(d.dims) + ", expected rank 3 [h,w,c]");
  if (d.dtype != "float32")
    throw Error(path + ": dataset /climate/data has dtype " + d.dtype + ", expected float32");
  h = static_cast<int64_t>(d.dims[0]);
  w = static_cast<int64_t>(d.dims[1]);
  c = static_cast<int64_t>(d.dims[2]);
  if (!h5_exists(f.file.get(), "/climate/labels_0")) {
    if (labels_optional) return f;
    const std::string folder = std::filesystem::path(path).parent_path().string();
    throw Error(folder + " holds unlabeled DeepCAM files: " + path +
                ": dataset /climate/labels_0 is missing; training and evaluation need labelled samples "
                "(`squall data label` computes labels from the fields)");
  }
  f.labels = h5_open_dataset(f.file.get(), path, "/climate/labels_0");
  const H5DatasetDesc l = h5_describe(f.labels.get());
  if (l.type_class != H5T_FLOAT && l.type_class != H5T_INTEGER)
    throw Error(path + ": dataset /climate/labels_0 has dtype " + l.dtype + ", expected float or integer");
  if (l.dims.size() != 2 || l.dims[0] != d.dims[0] || l.dims[1] != d.dims[1])
    throw Error(path + ": dataset /climate/labels_0 has shape " + h5_dims_text(l.dims) + ", expected [" +
                std::to_string(d.dims[0]) + "," + std::to_string(d.dims[1]) + "] for /climate/data " +
                h5_dims_text(d.dims));
  return f;
}

class DeepcamSource final : public data::DataSource {
 public:
  DeepcamSource(std::vector<std::string> paths, const std::string& stats_path, const OpenOptions& options)
      : m_paths(std::move(paths)), m_open(m_paths.size()), m_labels_optional(options.labels_optional) {
    if (m_paths.empty()) throw Error("no DeepCAM files given");
    m_open[0] = open_deepcam_file(m_paths[0], m_h, m_w, m_c, m_labels_optional);
    m_open_order.push_back(0);
    m_shift.assign(static_cast<size_t>(m_c), 0.0f);
    m_denom.assign(static_cast<size_t>(m_c), 1.0f);
    if (options.normalize) {
      m_norm = channel_normalization(options, stats_path, m_c, "DeepCAM files next to " + m_paths[0],
                                     std::filesystem::path(m_paths[0]).parent_path().string());
      for (size_t i = 0; i < m_norm.mean.size(); ++i) {
        m_shift[i] = m_norm.mean[i];
        m_denom[i] = m_norm.std[i];
      }
    }
    for (const float d : m_denom) m_scale.push_back(1.0f / d);
    m_info.sample = nn::Shape(1, m_c, m_h, m_w);
    m_info.classes = k_deepcam_classes;
    m_info.class_names = {"background", "tropical cyclone", "atmospheric river"};
    m_info.per_pixel_labels = true;
    m_info.description = "DeepCAM (" + std::to_string(m_paths.size()) + " files, " + m_info.sample.str() + ", " +
                         std::filesystem::path(m_paths[0]).parent_path().string() + ")";
  }

  const data::DatasetInfo& info() const override { return m_info; }
  const data::Normalization& normalization() const override { return m_norm; }
  int64_t size() const override { return static_cast<int64_t>(m_paths.size()); }
  std::vector<std::string> files() const override { return m_paths; }
  std::vector<int64_t> file_offsets() const override {
    std::vector<int64_t> out(m_paths.size() + 1);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(i);
    return out;
  }

  void read(std::span<const int64_t> indices, float* images, int32_t* labels) const override {
    const int64_t plane = m_h * m_w;
    // Per-thread scratch, allocated once and never zero-filled: a DeepCAM sample is 56 MB,
    // and fresh zeroed buffers per sample cost more (page faults, memset) than the read.
    thread_local std::unique_ptr<float[]> hwc, lab;
    thread_local size_t hwc_size = 0, lab_size = 0;
    if (hwc_size < static_cast<size_t>(plane * m_c)) {
      hwc_size = static_cast<size_t>(plane * m_c);
      hwc.reset(new float[hwc_size]);
    }
    if (lab_size < static_cast<size_t>(plane)) {
      lab_size = static_cast<size_t>(plane);
      lab.reset(new float[lab_size]);
    }
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t index = indices[k];
      if (index < 0 || index >= size())
        throw Error("DeepCAM: sample index " + std::to_string(index) + " outside [0, " + std::to_string(size()) + ")");
      const std::string& path = m_paths[static_cast<size_t>(index)];
      bool labelled = true;
      {
        auto lock = h5_lock();
        const DeepcamFile& f = file(static_cast<size_t>(index));
        if (H5Dread(f.data.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, hwc.get()) < 0)
          throw data::BadSample(path + ": dataset /climate/data: unreadable (" + h5_error_text() + ")", path, index);
        if (!f.labels) {
          std::fill(lab.get(), lab.get() + plane, -1.0f);  // labels_optional: no class
          labelled = false;
        } else if (H5Dread(f.labels.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab.get()) < 0) {
          throw data::BadSample(path + ": dataset /climate/labels_0: unreadable (" + h5_error_text() + ")", path, index);
        }
      }
      float* dst = images + k * static_cast<size_t>(plane * m_c);
      transpose_normalise(hwc.get(), dst, plane, path, index);
      int32_t* out = labels + k * static_cast<size_t>(plane);
      bool bad = false;
      for (int64_t p = 0; p < plane; ++p) {
        const float v = lab[static_cast<size_t>(p)];
        bad |= labelled && !(v == 0.0f || v == 1.0f || v == 2.0f);
        out[p] = static_cast<int32_t>(v);
      }
      if (bad)
        for (int64_t p = 0; p < plane; ++p) {
          const float v = lab[static_cast<size_t>(p)];
          if (!(v == 0.0f || v == 1.0f || v == 2.0f))
            throw data::BadSample(path + ": dataset /climate/labels_0: value " + std::to_string(v) + " at pixel " +
                                       std::to_string(p) + " is not 0, 1 or 2 (index " + std::to_string(index) + ")",
                                   path, index);
        }
    }
  }

 private:
  // HWC -> CHW with (v - shift) * scale per channel, in blocks of pixels so that the writes
  // of each channel stay sequential; NaN/inf is detected per block and located only when
  // found (the common case pays one OR per value).
  void transpose_normalise(const float* hwc, float* chw, int64_t plane, const std::string& path, int64_t index) const {
    constexpr int64_t block = 256;
    const int64_t c_count = m_c;
    for (int64_t p0 = 0; p0 < plane; p0 += block) {
      const int64_t p1 = std::min(plane, p0 + block);
      bool finite = true;
      for (int64_t c = 0; c < c_count; ++c) {
        const float shift = m_shift[static_cast<size_t>(c)], scale = m_scale[static_cast<size_t>(c)];
        float* out = chw + c * plane;
        for (int64_t p = p0; p < p1; ++p) {
          const float v = hwc[p * c_count + c];
          finite &= std::isfinite(v);
          out[p] = (v - shift) * scale;
        }
      }
      if (!finite)
        for (int64_t p = p0; p < p1; ++p)
          for (int64_t c = 0; c < c_count; ++c)
            if (const float v = hwc[p * c_count + c]; !std::isfinite(v))
              throw data::BadSample(path + ": dataset /climate/data: value " + std::to_string(v) + " at pixel " +
                                         std::to_string(p) + ", channel " + std::to_string(c) + " (index " +
                                         std::to_string(index) + ")",
                                     path, index);
    }
  }

  // The open file of sample i, opening it (and closing the oldest beyond k_max_open).
  // Called with the HDF5 lock held, which also guards m_open and m_open_order.
  const DeepcamFile& file(size_t i) const {
    if (!m_open[i].file) {
      int64_t h = 0, w = 0, c = 0;
      DeepcamFile f = open_deepcam_file(m_paths[i], h, w, c, m_labels_optional);
      if (h != m_h || w != m_w || c != m_c)
        throw Error(m_paths[i] + ": dataset /climate/data has shape [" + std::to_string(h) + "," + std::to_string(w) +
                    "," + std::to_string(c) + "] but " + m_paths[0] + " has [" + std::to_string(m_h) + "," +
                    std::to_string(m_w) + "," + std::to_string(m_c) + "]");
      if (m_open_order.size() >= k_max_open) {
        m_open[m_open_order.front()] = DeepcamFile{};
        m_open_order.pop_front();
      }
      m_open[i] = std::move(f);
      m_open_order.push_back(i);
    }
    return m_open[i];
  }

  std::vector<std::string> m_paths;
  mutable std::vector<DeepcamFile> m_open;  // by sample; empty handles when closed
  mutable std::deque<size_t> m_open_order;  // oldest first
  bool m_labels_optional = false;
  int64_t m_h = 0, m_w = 0, m_c = 0;
  std::vector<float> m_shift, m_denom;  // normalised = (raw - shift) / denom, per channel
  std::vector<float> m_scale;           // 1 / denom
  data::Normalization m_norm;
  data::DatasetInfo m_info;
};

}  // namespace

data::Normalization channel_normalization(const OpenOptions& options, const std::string& stats_path, int64_t channels,
                                          const std::string& files, const std::string& folder) {
  data::Normalization norm;
  if (options.fixed) {
    norm = *options.fixed;
    if (norm.kind != "none" && norm.mean.size() != static_cast<size_t>(channels))
      throw Error(folder + ": " + std::to_string(channels) + " channels, but the given normalisation (" + norm.source +
                  ") has statistics for " + std::to_string(norm.mean.size()));
  } else {
    if (stats_path.empty())
      throw Error(files + ": no stats.h5 found (beside them or one folder up); normalisation needs it");
    const ChannelStats s = read_deepcam_stats(stats_path);
    if (s.mean.size() != static_cast<size_t>(channels))
      throw Error(stats_path + ": statistics for " + std::to_string(s.mean.size()) + " channels, but " + files +
                  " have " + std::to_string(channels));
    norm.kind = data::k_normalization_kinds.name(options.normalization);
    norm.source = stats_path;
    const bool z = options.normalization == data::NormalizationKind::zscore;
    for (size_t i = 0; i < s.mean.size(); ++i) {
      norm.mean.push_back(z ? s.mean[i] : s.min[i]);
      norm.std.push_back(z ? s.std[i] : s.max[i] - s.min[i]);
    }
  }
  if (norm.kind == "none") return norm;
  if (norm.input_scale != 1.0f)
    throw Error(folder + ": climate fields are not scaled before normalisation, but the given normalisation (" +
                norm.source + ") scales them by " + std::to_string(norm.input_scale));
  for (size_t i = 0; i < norm.std.size(); ++i)
    if (!(norm.std[i] > 0.0f))
      throw Error(norm.source + ": channel " + std::to_string(i) + " has a zero spread; " + norm.kind +
                  " normalisation impossible");
  return norm;
}

ChannelStats read_deepcam_stats(const std::string& stats_path) {
  auto lock = h5_lock();
  H5Handle file = h5_open_file(stats_path);
  const std::vector<float> mean = h5_read_floats(file.get(), stats_path, "/climate/mean");
  const std::vector<float> sqmean = h5_read_floats(file.get(), stats_path, "/climate/sqmean");
  ChannelStats s;
  s.min = h5_read_floats(file.get(), stats_path, "/climate/minval");
  s.max = h5_read_floats(file.get(), stats_path, "/climate/maxval");
  if (sqmean.size() != mean.size() || s.min.size() != mean.size() || s.max.size() != mean.size())
    throw Error(stats_path + ": /climate/{mean,sqmean,minval,maxval} differ in length");
  s.mean = mean;
  for (size_t i = 0; i < mean.size(); ++i) {
    const double m = mean[i];
    s.std.push_back(static_cast<float>(std::sqrt(std::max(0.0, static_cast<double>(sqmean[i]) - m * m))));
  }
  return s;
}

std::string find_deepcam_stats(const std::string& dir) {
  namespace fs = std::filesystem;
  for (const fs::path& p : {fs::path(dir) / "stats.h5", fs::path(dir).parent_path() / "stats.h5"}) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

std::unique_ptr<data::DataSource> open_deepcam_files(const std::vector<std::string>& files,
                                                      const std::string& stats_path, const OpenOptions& options) {
  return std::make_unique<DeepcamSource>(files, stats_path, options);
}

std::unique_ptr<data::DataSource> open_deepcam(const std::string& dir, const OpenOptions& options) {
  const std::vector<std::string> files = list_deepcam_files(dir);
  if (files.empty()) throw Error(dir + ": no DeepCAM files (data-*.h5)");
  return open_deepcam_files(files, find_deepcam_stats(dir), options);
}

}  // namespace squall::formats
