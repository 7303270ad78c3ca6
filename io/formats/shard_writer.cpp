// ShardWriter: squall's native HDF5 shards (layout in docs/formats.md). Samples are
// buffered and written a block at a time, one sample per chunk, so a reader fetches (and
// decompresses) exactly one chunk per sample.
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/formats/h5_util.hpp"
#include "io/formats/shard.hpp"
#include "src/core/error.hpp"

namespace squall::formats {

namespace {
constexpr hsize_t k_label_chunk = 4096;  // classification labels: 16 KiB chunks, not 4 bytes
constexpr size_t k_buffer_bytes = 8u << 20;
}  // namespace

struct ShardWriter::Impl {
  std::string path, tmp_path;
  nn::Shape sample;
  SampleType type;
  bool per_pixel;
  H5Handle file, images, labels;
  int64_t written = 0;    // samples in the file
  int64_t buffered = 0;   // samples in the buffers
  int64_t buffer_cap = 1;
  std::vector<unsigned char> image_buf;
  std::vector<int32_t> label_buf;
  bool closed = false;

  size_t image_bytes() const {
    return static_cast<size_t>(sample.per_sample()) * (type == SampleType::uint8 ? 1 : 4);
  }
  size_t label_count() const { return per_pixel ? static_cast<size_t>(sample.h() * sample.w()) : 1; }

  void flush() {
    if (buffered == 0) return;
    auto lock = h5_lock();
    const hsize_t start = static_cast<hsize_t>(written), n = static_cast<hsize_t>(buffered);
    auto write = [&](hid_t ds, int rank, hid_t mem_type, const void* data, const char* name) {
      std::vector<hsize_t> dims(static_cast<size_t>(rank)), offset(static_cast<size_t>(rank), 0);
      H5Handle space(H5Dget_space(ds));
      H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
      dims[0] = start + n;
      if (H5Dset_extent(ds, dims.data()) < 0) throw Error(tmp_path + ": " + name + ": cannot extend: " + h5_error_text());
      std::vector<hsize_t> count = dims;
      count[0] = n;
      offset[0] = start;
      H5Handle fspace(H5Dget_space(ds));
      H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, offset.data(), nullptr, count.data(), nullptr);
      H5Handle mspace(H5Screate_simple(rank, count.data(), nullptr));
      if (H5Dwrite(ds, mem_type, mspace.get(), fspace.get(), H5P_DEFAULT, data) < 0)
        throw Error(tmp_path + ": " + name + ": write failed: " + h5_error_text());
    };
    write(images.get(), 4, type == SampleType::uint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, image_buf.data(), "/images");
    write(labels.get(), per_pixel ? 3 : 1, H5T_NATIVE_INT32, label_buf.data(), "/labels");
    written += buffered;
    buffered = 0;
  }

  void append_raw(const void* image, const int32_t* label) {
    if (closed) throw Error(path + ": append after close");
    std::memcpy(image_buf.data() + static_cast<size_t>(buffered) * image_bytes(), image, image_bytes());
    std::memcpy(label_buf.data() + static_cast<size_t>(buffered) * label_count(), label, label_count() * sizeof(int32_t));
    if (++buffered == buffer_cap) flush();
  }
};

