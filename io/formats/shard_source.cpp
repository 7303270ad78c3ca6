// open_shards: squall's native shards (docs/formats.md) as a DataSource. Every file is
// opened once, validated (datasets, ranks, dtypes, agreement between files) and kept open;
// read() fetches one chunk per sample under the HDF5 lock and converts outside it.
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <cmath>
#include <filesystem>

#include "io/formats/dataset.hpp"
#include "io/formats/h5_util.hpp"
#include "io/formats/shard.hpp"
#include "src/core/durable.hpp"
#include "src/core/error.hpp"

namespace squall::formats {
namespace {

struct ShardFile {
  std::string path;
  H5Handle file, images, labels;
  int64_t count = 0;
  // Direct chunk reads (one chunk = one sample, filters squall knows): the HDF5 lock is held
  // only to fetch the stored bytes; inflating, unshuffling and converting run in parallel.
  bool direct = false;
  int shuffle_filter = -1, deflate_filter = -1;  // position in the filter pipeline, -1: absent
  // Window reads straight from the file (read_window): HDF5's descriptor when each sample's
  // chunk of /images holds its values unfiltered, in the host's byte order (what ShardWriter
  // writes without compression); -1: a window is cut from the whole sample that read() reads.
  int raw_fd = -1;
  bool raw_labels = false;  // the same for per-pixel /labels (chunks [1, h, w], int32)
  std::vector<int32_t> class_labels;             // classification labels, read once at open
  std::vector<unsigned char> cached_images;      // every sample's raw bytes, when cached
  std::vector<int32_t> cached_pixel_labels;      // per-pixel labels, when cached
};

// Decides whether /images can be read chunk by chunk: chunks of exactly one sample and a
// pipeline of at most byte-shuffle then deflate (what ShardWriter writes).
void plan_direct_reads(ShardFile& f, const std::vector<hsize_t>& dims) {
  H5Handle dcpl(H5Dget_create_plist(f.images.get()));
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return;
  hsize_t chunk[4] = {0, 0, 0, 0};
  if (H5Pget_chunk(dcpl.get(), 4, chunk) != 4 || chunk[0] != 1 || chunk[1] != dims[1] || chunk[2] != dims[2] ||
      chunk[3] != dims[3])
    return;
  const int nfilters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, values[8] = {};
    size_t nvalues = 8;
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nvalues, values, 0, nullptr, nullptr);
    if (id == H5Z_FILTER_SHUFFLE && i == 0) f.shuffle_filter = i;
    else if (id == H5Z_FILTER_DEFLATE && f.deflate_filter < 0) f.deflate_filter = i;
    else return;  // another filter (or order): let HDF5 decode it
  }
  f.direct = true;
}

// Decides whether read_window can pread a window's rows from each sample's chunk: direct
// reads (a chunk per sample) with no filter at all, values stored as the host holds them, and a
// file whose addresses are offsets of a plain POSIX file. Compressed shards are not: a
// compressed chunk has to be read and inflated whole, whatever part of it is wanted.
void plan_window_reads(ShardFile& f, SampleType type, bool per_pixel_labels, const std::vector<hsize_t>& dims) {
  if constexpr (std::endian::native != std::endian::little) return;
  if (!f.direct || f.shuffle_filter >= 0 || f.deflate_filter >= 0) return;
  auto stored_as = [](hid_t ds, hid_t type_id) {
    H5Handle t(H5Dget_type(ds));
    return t && H5Tequal(t.get(), type_id) > 0;
  };
  if (!stored_as(f.images.get(), type == SampleType::uint8 ? H5T_STD_U8LE : H5T_IEEE_F32LE)) return;
  f.raw_fd = h5_raw_descriptor(f.file.get());
  if (f.raw_fd < 0 || !per_pixel_labels) return;
  H5Handle dcpl(H5Dget_create_plist(f.labels.get()));
  hsize_t chunk[3] = {0, 0, 0};
  f.raw_labels = H5Pget_layout(dcpl.get()) == H5D_CHUNKED && H5Pget_chunk(dcpl.get(), 3, chunk) == 3 &&
                 chunk[0] == 1 && chunk[1] == dims[2] && chunk[2] == dims[3] && H5Pget_nfilters(dcpl.get()) == 0 &&
                 stored_as(f.labels.get(), H5T_STD_I32LE);
}

