#pragma once
// Small climate datasets for the tests of `squall data stats` (tests/unit/test_data_stats.cpp,
// tests/mpi/launch_stats.cpp): netCDF files written with the netCDF C library and DeepCAM
// files, whose values come from one function of (channel, sample, row, column), and the
// per-channel statistics of those values computed here, independently of squall's code: in
// long double, samples summed in reverse order. Header-only; the including test links netCDF.
#include <hdf5.h>
#include <netcdf.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/formats/deepcam_file.hpp"
#include "io/formats/h5_util.hpp"
#include "io/formats/netcdf_file.hpp"

namespace squall::test::stats_data {

// /climate/<name> of a stats file, as stored (float64 for squall's).
inline std::vector<double> stats_dataset(const std::string& path, const std::string& name) {
  auto lock = formats::h5_lock();
  formats::H5Handle file = formats::h5_open_file(path);
  formats::H5Handle ds = formats::h5_open_dataset(file.get(), path, "/climate/" + name);
  const formats::H5DatasetDesc d = formats::h5_describe(ds.get());
  REQUIRE(d.dims.size() == 1);
  CHECK(d.dtype == "float64");
  std::vector<double> out(static_cast<size_t>(d.dims[0]));
  REQUIRE(H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0);
  return out;
}

// A file's bytes (two runs that must write the same file compare them).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

constexpr int64_t k_channels = 16;
constexpr float k_fill = -9999.0f;  // the _FillValue of TMQ in files that have one

// A pseudo-random value in [-1, 1) from the four indices (splitmix64 of their mix).
inline double unit_noise(int64_t c, int64_t sample, int64_t y, int64_t x) {
  uint64_t z = static_cast<uint64_t>(((c * 1000003 + sample) * 10007 + y) * 1009 + x) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(uint64_t{1} << 52) - 1.0;
}

// Channel c of sample `sample` at (y, x), as stored (float). PS and PSL (channels 6 and 7) sit
// near 1e5 with a spread of about 100, where float32 sums of squares lose the variance.
inline float value(int64_t c, int64_t sample, int64_t y, int64_t x) {
  const double base = (c == 6 || c == 7) ? 1.0e5 : 10.0 * static_cast<double>(c) - 40.0;
  const double spread = (c == 6 || c == 7) ? 100.0 : 1.0 + static_cast<double>(c);
  return static_cast<float>(base + spread * unit_noise(c, sample, y, x) + 0.01 * static_cast<double>(sample));
}

inline void nc_ok(int status, const std::string& what) {
  if (status != NC_NOERR) throw std::runtime_error(what + ": " + nc_strerror(status));
}

struct NcFile {
  int64_t first_sample = 0;      // the global sample index of its first step (value()'s `sample`)
  int64_t steps = 3;
  int64_t h = 5, w = 7;
  std::string psl_name = "PSL";  // the variable PSL is stored under
  int64_t fill_step = -1;        // >= 0: TMQ gets a _FillValue, and this step holds it at one pixel
  bool labels = true;
};

// A CAM5-like file: time/lat/lon coordinates, the 16 DeepCAM fields and (optionally) labels.
inline void write_nc(const std::string& path, const NcFile& f) {
  int ncid = -1;
  nc_ok(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &ncid), path);
  int dt = -1, dy = -1, dx = -1, vt = -1, vy = -1, vx = -1, vl = -1;
  nc_ok(nc_def_dim(ncid, "time", NC_UNLIMITED, &dt), path);
  nc_ok(nc_def_dim(ncid, "lat", static_cast<size_t>(f.h), &dy), path);
  nc_ok(nc_def_dim(ncid, "lon", static_cast<size_t>(f.w), &dx), path);
  nc_ok(nc_def_var(ncid, "time", NC_DOUBLE, 1, &dt, &vt), path);
  nc_ok(nc_put_att_text(ncid, vt, "units", 30, "days since 1979-01-01 00:00:00"), path);
  nc_ok(nc_def_var(ncid, "lat", NC_DOUBLE, 1, &dy, &vy), path);
  nc_ok(nc_def_var(ncid, "lon", NC_DOUBLE, 1, &dx, &vx), path);
  const int dims[3] = {dt, dy, dx};
  std::vector<int> vars;
  for (int64_t c = 0; c < k_channels; ++c) {
    const std::string& name = formats::deepcam_channel_names()[static_cast<size_t>(c)];
    int v = -1;
    nc_ok(nc_def_var(ncid, (name == "PSL" ? f.psl_name : name).c_str(), NC_FLOAT, 3, dims, &v), path);
    if (c == 0 && f.fill_step >= 0) nc_ok(nc_put_att_float(ncid, v, "_FillValue", NC_FLOAT, 1, &k_fill), path);
    vars.push_back(v);
  }
  if (f.labels) nc_ok(nc_def_var(ncid, "labels", NC_INT, 3, dims, &vl), path);
  nc_ok(nc_enddef(ncid), path);
  std::vector<double> time(static_cast<size_t>(f.steps)), lat(static_cast<size_t>(f.h)), lon(static_cast<size_t>(f.w));
  for (int64_t t = 0; t < f.steps; ++t) time[static_cast<size_t>(t)] = static_cast<double>(f.first_sample + t);
  for (int64_t y = 0; y < f.h; ++y) lat[static_cast<size_t>(y)] = -80.0 + 160.0 * static_cast<double>(y) / static_cast<double>(f.h - 1);
  for (int64_t x = 0; x < f.w; ++x) lon[static_cast<size_t>(x)] = 360.0 * static_cast<double>(x) / static_cast<double>(f.w);
  const size_t t0 = 0, tn = static_cast<size_t>(f.steps);
  nc_ok(nc_put_vara_double(ncid, vt, &t0, &tn, time.data()), path);
  nc_ok(nc_put_var_double(ncid, vy, lat.data()), path);
  nc_ok(nc_put_var_double(ncid, vx, lon.data()), path);
  const size_t start[3] = {0, 0, 0}, count[3] = {tn, static_cast<size_t>(f.h), static_cast<size_t>(f.w)};
  std::vector<float> v(static_cast<size_t>(f.steps * f.h * f.w));
  for (int64_t c = 0; c < k_channels; ++c) {
    for (int64_t t = 0; t < f.steps; ++t)
      for (int64_t y = 0; y < f.h; ++y)
        for (int64_t x = 0; x < f.w; ++x) v[static_cast<size_t>((t * f.h + y) * f.w + x)] = value(c, f.first_sample + t, y, x);
    if (c == 0 && f.fill_step >= 0) v[static_cast<size_t>((f.fill_step * f.h + 1) * f.w + 2)] = k_fill;
    nc_ok(nc_put_vara_float(ncid, vars[static_cast<size_t>(c)], start, count, v.data()), path);
  }
  if (f.labels) {
    std::vector<int> l(v.size());
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<int>(i % 3);
    nc_ok(nc_put_vara_int(ncid, vl, start, count, l.data()), path);
  }
  nc_ok(nc_close(ncid), path);
}

