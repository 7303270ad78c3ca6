// open_deepcam: DeepCAM's climate files read as they are (docs/formats.md). One file per
// sample: /climate/data float32 [H,W,C] (channels last, transposed to CHW here) and
// /climate/labels_0 [H,W] (0 background, 1 tropical cyclone, 2 atmospheric river, stored as
// float or integer). The full dataset has ~120k files, more than a process may hold open, so
// files are opened on first use and kept open up to k_max_open at a time.
#include <algorithm>
#include <bit>
#include <memory>
#include <cmath>
#include <deque>
#include <filesystem>
#include <limits>

#include "io/formats/dataset.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/h5_util.hpp"
#include "src/core/durable.hpp"
#include "src/core/error.hpp"
#include "src/core/transpose8x8.hpp"

namespace squall::formats {
namespace {

constexpr size_t k_max_open = 512;
constexpr int64_t k_deepcam_classes = 3;

struct DeepcamFile {
  H5Handle file, data, labels;
  // The labels are stored as integers that int32 holds exactly (int8 to int32, uint8, uint16):
  // read as int32, with no round trip through float.
  bool labels_int32 = false;
  // Where a dataset's values lie in the file as they are in memory (contiguous, unfiltered,
  // little-endian float32 data, int32 labels, on a little-endian host): read with pread() from
  // HDF5's own descriptor, which is what H5Dread does for such a dataset, without its per-call
  // work. -1: read through HDF5.
  int fd = -1;
  int64_t data_offset = -1, labels_offset = -1;
};

// The byte offset of `dataset`'s values in the file when they can be read raw: contiguous
// storage in the file itself (no filters, no external file), allocated, of `bytes` bytes,
// stored as `type`; else -1.
int64_t raw_offset(hid_t dataset, hid_t type, size_t bytes) {
  if constexpr (std::endian::native != std::endian::little) return -1;
  H5Handle dcpl(H5Dget_create_plist(dataset));
  H5Handle stored(H5Dget_type(dataset));
  if (!dcpl || !stored || H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl.get()) != 0 ||
      H5Pget_external_count(dcpl.get()) != 0 || H5Tequal(stored.get(), type) <= 0 ||
      H5Dget_storage_size(dataset) != bytes)
    return -1;
  const haddr_t offset = H5Dget_offset(dataset);
  return offset == HADDR_UNDEF ? -1 : static_cast<int64_t>(offset);
}

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
  f.data_offset = raw_offset(f.data.get(), H5T_IEEE_F32LE, static_cast<size_t>(h * w * c) * 4);
  if (f.data_offset >= 0) f.fd = h5_raw_descriptor(f.file.get());
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
  f.labels_int32 = l.type_class == H5T_INTEGER && (l.is_signed ? l.type_size <= 4 : l.type_size <= 2);
  if (f.fd >= 0) f.labels_offset = raw_offset(f.labels.get(), H5T_STD_I32LE, static_cast<size_t>(h * w) * 4);
  return f;
}

#if defined(__x86_64__) || defined(__i386__)
// transpose_normalise's tiles: 8 pixels x 8 channels loaded as 8 rows, transposed in
// registers, normalised and stored as 8 runs of one channel. Returns false when a value is not
// finite (the output is then incomplete) or when the tiles do not fit (channels not a multiple
// of 8, no AVX2): the caller's loop does it all, and locates the value.
__attribute__((target("avx2"))) bool transpose_normalise_avx2(const float* hwc, float* chw, int64_t plane,
                                                               int64_t channels, const float* shift,
                                                               const float* scale) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 largest = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  const int64_t whole = plane - plane % 8;
  for (int64_t p0 = 0; p0 < whole; p0 += 8)
    for (int64_t c0 = 0; c0 < channels; c0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(hwc + (p0 + i) * channels + c0);
      transpose8x8(r);  // r[j]: channel c0 + j of pixels p0 .. p0 + 7
      for (int j = 0; j < 8; ++j) {
        // |v| <= FLT_MAX is false for inf and (an unordered compare) NaN.
        finite = _mm256_and_ps(finite, _mm256_cmp_ps(_mm256_and_ps(r[j], abs_mask), largest, _CMP_LE_OQ));
        const __m256 v = _mm256_mul_ps(_mm256_sub_ps(r[j], _mm256_set1_ps(shift[c0 + j])),
                                       _mm256_set1_ps(scale[c0 + j]));
        _mm256_storeu_ps(chw + (c0 + j) * plane + p0, v);
      }
    }
  if (_mm256_movemask_ps(finite) != 0xff) return false;
  for (int64_t p = whole; p < plane; ++p)
    for (int64_t c = 0; c < channels; ++c) {
      const float v = hwc[p * channels + c];
      if (!std::isfinite(v)) return false;
      chw[c * plane + p] = (v - shift[c]) * scale[c];
    }
  return true;
}
#endif

