// Whole-file access to DeepCAM-layout files (deepcam_file.hpp), and the HDF5 mask files of
// `squall predict` (mask.hpp).
#include "io/formats/deepcam_file.hpp"

#include <cstdio>
#include <filesystem>
#include <utility>

#include "io/formats/h5_util.hpp"
#include "io/formats/mask.hpp"
#include "io/formats/netcdf_mask.hpp"
#include "src/core/durable.hpp"
#include "src/core/error.hpp"

namespace squall::formats {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_data = "/climate/data";
constexpr const char* k_labels = "/climate/labels_0";

// The finished temporary file flushed to storage, then renamed over `dst` (src/core/durable.hpp).
void rename_into_place(const std::string& tmp, const std::string& dst) {
  sync_file(tmp);
  rename_durably(tmp, dst);
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

// /climate/<name> of the given type and shape, written whole.
void write_climate_dataset(hid_t group, const std::string& file, const std::string& name, hid_t file_type,
                           hid_t mem_type, const std::vector<hsize_t>& dims, const void* data) {
  H5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  H5Handle ds(H5Dcreate2(group, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!ds) throw Error(file + ": cannot create dataset /climate/" + name + ": " + h5_error_text());
  if (H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw Error(file + ": cannot write dataset /climate/" + name + ": " + h5_error_text());
}

// A new file with a /climate group that `fill(group, temporary path)` writes into: created
// as `path`.tmp, flushed to storage and renamed, so `path` is whole or absent.
template <class Fill>
void write_new_climate_file(const std::string& path, Fill&& fill) {
  TempFile tmp{path + ".tmp"};
  {
    auto lock = h5_lock();
    H5Handle file(H5Fcreate(tmp.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file) throw Error(tmp.path + ": cannot create: " + h5_error_text());
    H5Handle group(H5Gcreate2(file.get(), "/climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!group) throw Error(tmp.path + ": cannot create group /climate: " + h5_error_text());
    fill(group.get(), tmp.path);
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) throw Error(tmp.path + ": flush failed: " + h5_error_text());
  }
  rename_into_place(tmp.path, path);
  tmp.keep = true;
}

// A dataset at the root of a mask file.
void write_root_dataset(hid_t loc, const std::string& file, const std::string& name, hid_t file_type, hid_t mem_type,
                   const std::vector<hsize_t>& dims, const void* data) {
  H5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  H5Handle ds(H5Dcreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!ds) throw Error(file + ": cannot create dataset /" + name + ": " + h5_error_text());
  if (H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw Error(file + ": cannot write dataset /" + name + ": " + h5_error_text());
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
  write_deepcam_file(path, fields.hwc.data(), fields.h, fields.w, fields.c, labels.data(), {}, {});
}

void write_deepcam_file(const std::string& path, const float* hwc, int64_t h, int64_t w, int64_t c,
                        const int32_t* labels, const std::vector<double>& lat, const std::vector<double>& lon) {
  if (h < 1 || w < 1 || c < 1) throw Error(path + ": empty sample shape");
  if ((!lat.empty() && static_cast<int64_t>(lat.size()) != h) || (!lon.empty() && static_cast<int64_t>(lon.size()) != w))
    throw Error(path + ": latitudes/longitudes do not match the grid");
  const hsize_t hh = static_cast<hsize_t>(h), ww = static_cast<hsize_t>(w), cc = static_cast<hsize_t>(c);
  std::vector<int32_t> zeros;
  if (!labels) {
    zeros.assign(static_cast<size_t>(h * w), 0);
    labels = zeros.data();
  }
  write_new_climate_file(path, [&](hid_t group, const std::string& file) {
    write_climate_dataset(group, file, "data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {hh, ww, cc}, hwc);
    write_climate_dataset(group, file, "labels_0", H5T_STD_I32LE, H5T_NATIVE_INT32, {hh, ww}, labels);
    if (!lat.empty()) write_climate_dataset(group, file, "lat", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {hh}, lat.data());
    if (!lon.empty()) write_climate_dataset(group, file, "lon", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {ww}, lon.data());
  });
}

void write_deepcam_stats(const std::string& path, const DeepcamStatsOut& stats) {
  const size_t c = stats.mean.size();
  for (const auto* v : {&stats.count, &stats.sqmean, &stats.minval, &stats.maxval})
    if (v->size() != c) throw Error(path + ": statistics of different lengths");
  write_new_climate_file(path, [&](hid_t group, const std::string& file) {
    const std::vector<hsize_t> dims = {static_cast<hsize_t>(c)};
    for (const auto& [name, v] : {std::pair{"count", &stats.count}, {"mean", &stats.mean}, {"sqmean", &stats.sqmean},
                                  {"minval", &stats.minval}, {"maxval", &stats.maxval}})
      write_climate_dataset(group, file, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, dims, v->data());
  });
}

void write_mask_h5(const std::string& path, const MaskOutput& m) {
  const auto t = static_cast<hsize_t>(m.times), h = static_cast<hsize_t>(m.h), w = static_cast<hsize_t>(m.w);
  const auto classes = static_cast<hsize_t>(m.class_names.size());
  if (m.mask.size() != t * h * w) throw Error(path + ": a mask of " + std::to_string(m.mask.size()) + " pixels for " +
                                              std::to_string(t) + " x " + std::to_string(h) + " x " + std::to_string(w));
  if (!m.probabilities.empty() && m.probabilities.size() != t * classes * h * w)
    throw Error(path + ": probabilities of the wrong size");
  TempFile tmp{path + ".tmp"};
  {
    auto lock = h5_lock();
    H5Handle file(H5Fcreate(tmp.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file) throw Error(tmp.path + ": cannot create: " + h5_error_text());
    write_root_dataset(file.get(), tmp.path, "mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, {t, h, w}, m.mask.data());
    {
      H5Handle ds = h5_open_dataset(file.get(), tmp.path, "/mask");
      h5_write_attr_strings(ds.get(), "class_names", m.class_names);
    }
    if (!m.probabilities.empty())
      write_root_dataset(file.get(), tmp.path, "probabilities", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {t, classes, h, w},
                    m.probabilities.data());
    if (!m.lat.empty()) write_root_dataset(file.get(), tmp.path, "lat", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {h}, m.lat.data());
    if (!m.lon.empty()) write_root_dataset(file.get(), tmp.path, "lon", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {w}, m.lon.data());
    if (!m.time.empty()) {
      write_root_dataset(file.get(), tmp.path, "time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {t}, m.time.data());
      H5Handle ds = h5_open_dataset(file.get(), tmp.path, "/time");
      if (!m.time_units.empty()) h5_write_attr_string(ds.get(), "units", m.time_units);
      if (!m.calendar.empty()) h5_write_attr_string(ds.get(), "calendar", m.calendar);
    }
    for (const auto& [key, value] : m.attributes) h5_write_attr_string(file.get(), key, value);
    h5_write_attr_string(file.get(), k_mask_marker, k_mask_marker_value);
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) throw Error(tmp.path + ": flush failed: " + h5_error_text());
  }
  rename_into_place(tmp.path, path);
  tmp.keep = true;
}

bool is_squall_mask(const std::string& path) {
  if (std::filesystem::path(path).extension() == ".nc") return netcdf_is_squall_mask(path);
  auto lock = h5_lock();
  try {
    H5Handle file = h5_open_file(path);
    std::string value;
    return h5_read_attr_string(file.get(), k_mask_marker, value, path) && value == k_mask_marker_value;
  } catch (const Error&) {
    return false;
  }
}

void read_deepcam_grid(const std::string& path, std::vector<double>& lat, std::vector<double>& lon) {
  auto lock = h5_lock();
  H5Handle file = h5_open_file(path);
  lat = h5_read_doubles_if_present(file.get(), path, "/climate/lat");
  lon = h5_read_doubles_if_present(file.get(), path, "/climate/lon");
}

}  // namespace squall::formats