ShardWriter::ShardWriter(const std::string& path, nn::Shape sample, SampleType type, bool per_pixel_labels,
                         int compression, const ShardMeta& meta)
    : m_impl(std::make_unique<Impl>()) {
  Impl& s = *m_impl;
  s.path = path;
  s.tmp_path = path + ".tmp";
  s.sample = sample;
  s.type = type;
  s.per_pixel = per_pixel_labels;
  if (sample.rank != 4 || sample.n() != 1 || sample.c() < 1 || sample.h() < 1 || sample.w() < 1)
    throw Error(path + ": shard sample shape must be [1,c,h,w], got " + sample.str());
  if (compression < 0 || compression > 9) throw Error(path + ": compression must be 0..9");
  const size_t c = static_cast<size_t>(sample.c());
  for (const auto* v : {&meta.mean, &meta.std, &meta.min, &meta.max})
    if (!v->empty() && v->size() != c)
      throw Error(path + ": channel statistics need " + std::to_string(c) + " entries, got " + std::to_string(v->size()));
  if (!meta.channel_names.empty() && meta.channel_names.size() != c)
    throw Error(path + ": " + std::to_string(meta.channel_names.size()) + " channel names for " + std::to_string(c) +
                " channels");
  s.buffer_cap = std::max<int64_t>(1, static_cast<int64_t>(k_buffer_bytes / s.image_bytes()));
  s.image_buf.resize(static_cast<size_t>(s.buffer_cap) * s.image_bytes());
  s.label_buf.resize(static_cast<size_t>(s.buffer_cap) * s.label_count());

  auto lock = h5_lock();
  s.file = H5Handle(H5Fcreate(s.tmp_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  if (!s.file) throw Error(s.tmp_path + ": cannot create: " + h5_error_text());

  auto make = [&](const char* name, int rank, const hsize_t* chunk, hid_t file_type, bool shuffle) {
    std::vector<hsize_t> dims(chunk, chunk + rank), maxdims(chunk, chunk + rank);
    dims[0] = 0;
    maxdims[0] = H5S_UNLIMITED;
    H5Handle space(H5Screate_simple(rank, dims.data(), maxdims.data()));
    H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(dcpl.get(), rank, chunk);
    if (compression > 0) {
      // Byte shuffling first groups the exponents of float32 values, which deflate likes.
      if (shuffle) H5Pset_shuffle(dcpl.get());
      H5Pset_deflate(dcpl.get(), static_cast<unsigned>(compression));
    }
    H5Handle ds(H5Dcreate2(s.file.get(), name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
    if (!ds) throw Error(s.tmp_path + ": cannot create dataset " + name + ": " + h5_error_text());
    return ds;
  };
  const hsize_t image_chunk[4] = {1, static_cast<hsize_t>(sample.c()), static_cast<hsize_t>(sample.h()),
                                  static_cast<hsize_t>(sample.w())};
  s.images = make("/images", 4, image_chunk, type == SampleType::uint8 ? H5T_STD_U8LE : H5T_IEEE_F32LE,
                  type == SampleType::float32);
  if (per_pixel_labels) {
    const hsize_t label_chunk[3] = {1, image_chunk[2], image_chunk[3]};
    s.labels = make("/labels", 3, label_chunk, H5T_STD_I32LE, false);
  } else {
    s.labels = make("/labels", 1, &k_label_chunk, H5T_STD_I32LE, false);
  }

  const hid_t root = s.file.get();
  h5_write_attr_string(root, "format", "squall-shard");
  h5_write_attr_int(root, "format_version", 1);
  h5_write_attr_int(root, "per_pixel_labels", per_pixel_labels ? 1 : 0);
  h5_write_attr_int(root, "classes", static_cast<int64_t>(meta.class_names.size()));
  h5_write_attr_strings(root, "class_names", meta.class_names);
  h5_write_attr_strings(root, "channel_names", meta.channel_names);
  h5_write_attr_floats(root, "mean", meta.mean);
  h5_write_attr_floats(root, "std", meta.std);
  h5_write_attr_floats(root, "min", meta.min);
  h5_write_attr_floats(root, "max", meta.max);
  h5_write_attr_string(root, "source", meta.source);
}

ShardWriter::~ShardWriter() {
  if (!m_impl || m_impl->closed) return;
  try {
    auto lock = h5_lock();
    m_impl->images.reset();
    m_impl->labels.reset();
    m_impl->file.reset();
  } catch (...) {
  }
  std::error_code ec;
  std::filesystem::remove(m_impl->tmp_path, ec);
}

void ShardWriter::append(const float* image, const int32_t* label) {
  if (m_impl->type != SampleType::float32) throw Error(m_impl->path + ": float32 sample appended to a uint8 shard");
  m_impl->append_raw(image, label);
}

void ShardWriter::append(const uint8_t* image, const int32_t* label) {
  if (m_impl->type != SampleType::uint8) throw Error(m_impl->path + ": uint8 sample appended to a float32 shard");
  m_impl->append_raw(image, label);
}

int64_t ShardWriter::count() const { return m_impl->written + m_impl->buffered; }

void ShardWriter::close() {
  Impl& s = *m_impl;
  if (s.closed) return;
  {
    auto lock = h5_lock();
    s.flush();
    s.images.reset();
    s.labels.reset();
    if (H5Fflush(s.file.get(), H5F_SCOPE_GLOBAL) < 0) throw Error(s.tmp_path + ": flush failed: " + h5_error_text());
    s.file.reset();
  }
  std::error_code ec;
  std::filesystem::rename(s.tmp_path, s.path, ec);
  if (ec) throw Error(s.path + ": cannot rename from " + s.tmp_path + ": " + ec.message());
  s.closed = true;
}

std::string shard_name(const std::string& split, int index, int count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.h5", index, count);
  return split + buf;
}

const char* sample_type_name(SampleType type) { return type == SampleType::uint8 ? "uint8" : "float32"; }

}  // namespace squall::formats