// Opens and validates one shard; `info` receives what it holds.
ShardFile open_shard(const std::string& path, ShardFileInfo& info) {
  auto lock = h5_lock();
  ShardFile f;
  f.path = path;
  f.file = h5_open_file(path);
  f.images = h5_open_dataset(f.file.get(), path, "/images");
  if (!h5_exists(f.file.get(), "/labels"))
    throw Error(path + ": dataset /labels is missing: " + std::filesystem::path(path).parent_path().string() +
                " holds unlabeled shards; training and evaluation need labelled samples");
  f.labels = h5_open_dataset(f.file.get(), path, "/labels");
  const H5DatasetDesc im = h5_describe(f.images.get());
  const H5DatasetDesc lb = h5_describe(f.labels.get());
  if (im.dims.size() != 4)
    throw Error(path + ": dataset /images has shape " + h5_dims_text(im.dims) + ", expected rank 4 [n,c,h,w]");
  if (im.dtype == "uint8") info.type = SampleType::uint8;
  else if (im.dtype == "float32") info.type = SampleType::float32;
  else throw Error(path + ": dataset /images has dtype " + im.dtype + ", expected uint8 or float32");
  if (lb.type_class != H5T_INTEGER || lb.type_size > 4)
    throw Error(path + ": dataset /labels has dtype " + lb.dtype + ", expected int32");
  f.count = static_cast<int64_t>(im.dims[0]);
  info.count = f.count;
  info.sample = nn::Shape(1, static_cast<int64_t>(im.dims[1]), static_cast<int64_t>(im.dims[2]),
                          static_cast<int64_t>(im.dims[3]));
  if (lb.dims.size() == 1) {
    info.per_pixel_labels = false;
  } else if (lb.dims.size() == 3 && lb.dims[1] == im.dims[2] && lb.dims[2] == im.dims[3]) {
    info.per_pixel_labels = true;
  } else {
    throw Error(path + ": dataset /labels has shape " + h5_dims_text(lb.dims) + ", expected [" +
                std::to_string(f.count) + "] or [" + std::to_string(f.count) + "," + std::to_string(im.dims[2]) + "," +
                std::to_string(im.dims[3]) + "] for /images " + h5_dims_text(im.dims));
  }
  if (lb.dims[0] != im.dims[0])
    throw Error(path + ": dataset /labels holds " + std::to_string(lb.dims[0]) + " labels but /images holds " +
                std::to_string(im.dims[0]) + " samples");
  plan_direct_reads(f, im.dims);
  plan_window_reads(f, info.type, info.per_pixel_labels, im.dims);
  if (!info.per_pixel_labels) {
    f.class_labels.resize(static_cast<size_t>(f.count));
    if (f.count > 0 && H5Dread(f.labels.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.class_labels.data()) < 0)
      throw Error(path + ": dataset /labels: unreadable (" + h5_error_text() + ")");
  }

  {  // compression of /images, for reports
    H5Handle dcpl(H5Dget_create_plist(f.images.get()));
    info.compression = 0;
    const int nfilters = H5Pget_nfilters(dcpl.get());
    for (int i = 0; i < nfilters; ++i) {
      unsigned flags = 0, values[4] = {0, 0, 0, 0};
      size_t nvalues = 4;
      if (H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nvalues, values, 0, nullptr, nullptr) ==
              H5Z_FILTER_DEFLATE && nvalues > 0)
        info.compression = static_cast<int>(values[0]);
    }
  }

  const hid_t root = f.file.get();
  ShardMeta& m = info.meta;
  h5_read_attr_strings(root, "class_names", m.class_names, path);
  h5_read_attr_strings(root, "channel_names", m.channel_names, path);
  h5_read_attr_floats(root, "mean", m.mean, path);
  h5_read_attr_floats(root, "std", m.std, path);
  h5_read_attr_floats(root, "min", m.min, path);
  h5_read_attr_floats(root, "max", m.max, path);
  h5_read_attr_string(root, "source", m.source, path);
  const size_t c = static_cast<size_t>(info.sample.c());
  for (const auto& [name, v] : {std::pair{"mean", &m.mean}, {"std", &m.std}, {"min", &m.min}, {"max", &m.max}})
    if (!v->empty() && v->size() != c)
      throw Error(path + ": attribute " + name + " has " + std::to_string(v->size()) + " entries for " +
                  std::to_string(c) + " channels");
  return f;
}