// `files` netCDF files of `steps` steps each in `dir` (part-0.nc, ...): samples 0 .. files*steps-1.
inline void write_nc_folder(const std::string& dir, int64_t files, int64_t steps, NcFile spec = {}) {
  for (int64_t i = 0; i < files; ++i) {
    spec.first_sample = i * steps;
    spec.steps = steps;
    write_nc(dir + "/part-" + std::to_string(i) + ".nc", spec);
  }
}

// `samples` DeepCAM files data-00000.h5, ... in `dir` ([h, w, 16], channels last).
inline void write_deepcam_folder(const std::string& dir, int64_t samples, int64_t h = 5, int64_t w = 7) {
  std::vector<float> hwc(static_cast<size_t>(h * w * k_channels));
  for (int64_t s = 0; s < samples; ++s) {
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        for (int64_t c = 0; c < k_channels; ++c) hwc[static_cast<size_t>((y * w + x) * k_channels + c)] = value(c, s, y, x);
    char name[32];
    std::snprintf(name, sizeof name, "/data-%05lld.h5", static_cast<long long>(s));
    formats::write_deepcam_file(dir + name, hwc.data(), h, w, k_channels, nullptr, {}, {});
  }
}

struct Reference {
  std::vector<double> count, mean, var, min, max;  // per channel; var: population variance
};

// The statistics of samples `samples` of value() on an h x w grid: long double sums, the
// samples in reverse order (another order and precision than squall's double two-pass sums).
inline Reference reference(const std::vector<int64_t>& samples, int64_t h = 5, int64_t w = 7) {
  Reference r;
  for (int64_t c = 0; c < k_channels; ++c) {
    long double sum = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (auto s = samples.rbegin(); s != samples.rend(); ++s)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const double v = value(c, *s, y, x);
          sum += v;
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
    const long double n = static_cast<long double>(samples.size()) * static_cast<long double>(h * w);
    const long double mean = sum / n;
    long double sq = 0;
    for (auto s = samples.rbegin(); s != samples.rend(); ++s)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const long double d = static_cast<long double>(value(c, *s, y, x)) - mean;
          sq += d * d;
        }
    r.count.push_back(static_cast<double>(n));
    r.mean.push_back(static_cast<double>(mean));
    r.var.push_back(static_cast<double>(sq / n));
    r.min.push_back(lo);
    r.max.push_back(hi);
  }
  return r;
}

// 0 .. n-1, leaving out `skip` (-1: none).
inline std::vector<int64_t> sample_range(int64_t n, int64_t skip = -1) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i)
    if (i != skip) out.push_back(i);
  return out;
}

}  // namespace squall::test::stats_data
