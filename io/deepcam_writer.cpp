// write_deepcam_file / write_deepcam_stats: DeepCAM's layout (docs/formats.md), written to a
// temporary name and renamed, so a file under its final name is always whole.
#include "io/deepcam_writer.hpp"

#include <filesystem>

#include "io/h5_util.hpp"
#include "src/core/error.hpp"

namespace squall::io {
namespace {

void write_dataset(hid_t group, const std::string& file, const std::string& name, hid_t file_type, hid_t mem_type,
                   const std::vector<hsize_t>& dims, const void* data) {
  H5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  H5Handle ds(H5Dcreate2(group, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!ds) throw Error(file + ": cannot create dataset /climate/" + name + ": " + h5_error_text());
  if (H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw Error(file + ": cannot write dataset /climate/" + name + ": " + h5_error_text());
}

// Creates "<path>.tmp" with a /climate group, lets `fill` write into the group, closes the
// file and renames it to `path`.
template <typename Fill>
void write_climate_file(const std::string& path, Fill&& fill) {
  const std::string tmp = path + ".tmp";
  {
    auto lock = h5_lock();
    H5Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file) throw Error(tmp + ": cannot create: " + h5_error_text());
    H5Handle group(H5Gcreate2(file.get(), "/climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!group) throw Error(tmp + ": cannot create group /climate: " + h5_error_text());
    try {
      fill(group.get(), tmp);
    } catch (...) {
      group.reset();
      file.reset();
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot rename from " + tmp + ": " + ec.message());
}

}  // namespace

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
  write_climate_file(path, [&](hid_t group, const std::string& file) {
    write_dataset(group, file, "data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {hh, ww, cc}, hwc);
    write_dataset(group, file, "labels_0", H5T_STD_I32LE, H5T_NATIVE_INT32, {hh, ww}, labels);
    if (!lat.empty()) write_dataset(group, file, "lat", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {hh}, lat.data());
    if (!lon.empty()) write_dataset(group, file, "lon", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {ww}, lon.data());
  });
}

void write_deepcam_stats(const std::string& path, const DeepcamStatsOut& stats) {
  const size_t c = stats.mean.size();
  for (const auto* v : {&stats.count, &stats.sqmean, &stats.minval, &stats.maxval})
    if (v->size() != c) throw Error(path + ": statistics of different lengths");
  write_climate_file(path, [&](hid_t group, const std::string& file) {
    const std::vector<hsize_t> dims = {static_cast<hsize_t>(c)};
    for (const auto& [name, v] : {std::pair{"count", &stats.count}, {"mean", &stats.mean}, {"sqmean", &stats.sqmean},
                                  {"minval", &stats.minval}, {"maxval", &stats.maxval}})
      write_dataset(group, file, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, dims, v->data());
  });
}

}  // namespace squall::io
