// Window reads (data::DataSource::read_window; a rank's tile under parallel.spatial): for native
// shards, DeepCAM files, netCDF files, the data.pad source and the loader, the window of each
// sample equals the same window cut from read()'s whole sample, bit for bit (the same values
// through the same normalisation code); the bytes a window read takes from the file fall with
// the window; a window outside the sample, and whole-sample augmentation on a window, are
// refused naming what is wrong.
#include <hdf5.h>
#include <netcdf.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/formats/dataset.hpp"
#include "io/formats/deepcam_file.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/shard.hpp"
#include "io/input/loader.hpp"
#include "io/input/pad_source.hpp"
#include "src/core/error.hpp"
#include "src/data/augment.hpp"
#include "src/train/batch_feed.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using Catch::Contains;
using namespace squall;
using data::Window;

namespace {

// The window of whole samples [n, planes per sample, h, w] as [n, planes, w.rows, w.cols],
// cut here (not by the code under test).
template <typename T>
std::vector<T> crop(const std::vector<T>& whole, int64_t planes, int64_t h, int64_t width, const Window& w) {
  std::vector<T> out;
  const int64_t total = static_cast<int64_t>(whole.size()) / (h * width);
  REQUIRE(total % planes == 0);
  for (int64_t p = 0; p < total; ++p)
    for (int64_t y = w.row0; y < w.row0 + w.rows; ++y)
      for (int64_t x = w.col0; x < w.col0 + w.cols; ++x) out.push_back(whole[static_cast<size_t>((p * h + y) * width + x)]);
  return out;
}

// read() of `indices` whole, and read_window() of each window, compared exactly.
void check_windows(const data::DataSource& src, const std::vector<int64_t>& indices, const std::vector<Window>& windows) {
  const data::DatasetInfo& info = src.info();
  const int64_t c = info.sample.c(), h = info.sample.h(), width = info.sample.w();
  const auto n = static_cast<int64_t>(indices.size());
  const int64_t label_planes = info.per_pixel_labels ? h * width : 1;
  std::vector<float> images(static_cast<size_t>(n * c * h * width), -7.0f);
  std::vector<int32_t> labels(static_cast<size_t>(n * label_planes), -7);
  src.read(indices, images.data(), labels.data());
  for (const Window& w : windows) {
    INFO(src.info().description << ": " << data::window_text(w));
    const int64_t plane = w.rows * w.cols;
    std::vector<float> got(static_cast<size_t>(n * c * plane), -9.0f);
    std::vector<int32_t> got_labels(static_cast<size_t>(n * (info.per_pixel_labels ? plane : 1)), -9);
    src.read_window(indices, w, got.data(), got_labels.data());
    CHECK(got == crop(images, c, h, width, w));
    if (info.per_pixel_labels) CHECK(got_labels == crop(labels, 1, h, width, w));
    else CHECK(got_labels == labels);
  }
}

// Uneven windows of a 40 x 30 sample: three row bands, 2 x 2 tiles, a one-column east edge, a
// one-pixel corner, and the whole sample.
const std::vector<Window> k_windows_40x30 = {{0, 13, 0, 30},  {13, 14, 0, 30}, {27, 13, 0, 30}, {0, 20, 0, 15},
                                             {0, 20, 15, 15}, {20, 20, 0, 15}, {20, 20, 15, 15}, {0, 40, 29, 1},
                                             {39, 1, 0, 1},   {0, 40, 0, 30}};

// The message read_window throws for `w`; "" when it does not throw.
std::string window_error(const data::DataSource& src, const Window& w) {
  const int64_t c = src.info().sample.c();
  std::vector<float> images(static_cast<size_t>(std::max<int64_t>(1, c * w.rows * w.cols)) + 4096);
  std::vector<int32_t> labels(static_cast<size_t>(std::max<int64_t>(1, w.rows * w.cols)) + 4096);
  const std::vector<int64_t> one = {0};
  try {
    src.read_window(one, w, images.data(), labels.data());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void check_refuses_outside(const data::DataSource& src) {
  INFO(src.info().description);
  CHECK_THAT(window_error(src, {30, 20, 0, 10}), Contains("rows [30, 50) x columns [0, 10)") && Contains("40 x 30"));
  CHECK_THAT(window_error(src, {0, 10, -1, 5}), Contains("rows [0, 10) x columns [-1, 4)") && Contains("40 x 30"));
  CHECK_THAT(window_error(src, {0, 0, 0, 5}), Contains("empty") && Contains("40 x 30"));
}

// ---- shards --------------------------------------------------------------------------------

formats::ShardMeta shard_meta(int64_t channels) {
  formats::ShardMeta m;
  m.class_names = {"zero", "one", "two"};
  for (int64_t c = 0; c < channels; ++c) {
    m.channel_names.push_back("ch" + std::to_string(c));
    m.mean.push_back(3.0f + static_cast<float>(c));
    m.std.push_back(7.0f + static_cast<float>(c));
    m.min.push_back(-1.0f);
    m.max.push_back(1000.0f);
  }
  return m;
}

// Samples first .. first + n - 1 of `sample` written to `path` by squall's own writer.
void write_shard(const std::string& path, nn::Shape sample, formats::SampleType type, bool per_pixel, int compression,
                 int64_t first, int64_t n) {
  formats::ShardWriter w(path, sample, type, per_pixel, compression, shard_meta(sample.c()));
  const int64_t per = sample.per_sample(), nl = per_pixel ? sample.h() * sample.w() : 1;
  std::vector<float> f(static_cast<size_t>(per));
  std::vector<uint8_t> b(static_cast<size_t>(per));
  std::vector<int32_t> l(static_cast<size_t>(nl));
  for (int64_t i = first; i < first + n; ++i) {
    for (int64_t p = 0; p < per; ++p) {
      f[static_cast<size_t>(p)] = static_cast<float>(std::sin(static_cast<double>(i * 1000 + p)) * 300.0);
      b[static_cast<size_t>(p)] = static_cast<uint8_t>((i * 37 + p * 11) % 256);
    }
    for (int64_t p = 0; p < nl; ++p) l[static_cast<size_t>(p)] = static_cast<int32_t>((i + p * 7) % 3);
    if (type == formats::SampleType::uint8) w.append(b.data(), l.data());
    else w.append(f.data(), l.data());
  }
  w.close();
}

// The bytes this process has read through read(2) and pread(2) so far (Linux's rchar, which
// counts what each call returned, from the page cache or not); -1 where /proc/self/io is not
// readable.
int64_t bytes_read_so_far() {
  std::ifstream in("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

// ---- DeepCAM -------------------------------------------------------------------------------

// A DeepCAM file as other tools may write it: /climate/data chunked by row blocks and
// compressed, /climate/labels_0 stored as float32 (read through HDF5, not raw).
void write_chunked_deepcam(const std::string& path, const std::vector<float>& hwc, int64_t h, int64_t w, int64_t c,
                           const std::vector<int32_t>& labels) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t g = H5Gcreate2(f, "climate", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t ddims[3] = {static_cast<hsize_t>(h), static_cast<hsize_t>(w), static_cast<hsize_t>(c)};
  const hsize_t chunk[3] = {8, static_cast<hsize_t>(w), static_cast<hsize_t>(c)};
  const hid_t dspace = H5Screate_simple(3, ddims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  REQUIRE(H5Pset_chunk(dcpl, 3, chunk) >= 0);
  REQUIRE(H5Pset_deflate(dcpl, 3) >= 0);
  const hid_t data = H5Dcreate2(g, "data", H5T_IEEE_F32LE, dspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(H5Dwrite(data, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, hwc.data()) >= 0);
  const hsize_t ldims[2] = {static_cast<hsize_t>(h), static_cast<hsize_t>(w)};
  const hid_t lspace = H5Screate_simple(2, ldims, nullptr);
  const hid_t lab = H5Dcreate2(g, "labels_0", H5T_IEEE_F32LE, lspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(H5Dwrite(lab, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) >= 0);
  H5Dclose(lab);
  H5Sclose(lspace);
  H5Dclose(data);
  H5Pclose(dcpl);
  H5Sclose(dspace);
  H5Gclose(g);
  H5Fclose(f);
}

// Sample i's fields [h, w, c] and labels [h, w].
std::vector<float> deepcam_fields(int64_t i, int64_t h, int64_t w, int64_t c) {
  std::vector<float> hwc(static_cast<size_t>(h * w * c));
  for (size_t p = 0; p < hwc.size(); ++p)
    hwc[p] = static_cast<float>(std::cos(static_cast<double>(i * 7919 + static_cast<int64_t>(p))) * 50.0 + 10.0);
  return hwc;
}
std::vector<int32_t> deepcam_labels(int64_t i, int64_t h, int64_t w) {
  std::vector<int32_t> l(static_cast<size_t>(h * w));
  for (size_t p = 0; p < l.size(); ++p) l[p] = static_cast<int32_t>((static_cast<int64_t>(p) * 5 + i) % 3);
  return l;
}

// stats.h5 for `c` channels (zscore: mean 10 + k, std about 30).
void write_stats(const std::string& path, int64_t c) {
  formats::DeepcamStatsOut st;
  for (int64_t k = 0; k < c; ++k) {
    const double mean = 10.0 + static_cast<double>(k);
    st.count.push_back(100);
    st.mean.push_back(mean);
    st.sqmean.push_back(mean * mean + 900.0);
    st.minval.push_back(-40.0);
    st.maxval.push_back(60.0);
  }
  formats::write_deepcam_stats(path, st);
}

// ---- an in-memory source that reads windows natively, and says which ----------------------

// Sample s holds 100000 s + 10000 c + 100 y + x at channel c, row y, column x (exact in
// float32), label y * w + x; read_window writes a window's values itself and records it.
class CodedSource final : public data::DataSource {
 public:
  CodedSource(int64_t n, int64_t c, int64_t h, int64_t w, std::vector<double> lat, std::vector<double> lon) : m_n(n) {
    m_info.sample = nn::Shape(1, c, h, w);
    m_info.classes = 100000;
    m_info.per_pixel_labels = true;
    m_info.lat = std::move(lat);
    m_info.lon = std::move(lon);
    m_info.description = "coded test source";
  }
  const data::DatasetInfo& info() const override { return m_info; }
  int64_t size() const override { return m_n; }
  void read(std::span<const int64_t> indices, float* images, int32_t* labels) const override {
    fill(indices, {0, m_info.sample.h(), 0, m_info.sample.w()}, images, labels);
  }
  void read_window(std::span<const int64_t> indices, const Window& w, float* images, int32_t* labels) const override {
    data::check_window(*this, w);
    {
      std::lock_guard lock(m_mutex);
      m_windows.push_back(w);
    }
    fill(indices, w, images, labels);
  }
  std::vector<Window> take_windows() const {
    std::lock_guard lock(m_mutex);
    return std::exchange(m_windows, {});
  }

 private:
  void fill(std::span<const int64_t> indices, const Window& w, float* images, int32_t* labels) const {
    const int64_t c = m_info.sample.c(), width = m_info.sample.w();
    size_t i = 0, l = 0;
    for (const int64_t s : indices) {
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = w.row0; y < w.row0 + w.rows; ++y)
          for (int64_t x = w.col0; x < w.col0 + w.cols; ++x)
            images[i++] = static_cast<float>(100000 * s + 10000 * ch + 100 * y + x);
      if (labels != nullptr)
        for (int64_t y = w.row0; y < w.row0 + w.rows; ++y)
          for (int64_t x = w.col0; x < w.col0 + w.cols; ++x) labels[l++] = static_cast<int32_t>(y * width + x);
    }
  }
  int64_t m_n;
  data::DatasetInfo m_info;
  mutable std::mutex m_mutex;
  mutable std::vector<Window> m_windows;
};

std::vector<double> evenly(double first, double step, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = first + step * static_cast<double>(i);
  return v;
}

// ---- netCDF --------------------------------------------------------------------------------

void nc_ok(int status) {
  INFO(nc_strerror(status));
  REQUIRE(status == NC_NOERR);
}

// Two fields "a" and "b" (K) and int labels on (time, lat, lon), latitude stored north to
// south as ERA5 stores it (so the reader flips rows), in netCDF format `format`.
void write_netcdf(const std::string& path, int format, int64_t steps, int64_t h, int64_t w) {
  int ncid = -1, dt = -1, dy = -1, dx = -1, vy = -1, vx = -1, va = -1, vb = -1, vl = -1;
  nc_ok(nc_create(path.c_str(), NC_CLOBBER | format, &ncid));
  nc_ok(nc_def_dim(ncid, "time", NC_UNLIMITED, &dt));
  nc_ok(nc_def_dim(ncid, "lat", static_cast<size_t>(h), &dy));
  nc_ok(nc_def_dim(ncid, "lon", static_cast<size_t>(w), &dx));
  nc_ok(nc_def_var(ncid, "lat", NC_DOUBLE, 1, &dy, &vy));
  nc_ok(nc_def_var(ncid, "lon", NC_DOUBLE, 1, &dx, &vx));
  const int dims[3] = {dt, dy, dx};
  nc_ok(nc_def_var(ncid, "a", NC_FLOAT, 3, dims, &va));
  nc_ok(nc_def_var(ncid, "b", NC_FLOAT, 3, dims, &vb));
  nc_ok(nc_def_var(ncid, "labels", NC_INT, 3, dims, &vl));
  for (const int v : {va, vb}) nc_ok(nc_put_att_text(ncid, v, "units", 1, "K"));
  nc_ok(nc_enddef(ncid));
  const std::vector<double> lat = evenly(80.0, -160.0 / static_cast<double>(h - 1), h);
  const std::vector<double> lon = evenly(0.0, 360.0 / static_cast<double>(w), w);
  nc_ok(nc_put_var_double(ncid, vy, lat.data()));
  nc_ok(nc_put_var_double(ncid, vx, lon.data()));
  const auto n = static_cast<size_t>(steps * h * w);
  std::vector<float> a(n), b(n);
  std::vector<int> l(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = 250.0f + static_cast<float>(i % 97) * 0.5f;
    b[i] = 280.0f - static_cast<float>(i % 89) * 0.25f;
    l[i] = static_cast<int>((i * 7) % 3);
  }
  const size_t start[3] = {0, 0, 0}, count[3] = {static_cast<size_t>(steps), static_cast<size_t>(h),
                                                 static_cast<size_t>(w)};
  nc_ok(nc_put_vara_float(ncid, va, start, count, a.data()));
  nc_ok(nc_put_vara_float(ncid, vb, start, count, b.data()));
  nc_ok(nc_put_vara_int(ncid, vl, start, count, l.data()));
  nc_ok(nc_close(ncid));
}

}  // namespace

TEST_CASE("shard windows equal the window of the whole sample, raw, compressed and cached", "[io][window]") {
  test::TempDir d("squall-window-shards");
  const nn::Shape sample(1, 3, 40, 30);
  const std::vector<int64_t> indices = {0, 6, 3, 7, 5};
  struct Case {
    formats::SampleType type;
    bool per_pixel;
    int compression;
    const char* what;
  };
  for (const Case& k : {Case{formats::SampleType::uint8, false, 0, "uint8, class labels, raw chunks"},
                        Case{formats::SampleType::float32, true, 0, "float32, per-pixel labels, raw chunks"},
                        Case{formats::SampleType::uint8, true, 4, "uint8, per-pixel labels, compressed"},
                        Case{formats::SampleType::float32, true, 6, "float32, per-pixel labels, compressed"}}) {
    INFO(k.what);
    const std::string dir = d.file(std::to_string(static_cast<int>(k.type)) + "-" + std::to_string(k.per_pixel) + "-" +
                                   std::to_string(k.compression));
    std::filesystem::create_directories(dir);
    write_shard(dir + "/" + formats::shard_name("train", 0, 2), sample, k.type, k.per_pixel, k.compression, 0, 5);
    write_shard(dir + "/" + formats::shard_name("train", 1, 2), sample, k.type, k.per_pixel, k.compression, 5, 3);
    for (const int64_t cache : {int64_t{0}, int64_t{1} << 30}) {
      INFO("cache_bytes " << cache);
      formats::OpenOptions options;
      options.cache_bytes = cache;  // 0: streamed from the files; else held in memory
      auto src = formats::open_shards(dir, "train", options);
      REQUIRE(src->normalization().kind == "zscore");
      check_windows(*src, indices, k_windows_40x30);
      check_refuses_outside(*src);
    }
  }
}

TEST_CASE("a bad value in a window is named with its file, dataset and window", "[io][window]") {
  test::TempDir d("squall-window-bad");
  const int64_t h = 40, w = 30, c = 8;
  std::vector<float> hwc = deepcam_fields(0, h, w, c);
  hwc[static_cast<size_t>(((25 * w) + 20) * c + 3)] = std::nanf("");  // row 25, column 20, channel 3
  const std::vector<int32_t> lab = deepcam_labels(0, h, w);
  const std::string deepcam = d.file("data-0.h5");
  formats::write_deepcam_file(deepcam, hwc.data(), h, w, c, lab.data(), {}, {});
  // The same sample as a raw float32 shard ([c, h, w]).
  const std::string shard = d.file(formats::shard_name("train", 0, 1));
  {
    formats::ShardWriter writer(shard, nn::Shape(1, c, h, w), formats::SampleType::float32, true, 0, shard_meta(c));
    std::vector<float> chw(hwc.size());
    for (int64_t p = 0; p < h * w; ++p)
      for (int64_t ch = 0; ch < c; ++ch) chw[static_cast<size_t>(ch * h * w + p)] = hwc[static_cast<size_t>(p * c + ch)];
    writer.append(chw.data(), lab.data());
    writer.close();
  }
  formats::OpenOptions options;
  options.normalize = false;
  options.cache_bytes = 0;
  auto deepcam_source = formats::open_deepcam_files({deepcam}, "", options);
  auto shard_source = formats::open_shard_files({shard}, options);
  const Window tile{20, 20, 15, 15};
  CHECK_THAT(window_error(*deepcam_source, tile),
             Contains(deepcam) && Contains("dataset /climate/data") && Contains("rows [20, 40) x columns [15, 30)"));
  CHECK_THAT(window_error(*shard_source, tile),
             Contains(shard) && Contains("dataset /images") && Contains("rows [20, 40) x columns [15, 30)"));
  // A window beside the bad value reads.
  CHECK(window_error(*deepcam_source, {0, 20, 0, 30}).empty());
  CHECK(window_error(*shard_source, {0, 20, 0, 30}).empty());
}

TEST_CASE("a window of a raw shard reads a quarter of the bytes that whole samples do", "[io][window]") {
  if (bytes_read_so_far() < 0) SQUALL_SKIP("/proc/self/io is not readable here: the bytes a read takes cannot be counted");
  test::TempDir d("squall-window-bytes");
  // Unfiltered chunks, one per sample (ShardWriter without compression, what `squall data`
  // writes by default): a window's rows are read from inside the chunk. A compressed chunk
  // would be read whole, and the test would fail, as it should. Samples of 320 KiB (images
  // 256 KiB, per-pixel labels 64 KiB): four read first, so that HDF5's metadata is read and
  // cached before counting, then twelve others counted, whole and as windows. (Not the same
  // ones twice whole: HDF5 keeps small chunks, as the labels', in its chunk cache.)
  const nn::Shape sample(1, 4, 128, 128);
  const int64_t n = 16, counted = 12;
  const std::string path = d.file(formats::shard_name("train", 0, 1));
  write_shard(path, sample, formats::SampleType::float32, true, 0, 0, n);
  REQUIRE(formats::read_shard_info(path).compression == 0);
  formats::OpenOptions options;
  options.cache_bytes = 0;  // stream: nothing held in memory
  auto src = formats::open_shard_files({path}, options);
  std::vector<float> images(static_cast<size_t>(counted * sample.per_sample()));
  std::vector<int32_t> labels(static_cast<size_t>(counted * 128 * 128));
  const std::vector<int64_t> first = {0, 1, 2, 3};
  src->read(first, images.data(), labels.data());
  std::vector<int64_t> rest(static_cast<size_t>(counted));
  std::iota(rest.begin(), rest.end(), n - counted);

  const int64_t before_whole = bytes_read_so_far();
  src->read(rest, images.data(), labels.data());
  const int64_t whole = bytes_read_so_far() - before_whole;
  const Window quarter{64, 64, 0, 64};  // a 2 x 2 tile: half the rows, half the columns
  const int64_t before_window = bytes_read_so_far();
  src->read_window(rest, quarter, images.data(), labels.data());
  const int64_t window = bytes_read_so_far() - before_window;
  const int64_t data_bytes = counted * (sample.per_sample() * 4 + 128 * 128 * 4);
  // The allowance: HDF5's chunk lookups and the read of /proc/self/io itself.
  const int64_t allowance = 16 << 10;
  WARN("bytes read: whole samples " << whole << ", quarter windows " << window << " (data " << data_bytes << ")");
  CHECK(whole >= data_bytes);
  CHECK(window <= whole / 4 + allowance);
  CHECK(whole >= 3 * window);  // a reader that read whole samples for windows fails here
}

TEST_CASE("DeepCAM windows equal the window of the whole sample, read raw or through HDF5", "[io][window][deepcam]") {
  test::TempDir d("squall-window-deepcam");
  const int64_t h = 40, w = 30;
  std::vector<std::string> files;
  for (const int64_t c : {int64_t{8}, int64_t{5}}) {  // 8: the AVX2 transpose; 5: the scalar one
    INFO(c << " channels");
    const std::string dir = d.file("c" + std::to_string(c));
    std::filesystem::create_directories(dir);
    write_stats(dir + "/stats.h5", c);
    std::vector<std::string> paths;
    for (int64_t i = 0; i < 4; ++i) {
      const std::string path = dir + "/data-" + std::to_string(i) + ".h5";
      const std::vector<float> hwc = deepcam_fields(i, h, w, c);
      const std::vector<int32_t> lab = deepcam_labels(i, h, w);
      if (i % 2 == 0) formats::write_deepcam_file(path, hwc.data(), h, w, c, lab.data(), {}, {});  // contiguous: raw
      else write_chunked_deepcam(path, hwc, h, w, c, lab);  // chunked, compressed, float labels: HDF5
      paths.push_back(path);
    }
    formats::OpenOptions options;  // zscore from stats.h5
    auto src = formats::open_deepcam_files(paths, dir + "/stats.h5", options);
    REQUIRE(src->normalization().kind == "zscore");
    check_windows(*src, {0, 1, 2, 3, 1}, k_windows_40x30);
    check_refuses_outside(*src);
    // Predict's label-free read of a window: the same images.
    const std::vector<int64_t> two = {2, 1};
    const Window tile{20, 20, 15, 15};
    std::vector<float> with(2 * static_cast<size_t>(c * 20 * 15)), without(with.size());
    std::vector<int32_t> lab(2 * 20 * 15);
    src->read_window(two, tile, with.data(), lab.data());
    src->read_window(two, tile, without.data(), nullptr);
    CHECK(with == without);
  }
}

TEST_CASE("a window of a contiguous DeepCAM file reads a quarter of the bytes that whole samples do",
          "[io][window][deepcam]") {
  if (bytes_read_so_far() < 0) SQUALL_SKIP("/proc/self/io is not readable here: the bytes a read takes cannot be counted");
  test::TempDir d("squall-window-deepcam-bytes");
  // DeepCAM's files (and squall's writer) store /climate/data contiguous and unfiltered: a
  // window row is one run of the file. 8 files of 576 KiB (128 x 128 x 8 float32 fields and
  // int32 labels).
  const int64_t h = 128, w = 128, c = 8, n = 8;
  std::vector<std::string> paths;
  for (int64_t i = 0; i < n; ++i) {
    paths.push_back(d.file("data-" + std::to_string(i) + ".h5"));
    const std::vector<float> hwc = deepcam_fields(i, h, w, c);
    const std::vector<int32_t> lab = deepcam_labels(i, h, w);
    formats::write_deepcam_file(paths.back(), hwc.data(), h, w, c, lab.data(), {}, {});
  }
  formats::OpenOptions options;
  options.normalize = false;
  auto src = formats::open_deepcam_files(paths, "", options);
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> images(static_cast<size_t>(n * h * w * c));
  std::vector<int32_t> labels(static_cast<size_t>(n * h * w));
  src->read(all, images.data(), labels.data());  // every file opened (and its metadata read) before counting

  const int64_t before_whole = bytes_read_so_far();
  src->read(all, images.data(), labels.data());
  const int64_t whole = bytes_read_so_far() - before_whole;
  const Window quarter{0, 64, 64, 64};  // a 2 x 2 tile
  const int64_t before_window = bytes_read_so_far();
  src->read_window(all, quarter, images.data(), labels.data());
  const int64_t window = bytes_read_so_far() - before_window;
  const int64_t data_bytes = n * (h * w * c * 4 + h * w * 4);
  const int64_t allowance = 4 << 10;  // the read of /proc/self/io itself
  WARN("bytes read: whole samples " << whole << ", quarter windows " << window << " (data " << data_bytes << ")");
  CHECK(whole >= data_bytes);
  CHECK(window <= whole / 4 + allowance);
  CHECK(whole >= 3 * window);
}

TEST_CASE("netCDF windows equal the window of the whole sample, latitude flipped", "[io][window][netcdf]") {
  test::TempDir d("squall-window-netcdf");
  const int64_t h = 40, w = 30;
  for (const int format : {0, NC_NETCDF4}) {
    INFO("format " << format);
    const std::string path = d.file("era-" + std::to_string(format) + ".nc");
    write_netcdf(path, format, 3, h, w);
    formats::NetcdfOptions nc;
    nc.channels = {"a", "b"};
    formats::OpenOptions options;
    options.normalize = false;
    auto src = formats::open_netcdf_files({path}, "", options, nc);
    REQUIRE(src->info().sample == nn::Shape(1, 2, h, w));
    REQUIRE(src->info().lat.front() < src->info().lat.back());  // flipped to south first
    check_windows(*src, {2, 0, 1}, k_windows_40x30);
    check_refuses_outside(*src);
  }
}

TEST_CASE("data.pad windows equal the window of the padded sample, over the edges and the longitude wrap",
          "[pad][window]") {
  // 13 x 20 on a global grid (18 degree longitudes), fitted to multiples of 8: padded to
  // 16 x 24, one row above and two below, two columns on each side taken periodically from
  // the far side.
  const CodedSource global(3, 2, 13, 20, evenly(-72, 12, 13), evenly(0, 18, 20));
  const input::GridFit periodic = input::plan_grid_fit(global.info(), data::PadMode::pad, 8, "test", "test model");
  REQUIRE(periodic.periodic);
  REQUIRE(periodic.out_h == 16);
  REQUIRE(periodic.out_w == 24);
  REQUIRE(periodic.left == 2);
  auto padded = input::fit_grid_view(global, periodic);
  const std::vector<Window> windows = {
      {0, 8, 0, 12},   // the north-west tile: padded rows and the wrap from the east end
      {8, 8, 12, 12},  // the south-east tile: padded rows below and the wrap from the west end
      {0, 16, 0, 1},   // the first padded column alone
      {0, 16, 23, 1},  // the last one
      {5, 3, 6, 10},   // inside the grid
      {0, 16, 0, 24},  // everything
      {15, 1, 21, 3},  // a corner across the bottom and the east edge
  };
  const std::vector<int64_t> indices = {2, 0};
  check_windows(*padded, indices, windows);
  global.take_windows();

  // Only windows of the source are read: the wrap is two (east end, then west end), neither
  // the whole width.
  std::vector<float> images(2 * 2 * 8 * 12);
  std::vector<int32_t> labels(2 * 8 * 12);
  padded->read_window(indices, {0, 8, 0, 12}, images.data(), labels.data());
  const std::vector<Window> under = global.take_windows();
  CHECK(under == std::vector<Window>{{0, 7, 18, 2}, {0, 7, 0, 10}});
  // Padded pixels carry no class, wrapped ones included; others keep theirs.
  CHECK(labels[0] == -1);                      // row 0: padding
  CHECK(labels[1 * 12 + 0] == -1);             // column 0: wrapped from the east end
  CHECK(labels[1 * 12 + 2] == 0 * 20 + 0);     // source row 0, column 0
  CHECK(labels[3 * 12 + 5] == 2 * 20 + 3);

  // A grid that is not global: the edge column repeats; and a crop.
  const CodedSource regional(3, 2, 13, 20, evenly(-72, 12, 13), evenly(0, 1, 20));
  const input::GridFit edge = input::plan_grid_fit(regional.info(), data::PadMode::pad, 8, "test", "test model");
  REQUIRE_FALSE(edge.periodic);
  check_windows(*input::fit_grid_view(regional, edge), indices, windows);
  const input::GridFit cropped = input::plan_grid_fit(regional.info(), data::PadMode::crop, 8, "test", "test model");
  REQUIRE(cropped.out_h == 8);
  REQUIRE(cropped.out_w == 16);
  auto crop_source = input::fit_grid_view(regional, cropped);
  check_windows(*crop_source, indices, {{0, 8, 0, 16}, {0, 4, 0, 8}, {4, 4, 8, 8}, {0, 8, 15, 1}});
  CHECK_THAT(window_error(*crop_source, {4, 5, 0, 8}), Contains("rows [4, 9) x columns [0, 8)") && Contains("8 x 16"));
  CHECK_THAT(window_error(*padded, {0, 8, 20, 5}), Contains("rows [0, 8) x columns [20, 25)") && Contains("16 x 24"));
}

TEST_CASE("the default window read crops whole samples, and refuses a window outside them", "[window]") {
  // A source that does not override read_window: the crop of read().
  class Plain final : public data::DataSource {
   public:
    Plain() {
      m_info.sample = nn::Shape(1, 2, 40, 30);
      m_info.classes = 5;
      m_info.description = "plain test source";
    }
    const data::DatasetInfo& info() const override { return m_info; }
    int64_t size() const override { return 4; }
    void read(std::span<const int64_t> indices, float* images, int32_t* labels) const override {
      const int64_t per = m_info.sample.per_sample();
      for (size_t k = 0; k < indices.size(); ++k) {
        for (int64_t p = 0; p < per; ++p)
          images[static_cast<int64_t>(k) * per + p] = static_cast<float>(indices[k] * 10000 + p) * 0.5f;
        labels[k] = static_cast<int32_t>(indices[k] + 1);
      }
    }

   private:
    data::DatasetInfo m_info;
  } plain;
  check_windows(plain, {3, 1, 2}, k_windows_40x30);
  check_refuses_outside(plain);
}

TEST_CASE("the loader with a window delivers the window of the whole loader's batches", "[io][window][loader]") {
  test::TempDir d("squall-window-loader");
  const nn::Shape sample(1, 3, 40, 30);
  write_shard(d.file(formats::shard_name("train", 0, 1)), sample, formats::SampleType::float32, true, 0, 0, 11);
  formats::OpenOptions options;
  options.cache_bytes = 0;
  auto src = formats::open_shards(d.path.string(), "train", options);
  const std::vector<int64_t> indices = {4, 9, 1, 0, 7, 3, 10, 2, 6, 5, 8};
  const Window w{13, 14, 15, 15};
  for (const int64_t per_read : {int64_t{1}, int64_t{2}}) {
    INFO("samples per read " << per_read);
    input::LoaderOptions whole_options;
    whole_options.batch_size = 3;
    whole_options.workers = 2;
    whole_options.samples_per_read = per_read;
    input::LoaderOptions window_options = whole_options;
    window_options.window = w;
    input::Loader whole(*src, whole_options), windowed(*src, window_options);
    CHECK(windowed.sample_floats() == 3 * 14 * 15);
    CHECK(windowed.sample_labels() == 14 * 15);
    CHECK(windowed.window() == std::optional<Window>(w));
    whole.start_epoch(indices, 3);
    windowed.start_epoch(indices, 3);
    int64_t batches = 0;
    while (const input::Batch* a = whole.next()) {
      const input::Batch* b = windowed.next();
      REQUIRE(b != nullptr);
      CHECK(b->indices == a->indices);
      const std::vector<float> a_images(a->images, a->images + 3 * sample.per_sample());
      const std::vector<int32_t> a_labels(a->labels, a->labels + 3 * 40 * 30);
      CHECK(std::vector<float>(b->images, b->images + 3 * 3 * 14 * 15) == crop(a_images, 3, 40, 30, w));
      CHECK(std::vector<int32_t>(b->labels, b->labels + 3 * 14 * 15) == crop(a_labels, 1, 40, 30, w));
      whole.release(a);
      windowed.release(b);
      ++batches;
    }
    CHECK(batches == 3);
    CHECK(windowed.next() == nullptr);
  }

  input::LoaderOptions outside;
  outside.window = Window{30, 20, 0, 30};
  CHECK_THROWS_WITH(input::Loader(*src, outside), Contains("rows [30, 50) x columns [0, 30)") && Contains("40 x 30"));

  // Whole-sample augmentation cannot run on a window: refused when the feed is made, naming the
  // keys and parallel.spatial.
  input::LoaderOptions windowed_options;
  windowed_options.window = w;
  input::Loader windowed(*src, windowed_options);
  data::SphereAugment roll;
  roll.roll = true;
  CHECK_THROWS_WITH(train::BatchFeed(windowed, roll, sample, 1, 0, false),
                    Contains("data.augment_roll") && Contains("parallel.spatial") &&
                        Contains("rows [13, 27) x columns [15, 30)"));
  data::SphereAugment flip;
  flip.flip = true;
  CHECK_THROWS_WITH(train::BatchFeed(windowed, flip, sample, 1, 0, false),
                    Contains("data.augment_flip") && Contains("parallel.spatial"));
  const data::SphereAugment none;
  CHECK_NOTHROW(train::BatchFeed(windowed, none, sample, 1, 0, false));
}