class ShardSource final : public data::DataSource {
 public:
  ShardSource(const std::vector<std::string>& paths, const OpenOptions& options) {
    if (paths.empty()) throw Error("no shard files given");
    m_offsets.push_back(0);
    for (const std::string& path : paths) {
      ShardFileInfo fi;
      ShardFile f = open_shard(path, fi);
      if (m_files.empty()) {
        m_first = fi;
      } else if (!(fi.sample == m_first.sample) || fi.type != m_first.type ||
                 fi.per_pixel_labels != m_first.per_pixel_labels) {
        throw Error(path + ": holds " + sample_type_name(fi.type) + " samples " + fi.sample.str() +
                    (fi.per_pixel_labels ? " with per-pixel labels" : "") + " but " + m_files.front().path + " holds " +
                    sample_type_name(m_first.type) + " samples " + m_first.sample.str() +
                    (m_first.per_pixel_labels ? " with per-pixel labels" : ""));
      }
      m_offsets.push_back(m_offsets.back() + f.count);
      m_files.push_back(std::move(f));
    }
    cache_if_small(options.cache_bytes);
    const ShardMeta& meta = m_first.meta;
    const size_t c = static_cast<size_t>(m_first.sample.c());
    m_shift.assign(c, 0.0f);
    m_scale.assign(c, 1.0f);
    const std::string& first = m_files.front().path;
    if (options.normalize) {
      if (options.fixed) {
        m_norm = *options.fixed;
        if (m_norm.kind != "none" && m_norm.mean.size() != c)
          throw Error(std::filesystem::path(first).parent_path().string() + ": " + std::to_string(c) +
                      " channels, but the given normalisation (" + m_norm.source + ") has statistics for " +
                      std::to_string(m_norm.mean.size()));
      } else {
        const std::string kind = data::k_normalization_kinds.name(options.normalization);
        switch (options.normalization) {
          case data::NormalizationKind::zscore:
            if (meta.mean.size() != c || meta.std.size() != c)
              throw Error(first + ": no per-channel mean/std attributes; zscore normalisation needs them");
            m_norm = {kind, meta.mean, meta.std, 1.0f, first + " (its mean and std attributes)"};
            break;
          case data::NormalizationKind::minmax:
            if (meta.min.size() != c || meta.max.size() != c)
              throw Error(first + ": no per-channel min/max attributes; minmax normalisation needs them");
            m_norm = {kind, meta.min, {}, 1.0f, first + " (its min and max attributes)"};
            for (size_t i = 0; i < c; ++i) m_norm.std.push_back(meta.max[i] - meta.min[i]);
            break;
        }
      }
      if (m_norm.kind != "none") {
        if (m_norm.input_scale != 1.0f)
          throw Error(first + ": shard values are not scaled before normalisation, but the given normalisation (" +
                      m_norm.source + ") scales them by " + std::to_string(m_norm.input_scale));
        for (size_t i = 0; i < c; ++i) {
          if (!(m_norm.std[i] > 0.0f))
            throw Error(m_norm.source + ": channel " + std::to_string(i) + " has a zero spread (std or max - min); " +
                        m_norm.kind + " normalisation impossible");
          m_shift[i] = m_norm.mean[i];
          m_scale[i] = 1.0f / m_norm.std[i];
        }
      }
    }
    m_info.sample = m_first.sample;
    m_info.class_names = meta.class_names;
    m_info.channel_names = meta.channel_names;  // as the writer named them (may be empty)
    m_info.channel_units.assign(meta.channel_names.size(), "");
    m_info.classes = static_cast<int64_t>(meta.class_names.size());
    m_info.per_pixel_labels = m_first.per_pixel_labels;
    m_info.description = "shards (" + std::to_string(m_files.size()) + " files, " + std::to_string(size()) +
                         " samples, " + sample_type_name(m_first.type) + " " + m_first.sample.str() + ", " +
                         std::filesystem::path(m_files.front().path).parent_path().string() + ")";
    if (!meta.source.empty()) m_info.description = meta.source + ": " + m_info.description;
  }