bool transpose_normalise_fast(const float* hwc, float* chw, int64_t plane, int64_t channels, const float* shift,
                              const float* scale) {
#if defined(__x86_64__) || defined(__i386__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && channels % 8 == 0 && channels > 0) return transpose_normalise_avx2(hwc, chw, plane, channels, shift, scale);
#endif
  (void)hwc, (void)chw, (void)plane, (void)channels, (void)shift, (void)scale;
  return false;
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
    // DeepCAM's files carry no channel names; their 16 channels are DeepCAM's, in its order and units.
    if (static_cast<size_t>(m_c) == deepcam_channel_names().size()) {
      m_info.channel_names = deepcam_channel_names();
      m_info.channel_units = deepcam_channel_units();
    }
    m_info.description = "DeepCAM (" + std::to_string(m_paths.size()) + " files, " + m_info.sample.str() + ", " +
                         std::filesystem::path(m_paths[0]).parent_path().string() + ")";
    // The grid, when the first file has one of the sample's size: what data.pad wraps in
    // longitude, the checkpoint keeps and predict's grid rule compares.
    read_grid(m_info.lat, m_info.lon);
    if (m_info.lat.size() != static_cast<size_t>(m_h) || m_info.lon.size() != static_cast<size_t>(m_w)) {
      m_info.lat.clear();
      m_info.lon.clear();
    }
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

  // /climate/lat and /climate/lon of the first file, from the handle kept open (empty when
  // absent).
  void read_grid(std::vector<double>& lat, std::vector<double>& lon) const {
    auto lock = h5_lock();
    const DeepcamFile& f = file(0);
    lat = h5_read_doubles_if_present(f.file.get(), m_paths[0], "/climate/lat");
    lon = h5_read_doubles_if_present(f.file.get(), m_paths[0], "/climate/lon");
  }

  // labels may be null (`squall predict`): the labels are then not read.
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
    if (labels != nullptr && lab_size < static_cast<size_t>(plane)) {
      lab_size = static_cast<size_t>(plane);
      lab.reset(new float[lab_size]);
    }
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t index = indices[k];
      if (index < 0 || index >= size())
        throw Error("DeepCAM: sample index " + std::to_string(index) + " outside [0, " + std::to_string(size()) + ")");
      const std::string& path = m_paths[static_cast<size_t>(index)];
      int32_t* out = labels != nullptr ? labels + k * static_cast<size_t>(plane) : nullptr;
      LabelsRead got = LabelsRead::none;
      {
        auto lock = h5_lock();  // also keeps the file, and its descriptor, open while it is read
        const DeepcamFile& f = file(static_cast<size_t>(index));
        const auto data_bytes = static_cast<size_t>(plane * m_c) * sizeof(float);
        if (f.fd >= 0 && f.data_offset >= 0) {
          if (!pread_exactly(f.fd, hwc.get(), data_bytes, f.data_offset))
            throw data::BadSample(path + ": dataset /climate/data: unreadable (" + errno_text() + ")", path, index);
        } else if (H5Dread(f.data.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, hwc.get()) < 0) {
          throw data::BadSample(path + ": dataset /climate/data: unreadable (" + h5_error_text() + ")", path, index);
        }
        if (out != nullptr && f.labels) {
          got = f.labels_int32 ? LabelsRead::as_int : LabelsRead::as_float;
          if (f.fd >= 0 && f.labels_offset >= 0) {
            if (!pread_exactly(f.fd, out, static_cast<size_t>(plane) * sizeof(int32_t), f.labels_offset))
              throw data::BadSample(path + ": dataset /climate/labels_0: unreadable (" + errno_text() + ")", path,
                                    index);
          } else if (H5Dread(f.labels.get(), f.labels_int32 ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                             H5P_DEFAULT, f.labels_int32 ? static_cast<void*>(out) : static_cast<void*>(lab.get())) < 0) {
            throw data::BadSample(path + ": dataset /climate/labels_0: unreadable (" + h5_error_text() + ")", path,
                                  index);
          }
        }
      }
      float* dst = images + k * static_cast<size_t>(plane * m_c);
      transpose_normalise(hwc.get(), dst, plane, path, index);
      if (out != nullptr) finish_labels(got, out, lab.get(), plane, path, index);
    }
  }

  // The window `w` of each sample: only the window's rows (and, within them, its columns) are
  // read from a file whose data lie raw in it (contiguous and unfiltered, as DeepCAM's files and
  // squall's writers store them); any other layout is read as an HDF5 hyperslab of the window,
  // which reads no more than the chunks the window touches. Normalised by the same code as
  // read(): the same values, bit for bit, as the window of read()'s sample.
  void read_window(std::span<const int64_t> indices, const data::Window& w, float* images,
                   int32_t* labels) const override {
    data::check_window(*this, w);
    const int64_t plane = w.rows * w.cols;
    const std::string place = " of the window " + data::window_text(w);
    thread_local std::vector<float> hwc, lab;  // small (a window), so plain vectors
    hwc.resize(static_cast<size_t>(plane * m_c));
    if (labels != nullptr) lab.resize(static_cast<size_t>(plane));
    // /climate/data [h, w, c] seen as [h, w * c]: a window row is one run of cols * c values.
    const data::Window hwc_window{w.row0, w.rows, w.col0 * m_c, w.cols * m_c};
    const auto u = [](int64_t v) { return static_cast<hsize_t>(v); };
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t index = indices[k];
      if (index < 0 || index >= size())
        throw Error("DeepCAM: sample index " + std::to_string(index) + " outside [0, " + std::to_string(size()) + ")");
      const std::string& path = m_paths[static_cast<size_t>(index)];
      int32_t* out = labels != nullptr ? labels + k * static_cast<size_t>(plane) : nullptr;
      LabelsRead got = LabelsRead::none;
      {
        auto lock = h5_lock();  // also keeps the file, and its descriptor, open while it is read
        const DeepcamFile& f = file(static_cast<size_t>(index));
        if (f.fd >= 0 && f.data_offset >= 0) {
          if (!pread_window(f.fd, f.data_offset, 1, m_h, m_w * m_c, sizeof(float), hwc_window, hwc.data()))
            throw data::BadSample(path + ": dataset /climate/data: window " + data::window_text(w) + " unreadable (" +
                                      errno_text() + ")",
                                  path, index);
        } else if (!h5_read_block(f.data.get(), {u(w.row0), u(w.col0), 0}, {u(w.rows), u(w.cols), u(m_c)},
                                  H5T_NATIVE_FLOAT, hwc.data())) {
          throw data::BadSample(path + ": dataset /climate/data: window " + data::window_text(w) + " unreadable (" +
                                    h5_error_text() + ")",
                                path, index);
        }
        if (out != nullptr && f.labels) {
          got = f.labels_int32 ? LabelsRead::as_int : LabelsRead::as_float;
          bool ok = false;
          if (f.fd >= 0 && f.labels_offset >= 0)
            ok = pread_window(f.fd, f.labels_offset, 1, m_h, m_w, sizeof(int32_t), w, out);
          else
            ok = h5_read_block(f.labels.get(), {u(w.row0), u(w.col0)}, {u(w.rows), u(w.cols)},
                               f.labels_int32 ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT,
                               f.labels_int32 ? static_cast<void*>(out) : static_cast<void*>(lab.data()));
          if (!ok)
            throw data::BadSample(path + ": dataset /climate/labels_0: window " + data::window_text(w) +
                                      " unreadable (" + (f.labels_offset >= 0 ? errno_text() : h5_error_text()) + ")",
                                  path, index);
        }
      }
      transpose_normalise(hwc.data(), images + k * static_cast<size_t>(plane * m_c), plane, path, index, place);
      if (out != nullptr) finish_labels(got, out, lab.data(), plane, path, index, place);
    }
  }

 private:
  enum class LabelsRead { none, as_float, as_int };  // how a sample's labels were read

  // The labels of one sample (or window) of `plane` pixels as read into `out` (as_int) or `lab`
  // (as_float): checked to be 0, 1 or 2 and left as int32 in `out`; all -1 (no class) when the
  // file has none (labels_optional). `place` follows a pixel's number in a message (" of the
  // window ...", or nothing for a whole sample).
  static void finish_labels(LabelsRead got, int32_t* out, const float* lab, int64_t plane, const std::string& path,
                            int64_t index, const std::string& place = "") {
    if (got == LabelsRead::none) {  // labels_optional: no class
      std::fill(out, out + plane, -1);
      return;
    }
    bool bad = false;
    if (got == LabelsRead::as_int) {
      for (int64_t p = 0; p < plane; ++p) bad |= static_cast<uint32_t>(out[p]) > 2u;
    } else {
      for (int64_t p = 0; p < plane; ++p) {
        const float v = lab[p];
        bad |= !(v == 0.0f || v == 1.0f || v == 2.0f);
        out[p] = static_cast<int32_t>(v);
      }
    }
    if (bad)
      for (int64_t p = 0; p < plane; ++p) {
        // The value as the float it was read as before integer labels were read as integers.
        const float v = got == LabelsRead::as_int ? static_cast<float>(out[p]) : lab[p];
        if (!(v == 0.0f || v == 1.0f || v == 2.0f))
          throw data::BadSample(path + ": dataset /climate/labels_0: value " + std::to_string(v) + " at pixel " +
                                    std::to_string(p) + place + " is not 0, 1 or 2 (index " + std::to_string(index) +
                                    ")",
                                path, index);
      }
  }

  // HWC -> CHW with (v - shift) * scale per channel. The common case (an x86 CPU with AVX2,
  // channels in multiples of 8) transposes 8 x 8 tiles in registers; otherwise blocks of pixels
  // keep the writes of each channel sequential. Either way each value is one subtraction and
  // one multiplication, rounded as written (no fused multiply-add): the same bits on every
  // path. NaN/inf is detected as it goes and located (by the scalar loop, pixel by pixel)
  // only when found.
  // `place` follows a pixel's number in a message, as in finish_labels.
  void transpose_normalise(const float* hwc, float* chw, int64_t plane, const std::string& path, int64_t index,
                           const std::string& place = "") const {
    if (transpose_normalise_fast(hwc, chw, plane, m_c, m_shift.data(), m_scale.data())) return;
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
                                         std::to_string(p) + place + ", channel " + std::to_string(c) + " (index " +
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
      throw Error(files + ": no stats.h5 found (beside them or one folder up); normalisation needs it: compute it "
                  "with `squall data stats --in " + folder + "` (with the --config training uses), or train on raw "
                  "values with data.normalize = false");
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

namespace {

// A whole numeric dataset of any shape as float64 (HDF5 converts), flattened.
std::vector<double> read_stats_doubles(hid_t file, const std::string& file_path, const std::string& name) {
  H5Handle ds = h5_open_dataset(file, file_path, name);
  const H5DatasetDesc d = h5_describe(ds.get());
  if (d.type_class != H5T_FLOAT && d.type_class != H5T_INTEGER)
    throw Error(file_path + ": dataset " + name + " has dtype " + d.dtype + ", expected numbers");
  size_t n = 1;
  for (const hsize_t x : d.dims) n *= static_cast<size_t>(x);
  std::vector<double> out(n);
  if (n > 0 && H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw Error(h5_with_cause(file_path + ": dataset " + name + ": unreadable"));
  return out;
}

}  // namespace

ChannelStats read_deepcam_stats(const std::string& stats_path) {
  auto lock = h5_lock();
  H5Handle file = h5_open_file(stats_path);
  // Read as float64 whatever the file stores: std = sqrt(sqmean - mean^2) cancels most of the
  // digits of a field whose spread is small beside its mean (surface pressure), and float32
  // operands would leave too few.
  const std::vector<double> mean = read_stats_doubles(file.get(), stats_path, "/climate/mean");
  const std::vector<double> sqmean = read_stats_doubles(file.get(), stats_path, "/climate/sqmean");
  const std::vector<double> min = read_stats_doubles(file.get(), stats_path, "/climate/minval");
  const std::vector<double> max = read_stats_doubles(file.get(), stats_path, "/climate/maxval");
  if (sqmean.size() != mean.size() || min.size() != mean.size() || max.size() != mean.size())
    throw Error(stats_path + ": /climate/{mean,sqmean,minval,maxval} differ in length");
  ChannelStats s;
  for (size_t i = 0; i < mean.size(); ++i) {
    s.mean.push_back(static_cast<float>(mean[i]));
    s.std.push_back(static_cast<float>(std::sqrt(std::max(0.0, sqmean[i] - mean[i] * mean[i]))));
    s.min.push_back(static_cast<float>(min[i]));
    s.max.push_back(static_cast<float>(max[i]));
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

std::unique_ptr<data::DataSource> open_deepcam_file_and_grid(const std::string& file, const OpenOptions& options,
                                                              std::vector<double>& lat, std::vector<double>& lon) {
  auto source = std::make_unique<DeepcamSource>(std::vector<std::string>{file}, "", options);
  source->read_grid(lat, lon);
  return source;
}

std::unique_ptr<data::DataSource> open_deepcam(const std::string& dir, const OpenOptions& options) {
  const std::vector<std::string> files = list_deepcam_files(dir);
  if (files.empty()) throw Error(dir + ": no DeepCAM files (data-*.h5)");
  return open_deepcam_files(files, find_deepcam_stats(dir), options);
}

}  // namespace squall::formats
