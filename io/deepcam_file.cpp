// Whole-file access to DeepCAM-layout files (deepcam_file.hpp).
#include "io/deepcam_file.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "io/h5_util.hpp"
#include "src/core/error.hpp"

namespace squall::io {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_data = "/climate/data";
constexpr const char* k_labels = "/climate/labels_0";

// Flushes a finished file to storage before the rename makes it visible under its name.
void sync_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb+");
  if (!f) throw Error(path + ": cannot reopen to flush");
  const bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  std::fclose(f);
  if (!ok) throw Error(path + ": cannot flush to storage");
}

void rename_into_place(const std::string& tmp, const std::string& dst) {
  sync_file(tmp);
  std::error_code ec;
  fs::rename(tmp, dst, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(dst + ": cannot rename from " + tmp + ": " + ec.message());
  }
}

// Removes the temporary file unless released (on any failure before the rename).
struct TempFile {
  std::string path;
  bool keep = false;
  ~TempFile() {
    std::error_code ec;
    if (!keep) fs::remove(path, ec);
  }
};

void check_label_count(const std::string& path, size_t got, int64_t h, int64_t w) {
  if (got != static_cast<size_t>(h * w))
    throw Error(path + ": " + std::to_string(got) + " labels for " + k_labels + " of " + std::to_string(h) + " x " +
                std::to_string(w) + " pixels");
}

void write_labels_dataset(hid_t file, const std::string& path, int64_t h, int64_t w, std::span<const int32_t> labels) {
  H5Handle ds;
  if (h5_exists(file, k_labels)) {
    ds = h5_open_dataset(file, path, k_labels);
    const H5DatasetDesc d = h5_describe(ds.get());
    if (d.dims.size() != 2 || d.dims[0] != static_cast<hsize_t>(h) || d.dims[1] != static_cast<hsize_t>(w))
      throw Error(path + ": dataset " + k_labels + " has shape " + h5_dims_text(d.dims) + ", expected [" +
                  std::to_string(h) + "," + std::to_string(w) + "]");
  } else {
    if (!h5_exists(file, "/climate")) {
      H5Handle group(H5Gcreate2(file, "/climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      if (!group) throw Error(path + ": cannot create group /climate: " + h5_error_text());
    }
    const hsize_t dims[2] = {static_cast<hsize_t>(h), static_cast<hsize_t>(w)};
    H5Handle space(H5Screate_simple(2, dims, nullptr));
    ds = H5Handle(H5Dcreate2(file, k_labels, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!ds) throw Error(path + ": cannot create dataset " + k_labels + ": " + h5_error_text());
  }
  if (H5Dwrite(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) < 0)
    throw Error(path + ": cannot write dataset " + k_labels + ": " + h5_error_text());
}

}  // namespace

DeepcamFields read_deepcam_fields(const std::string& path) {
  auto lock = h5_lock();
  H5Handle file = h5_open_file(path);
  H5Handle ds = h5_open_dataset(file.get(), path, k_data);
  const H5DatasetDesc d = h5_describe(ds.get());
  if (d.dims.size() != 3 || d.dtype != "float32")
    throw Error(path + ": dataset " + k_data + " is " + d.dtype + " " + h5_dims_text(d.dims) +
                ", expected float32 of rank 3 [h,w,c]");
  DeepcamFields f;
  f.h = static_cast<int64_t>(d.dims[0]);
  f.w = static_cast<int64_t>(d.dims[1]);
  f.c = static_cast<int64_t>(d.dims[2]);
  f.hwc.resize(static_cast<size_t>(f.h * f.w * f.c));
  if (H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.hwc.data()) < 0)
    throw Error(path + ": dataset " + k_data + ": unreadable (" + h5_error_text() + ")");
  return f;
}

std::vector<int32_t> read_deepcam_labels(const std::string& path) {
  auto lock = h5_lock();
  H5Handle file = h5_open_file(path);
  H5Handle ds = h5_open_dataset(file.get(), path, k_labels);
  const H5DatasetDesc d = h5_describe(ds.get());
  if (d.dims.size() != 2) throw Error(path + ": dataset " + k_labels + " has shape " + h5_dims_text(d.dims) + ", expected [h,w]");
  std::vector<int32_t> labels(static_cast<size_t>(d.dims[0] * d.dims[1]));
  if (H5Dread(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) < 0)
    throw Error(path + ": dataset " + k_labels + ": unreadable (" + h5_error_text() + ")");
  return labels;
}

void write_deepcam_relabelled(const std::string& src, const std::string& dst, std::span<const int32_t> labels) {
  TempFile tmp{dst + ".tmp"};
  std::error_code ec;
  fs::copy_file(src, tmp.path, fs::copy_options::overwrite_existing, ec);
  if (ec) throw Error(dst + ": cannot copy " + src + " to " + tmp.path + ": " + ec.message());
  {
    auto lock = h5_lock();
    H5Handle file(H5Fopen(tmp.path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    if (!file) throw Error(tmp.path + ": cannot open for writing: " + h5_error_text());
    H5Handle data = h5_open_dataset(file.get(), src, k_data);
    const H5DatasetDesc d = h5_describe(data.get());
    if (d.dims.size() != 3) throw Error(src + ": dataset " + k_data + " has shape " + h5_dims_text(d.dims) + ", expected [h,w,c]");
    const auto h = static_cast<int64_t>(d.dims[0]), w = static_cast<int64_t>(d.dims[1]);
    check_label_count(src, labels.size(), h, w);
    write_labels_dataset(file.get(), src, h, w, labels);
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) throw Error(tmp.path + ": flush failed: " + h5_error_text());
  }
  rename_into_place(tmp.path, dst);
  tmp.keep = true;
}

void write_deepcam_file(const std::string& path, const DeepcamFields& fields, std::span<const int32_t> labels) {
  if (fields.hwc.size() != static_cast<size_t>(fields.h * fields.w * fields.c))
    throw Error(path + ": " + std::to_string(fields.hwc.size()) + " values for " + k_data + " of shape [" +
                std::to_string(fields.h) + "," + std::to_string(fields.w) + "," + std::to_string(fields.c) + "]");
  check_label_count(path, labels.size(), fields.h, fields.w);
  TempFile tmp{path + ".tmp"};
  {
    auto lock = h5_lock();
    H5Handle file(H5Fcreate(tmp.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file) throw Error(tmp.path + ": cannot create: " + h5_error_text());
    H5Handle group(H5Gcreate2(file.get(), "/climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!group) throw Error(tmp.path + ": cannot create group /climate: " + h5_error_text());
    const hsize_t dims[3] = {static_cast<hsize_t>(fields.h), static_cast<hsize_t>(fields.w),
                             static_cast<hsize_t>(fields.c)};
    H5Handle space(H5Screate_simple(3, dims, nullptr));
    H5Handle ds(H5Dcreate2(file.get(), k_data, H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!ds) throw Error(tmp.path + ": cannot create dataset " + k_data + ": " + h5_error_text());
    if (H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, fields.hwc.data()) < 0)
      throw Error(tmp.path + ": cannot write dataset " + k_data + ": " + h5_error_text());
    write_labels_dataset(file.get(), tmp.path, fields.h, fields.w, labels);
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) throw Error(tmp.path + ": flush failed: " + h5_error_text());
  }
  rename_into_place(tmp.path, path);
  tmp.keep = true;
}

}  // namespace squall::io