  const data::DatasetInfo& info() const override { return m_info; }
  const data::Normalization& normalization() const override { return m_norm; }
  int64_t size() const override { return m_offsets.back(); }
  std::vector<std::string> files() const override {
    std::vector<std::string> out;
    for (const ShardFile& f : m_files) out.push_back(f.path);
    return out;
  }
  std::vector<int64_t> file_offsets() const override { return m_offsets; }

  void read(std::span<const int64_t> indices, float* images, int32_t* labels) const override {
    const int64_t per = m_first.sample.per_sample();
    const int64_t plane = m_first.sample.h() * m_first.sample.w();
    const int64_t label_count = m_first.per_pixel_labels ? plane : 1;
    const bool is_u8 = m_first.type == SampleType::uint8;
    std::vector<uint8_t> raw_u8(is_u8 ? static_cast<size_t>(per) : 0);
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t index = indices[k];
      if (index < 0 || index >= size())
        throw Error("shards: sample index " + std::to_string(index) + " outside [0, " + std::to_string(size()) + ")");
      const size_t fi = static_cast<size_t>(std::upper_bound(m_offsets.begin(), m_offsets.end(), index) - m_offsets.begin() - 1);
      const ShardFile& f = m_files[fi];
      const int64_t local = index - m_offsets[fi];
      float* dst = images + k * static_cast<size_t>(per);
      int32_t* lab = labels + k * static_cast<size_t>(label_count);
      auto where = [&](const char* dataset) {
        return f.path + ": dataset " + dataset + ": sample " + std::to_string(local) + " (index " +
               std::to_string(index) + ")";
      };
      const size_t raw_bytes = static_cast<size_t>(per) * (is_u8 ? 1 : 4);
      void* raw_out = is_u8 ? static_cast<void*>(raw_u8.data()) : static_cast<void*>(dst);
      if (!f.cached_images.empty()) {
        std::memcpy(raw_out, f.cached_images.data() + static_cast<size_t>(local) * raw_bytes, raw_bytes);
        if (m_first.per_pixel_labels)
          std::memcpy(lab, f.cached_pixel_labels.data() + static_cast<size_t>(local * label_count),
                      static_cast<size_t>(label_count) * sizeof(int32_t));
        else
          lab[0] = f.class_labels[static_cast<size_t>(local)];
      } else if (f.direct) {
        thread_local std::vector<unsigned char> stored, inflated;
        uint32_t mask = 0;
        {
          auto lock = h5_lock();
          const hsize_t offset[4] = {static_cast<hsize_t>(local), 0, 0, 0};
          hsize_t nbytes = 0;
          if (H5Dget_chunk_storage_size(f.images.get(), offset, &nbytes) < 0 || nbytes == 0)
            throw data::BadSample(where("/images") + ": chunk missing (" + h5_error_text() + ")", f.path, index);
          // An unfiltered chunk of the right size is the sample itself: read it in place.
          const bool in_place = f.deflate_filter < 0 && f.shuffle_filter < 0 && nbytes == raw_bytes;
          stored.resize(in_place ? 0 : static_cast<size_t>(nbytes));
          if (H5Dread_chunk(f.images.get(), H5P_DEFAULT, offset, &mask, in_place ? raw_out : stored.data()) < 0)
            throw data::BadSample(where("/images") + ": unreadable chunk (" + h5_error_text() + ")", f.path, index);
          if (in_place) mask = ~0u;  // nothing left to decode
          if (m_first.per_pixel_labels &&
              !read_rows(f.labels.get(), 3, local, H5T_NATIVE_INT32, lab))
            throw data::BadSample(where("/labels") + ": unreadable chunk (" + h5_error_text() + ")", f.path, index);
        }
        if (mask != ~0u)
          decode_chunk(f, mask, stored, inflated, raw_out, raw_bytes, is_u8 ? 1 : 4, [&](const std::string& why) {
            return data::BadSample(where("/images") + ": " + why, f.path, index);
          });
        if (!m_first.per_pixel_labels) lab[0] = f.class_labels[static_cast<size_t>(local)];
      } else {
        auto lock = h5_lock();
        // float32 samples land in the output directly; uint8 ones in a small buffer.
        if (!read_rows(f.images.get(), 4, local, is_u8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, raw_out))
          throw data::BadSample(where("/images") + ": unreadable chunk (" + h5_error_text() + ")", f.path, index);
        if (!read_rows(f.labels.get(), m_first.per_pixel_labels ? 3 : 1, local, H5T_NATIVE_INT32, lab))
          throw data::BadSample(where("/labels") + ": unreadable chunk (" + h5_error_text() + ")", f.path, index);
      }
      finish(dst, raw_u8.data(), plane, lab, label_count, where, f.path, index);
    }
  }

  // The window `w` of each sample. Shards whose chunks are stored raw (ShardWriter without
  // compression: what `squall data` and `squall data climate` write by default) are read a
  // window row at a time from each sample's chunk, so the bytes read are the window's; a
  // compressed shard's chunk has to be read and inflated whole, and its windows are cut from
  // read()'s whole samples, as are those of shards held in memory (cache_bytes). Normalised and
  // checked by the same code as read(): the same values, bit for bit, as the window of read()'s
  // sample.
  void read_window(std::span<const int64_t> indices, const data::Window& w, float* images,
                   int32_t* labels) const override {
    data::check_window(*this, w);
    const int64_t c = m_first.sample.c(), h = m_first.sample.h(), width = m_first.sample.w();
    const int64_t plane = w.rows * w.cols;
    const int64_t label_count = m_first.per_pixel_labels ? plane : 1;
    const bool is_u8 = m_first.type == SampleType::uint8;
    const size_t element = is_u8 ? 1 : 4;
    thread_local std::vector<uint8_t> raw_u8;
    thread_local std::vector<float> whole;
    thread_local std::vector<int32_t> whole_labels;
    const auto u = [](int64_t v) { return static_cast<hsize_t>(v); };
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t index = indices[k];
      if (index < 0 || index >= size())
        throw Error("shards: sample index " + std::to_string(index) + " outside [0, " + std::to_string(size()) + ")");
      const size_t fi = static_cast<size_t>(std::upper_bound(m_offsets.begin(), m_offsets.end(), index) - m_offsets.begin() - 1);
      const ShardFile& f = m_files[fi];
      const int64_t local = index - m_offsets[fi];
      float* dst = images + k * static_cast<size_t>(c * plane);
      int32_t* lab = labels + k * static_cast<size_t>(label_count);
      if (f.raw_fd < 0 || !f.cached_images.empty()) {  // the whole sample, cropped
        whole.resize(static_cast<size_t>(c * h * width));
        whole_labels.resize(static_cast<size_t>(m_first.per_pixel_labels ? h * width : 1));
        read(std::span<const int64_t>(&indices[k], 1), whole.data(), whole_labels.data());
        data::crop_planes(whole.data(), dst, c, h, width, w);
        if (m_first.per_pixel_labels) data::crop_planes(whole_labels.data(), lab, 1, h, width, w);
        else lab[0] = whole_labels[0];
        continue;
      }
      auto where = [&](const char* dataset) {
        return f.path + ": dataset " + dataset + ": sample " + std::to_string(local) + " (index " +
               std::to_string(index) + "), window " + data::window_text(w);
      };
      haddr_t image_chunk = HADDR_UNDEF, label_chunk = HADDR_UNDEF;
      {
        auto lock = h5_lock();
        const hsize_t offset[4] = {u(local), 0, 0, 0};
        image_chunk = h5_raw_chunk_address(f.images.get(), offset, u(c * h * width) * element);
        if (image_chunk == HADDR_UNDEF)
          throw data::BadSample(where("/images") + ": chunk missing or not stored raw (" + h5_error_text() + ")",
                                f.path, index);
        if (f.raw_labels) {
          label_chunk = h5_raw_chunk_address(f.labels.get(), offset, u(h * width) * sizeof(int32_t));
          if (label_chunk == HADDR_UNDEF)
            throw data::BadSample(where("/labels") + ": chunk missing or not stored raw (" + h5_error_text() + ")",
                                  f.path, index);
        } else if (m_first.per_pixel_labels &&
                   !h5_read_block(f.labels.get(), {u(local), u(w.row0), u(w.col0)}, {1, u(w.rows), u(w.cols)},
                                  H5T_NATIVE_INT32, lab)) {
          throw data::BadSample(where("/labels") + ": unreadable (" + h5_error_text() + ")", f.path, index);
        }
      }
      // The file stays open as long as the source: the reads need no lock.
      if (is_u8) raw_u8.resize(static_cast<size_t>(c * plane));
      void* raw_out = is_u8 ? static_cast<void*>(raw_u8.data()) : static_cast<void*>(dst);
      if (!pread_window(f.raw_fd, static_cast<int64_t>(image_chunk), c, h, width, element, w, raw_out))
        throw data::BadSample(where("/images") + ": unreadable (" + errno_text() + ")", f.path, index);
      if (f.raw_labels && !pread_window(f.raw_fd, static_cast<int64_t>(label_chunk), 1, h, width, sizeof(int32_t), w, lab))
        throw data::BadSample(where("/labels") + ": unreadable (" + errno_text() + ")", f.path, index);
      if (!m_first.per_pixel_labels) lab[0] = f.class_labels[static_cast<size_t>(local)];
      finish(dst, raw_u8.data(), plane, lab, label_count, where, f.path, index);
    }
  }

 private:
  // The end of a sample's (or window's) read: its `plane` pixels per channel normalised in `dst`
  // (uint8 samples converted from `raw_u8`; float32 ones, already in `dst`, checked to be
  // finite) and its `label_count` labels checked against the classes. `where(dataset)` names
  // the file, dataset and sample in a message.
  template <class Where>
  void finish(float* dst, const uint8_t* raw_u8, int64_t plane, const int32_t* lab, int64_t label_count, Where&& where,
              const std::string& path, int64_t index) const {
    const bool is_u8 = m_first.type == SampleType::uint8;
    for (int64_t c = 0; c < m_first.sample.c(); ++c) {
      const float shift = m_shift[static_cast<size_t>(c)], scale = m_scale[static_cast<size_t>(c)];
      float* out = dst + c * plane;
      if (is_u8) {
        const uint8_t* in = raw_u8 + c * plane;
        for (int64_t p = 0; p < plane; ++p) out[p] = (static_cast<float>(in[p]) - shift) * scale;
      } else {
        for (int64_t p = 0; p < plane; ++p) {
          if (!std::isfinite(out[p]))
            throw data::BadSample(where("/images") + ": value " + std::to_string(out[p]) + " at channel " +
                                      std::to_string(c) + ", pixel " + std::to_string(p),
                                  path, index);
          out[p] = (out[p] - shift) * scale;
        }
      }
    }
    if (m_info.classes > 0)
      for (int64_t p = 0; p < label_count; ++p)
        if (lab[p] < 0 || lab[p] >= m_info.classes)
          throw data::BadSample(where("/labels") + ": label " + std::to_string(lab[p]) +
                                    (label_count > 1 ? " at pixel " + std::to_string(p) : "") + " outside [0, " +
                                    std::to_string(m_info.classes) + ")",
                                path, index);
  }

  // Small datasets (Fashion-MNIST: 47 MB) are read once, one bulk read per shard, and then
  // served from memory: per-sample HDF5 calls would otherwise take CPU time from training.
  // A shard whose bulk read fails is left to stream, so that its bad chunk is reported
  // per sample (file, dataset, index) when it is read.
  void cache_if_small(int64_t budget) {
    const int64_t per = m_first.sample.per_sample() * (m_first.type == SampleType::uint8 ? 1 : 4);
    const int64_t labels = m_first.per_pixel_labels ? m_first.sample.h() * m_first.sample.w() * 4 : 0;
    if (budget <= 0 || m_offsets.back() * (per + labels) > budget) return;
    auto lock = h5_lock();
    for (ShardFile& f : m_files) {
      if (f.count == 0) continue;
      std::vector<unsigned char> images(static_cast<size_t>(f.count * per));
      const hid_t type = m_first.type == SampleType::uint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
      if (H5Dread(f.images.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, images.data()) < 0) continue;
      if (m_first.per_pixel_labels) {
        std::vector<int32_t> pixel_labels(static_cast<size_t>(f.count * labels / 4));
        if (H5Dread(f.labels.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, pixel_labels.data()) < 0) continue;
        f.cached_pixel_labels = std::move(pixel_labels);
      }
      f.cached_images = std::move(images);
    }
  }

  // Undoes the stored chunk's filters (a bit set in `mask` means that filter was skipped
  // for this chunk) into `out` of exactly `raw_bytes` bytes.
  template <class MakeError>
  static void decode_chunk(const ShardFile& f, uint32_t mask, const std::vector<unsigned char>& stored,
                           std::vector<unsigned char>& inflated, void* out, size_t raw_bytes, size_t element,
                           MakeError&& error) {
    const bool deflated = f.deflate_filter >= 0 && !(mask & (1u << f.deflate_filter));
    const bool shuffled = f.shuffle_filter >= 0 && !(mask & (1u << f.shuffle_filter)) && element > 1;
    const unsigned char* bytes = stored.data();
    size_t size = stored.size();
    if (deflated) {
      inflated.resize(raw_bytes);
      uLongf out_len = static_cast<uLongf>(raw_bytes);
      const int rc = uncompress(inflated.data(), &out_len, bytes, static_cast<uLong>(size));
      if (rc != Z_OK) throw error("corrupt deflate stream (zlib error " + std::to_string(rc) + ")");
      bytes = inflated.data();
      size = out_len;
    }
    if (size != raw_bytes)
      throw error("chunk holds " + std::to_string(size) + " bytes, expected " + std::to_string(raw_bytes));
    auto* dst = static_cast<unsigned char*>(out);
    if (!shuffled) {
      std::memcpy(dst, bytes, raw_bytes);
      return;
    }
    // HDF5's shuffle stores byte 0 of every element, then byte 1, ...
    const size_t n = raw_bytes / element;
    for (size_t b = 0; b < element; ++b)
      for (size_t i = 0; i < n; ++i) dst[i * element + b] = bytes[b * n + i];
  }

  // Reads row `row` (the first dimension) of a dataset of rank `rank` into `out`.
  static bool read_rows(hid_t ds, int rank, int64_t row, hid_t mem_type, void* out) {
    hsize_t dims[4] = {0, 0, 0, 0};
    H5Handle fspace(H5Dget_space(ds));
    H5Sget_simple_extent_dims(fspace.get(), dims, nullptr);
    hsize_t offset[4] = {static_cast<hsize_t>(row), 0, 0, 0};
    dims[0] = 1;
    if (H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, offset, nullptr, dims, nullptr) < 0) return false;
    H5Handle mspace(H5Screate_simple(rank, dims, nullptr));
    return H5Dread(ds, mem_type, mspace.get(), fspace.get(), H5P_DEFAULT, out) >= 0;
  }

  std::vector<ShardFile> m_files;
  std::vector<int64_t> m_offsets;
  ShardFileInfo m_first;
  data::DatasetInfo m_info;
  data::Normalization m_norm;
  std::vector<float> m_shift, m_scale;  // normalised = (raw - shift) * scale, per channel
};

}  // namespace

ShardFileInfo read_shard_info(const std::string& path) {
  ShardFileInfo info;
  open_shard(path, info);
  return info;
}

std::unique_ptr<data::DataSource> open_shard_files(const std::vector<std::string>& files, const OpenOptions& options) {
  return std::make_unique<ShardSource>(files, options);
}

std::unique_ptr<data::DataSource> open_shards(const std::string& dir, const std::string& split,
                                               const OpenOptions& options) {
  const std::vector<std::string> files = list_shards(dir, split);
  if (files.empty())
    throw Error(dir + ": no " + split + " shards (" + split + "-NNNNN-of-MMMMM.h5); see docs/formats.md");
  return open_shard_files(files, options);
}

}  // namespace squall::formats
