// Native HDF5 shards: exact round trips, metadata, several files, and a clear error (naming
// the file, and the dataset where there is one) for each kind of broken input. Files of the
// wrong layout are written with h5py (Debian's python3-h5py): this binary does not link
// HDF5 itself; that case is skipped (CTest: Skipped) without it.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "io/formats/dataset.hpp"
#include "io/formats/inspect.hpp"
#include "io/formats/shard.hpp"
#include "src/core/error.hpp"
#include "io/input/open_dataset.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using Catch::Contains;
using squall::formats::OpenOptions;
using squall::formats::SampleType;
using squall::formats::ShardMeta;
using squall::formats::ShardWriter;
using squall::nn::Shape;

namespace {

namespace fs = std::filesystem;

struct TempDir : squall::test::TempDir {
  TempDir() : squall::test::TempDir("squall-shards") {}
};

const OpenOptions k_raw{false, squall::data::NormalizationKind::zscore};

ShardMeta test_meta(int channels) {
  ShardMeta m;
  m.class_names = {"zero", "one", "two"};
  for (int c = 0; c < channels; ++c) {
    m.channel_names.push_back("ch" + std::to_string(c));
    m.mean.push_back(10.0f + c);
    m.std.push_back(2.0f + c);
    m.min.push_back(-1.0f - c);
    m.max.push_back(100.0f + c);
  }
  m.source = "unit test";
  return m;
}

// Writes `n` samples of `sample` to `path`; values and labels depend on `first` (the global
// index of the file's first sample) so that a read from the wrong file shows.
template <typename T>
void write_shard(const std::string& path, Shape sample, SampleType type, bool per_pixel, int compression, int64_t first,
                 int64_t n, std::vector<T>& all_images, std::vector<int32_t>& all_labels) {
  ShardWriter w(path, sample, type, per_pixel, compression, test_meta(static_cast<int>(sample.c())));
  const int64_t per = sample.per_sample(), nl = per_pixel ? sample.h() * sample.w() : 1;
  for (int64_t i = first; i < first + n; ++i) {
    std::vector<T> image(static_cast<size_t>(per));
    std::vector<int32_t> labels(static_cast<size_t>(nl));
    for (int64_t p = 0; p < per; ++p)
      image[static_cast<size_t>(p)] = type == SampleType::uint8 ? static_cast<T>((i * 31 + p * 7) % 256)
                                                                : static_cast<T>(std::sin(double(i * 100 + p)) * 1e3);
    for (int64_t p = 0; p < nl; ++p) labels[static_cast<size_t>(p)] = static_cast<int32_t>((i + p) % 3);
    w.append(image.data(), labels.data());
    all_images.insert(all_images.end(), image.begin(), image.end());
    all_labels.insert(all_labels.end(), labels.begin(), labels.end());
  }
  CHECK(w.count() == n);
  w.close();
}

bool have_h5py() {
  static const bool ok = squall::test::run_command("/usr/bin/python3 -c 'import h5py, numpy'").exit_code == 0;
  return ok;
}

// Runs a Python snippet with h5py and numpy imported and `path` bound.
void h5py(const std::string& path, const std::string& code) {
  const std::string script = "import h5py, numpy as np\npath = '" + path + "'\n" + code;
  const std::string py = path + ".py";
  std::ofstream(py) << script;
  const auto r = squall::test::run_command("/usr/bin/python3 " + py);
  REQUIRE(r.exit_code == 0);
}

std::string open_error(const std::string& path) {
  try {
    squall::formats::open_shard_files({path}, k_raw);
  } catch (const squall::Error& e) {
    return e.what();
  }
  return "(opened without error)";
}

}  // namespace

TEST_CASE("shard round trip: uint8 images, one label per sample, several files", "[io]") {
  const int compression = GENERATE(0, 5);
  TempDir d;
  const Shape sample(1, 2, 3, 4);
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
  write_shard(d.file(squall::formats::shard_name("train", 0, 2)), sample, SampleType::uint8, false, compression, 0, 5,
              images, labels);
  write_shard(d.file(squall::formats::shard_name("train", 1, 2)), sample, SampleType::uint8, false, compression, 5, 3,
              images, labels);
  CHECK(squall::formats::shard_name("train", 3, 16) == "train-00003-of-00016.h5");
  CHECK(squall::formats::detect_format(d.path.string()) == squall::formats::DatasetFormat::shards);
  CHECK_FALSE(fs::exists(d.file("train-00000-of-00002.h5.tmp")));

  auto src = squall::formats::open_shards(d.path.string(), "train", k_raw);
  REQUIRE(src->size() == 8);
  CHECK(src->info().sample == sample);
  CHECK(src->info().classes == 3);
  CHECK_FALSE(src->info().per_pixel_labels);
  CHECK(src->files() == std::vector<std::string>{d.file("train-00000-of-00002.h5"), d.file("train-00001-of-00002.h5")});
  CHECK(src->file_offsets() == std::vector<int64_t>{0, 5, 8});

  // Out of order and across the file boundary.
  const std::vector<int64_t> idx = {7, 0, 5, 4, 2, 6, 1, 3};
  std::vector<float> out(idx.size() * 24);
  std::vector<int32_t> lab(idx.size());
  src->read(idx, out.data(), lab.data());
  for (size_t k = 0; k < idx.size(); ++k) {
    const size_t i = static_cast<size_t>(idx[k]);
    CHECK(lab[k] == labels[i]);
    for (size_t p = 0; p < 24; ++p) REQUIRE(out[k * 24 + p] == static_cast<float>(images[i * 24 + p]));
  }

  const auto info = squall::formats::read_shard_info(d.file("train-00000-of-00002.h5"));
  CHECK(info.count == 5);
  CHECK(info.type == SampleType::uint8);
  CHECK(info.compression == compression);
  const ShardMeta m = test_meta(2);
  CHECK(info.meta.class_names == m.class_names);
  CHECK(info.meta.channel_names == m.channel_names);
  CHECK(info.meta.mean == m.mean);
  CHECK(info.meta.std == m.std);
  CHECK(info.meta.min == m.min);
  CHECK(info.meta.max == m.max);
  CHECK(info.meta.source == "unit test");

  // Normalised reads: zscore (x - mean) / std and minmax (x - min) / (max - min) per channel.
  auto z = squall::formats::open_shards(d.path.string(), "train",
                                        OpenOptions{true, squall::data::NormalizationKind::zscore});
  auto mm = squall::formats::open_shards(d.path.string(), "train",
                                         OpenOptions{true, squall::data::NormalizationKind::minmax});
  std::vector<float> zo(24), mo(24);
  int32_t l = 0;
  const int64_t one = 6;
  z->read(std::span<const int64_t>(&one, 1), zo.data(), &l);
  mm->read(std::span<const int64_t>(&one, 1), mo.data(), &l);
  for (size_t p = 0; p < 24; ++p) {
    const size_t c = p / 12;
    const float x = images[6 * 24 + p];
    CHECK(zo[p] == Approx((x - m.mean[c]) / m.std[c]).epsilon(1e-6));
    CHECK(mo[p] == Approx((x - m.min[c]) / (m.max[c] - m.min[c])).epsilon(1e-6));
  }
}

TEST_CASE("shard round trip: float32 images with per-pixel labels", "[io]") {
  const int compression = GENERATE(0, 3);
  TempDir d;
  const Shape sample(1, 3, 5, 6);
  std::vector<float> images;
  std::vector<int32_t> labels;
  write_shard(d.file("test-00000-of-00001.h5"), sample, SampleType::float32, true, compression, 0, 4, images, labels);
  auto src = squall::formats::open_shards(d.path.string(), "test", k_raw);
  REQUIRE(src->size() == 4);
  CHECK(src->info().per_pixel_labels);
  std::vector<int64_t> idx = {3, 1, 0, 2};
  std::vector<float> out(4 * 90);
  std::vector<int32_t> lab(4 * 30);
  src->read(idx, out.data(), lab.data());
  for (size_t k = 0; k < 4; ++k) {
    const size_t i = static_cast<size_t>(idx[k]);
    for (size_t p = 0; p < 90; ++p) REQUIRE(out[k * 90 + p] == images[i * 90 + p]);
    for (size_t p = 0; p < 30; ++p) REQUIRE(lab[k * 30 + p] == labels[i * 30 + p]);
  }
  CHECK_THROWS_WITH(squall::formats::open_shards(d.path.string(), "train", k_raw), Contains("no train shards"));
}

TEST_CASE("shard writer: no file without close(), sample type checked", "[io]") {
  TempDir d;
  {
    ShardWriter w(d.file("train-00000-of-00001.h5"), Shape(1, 1, 2, 2), SampleType::uint8, false, 0, test_meta(1));
    const float f[4] = {0, 0, 0, 0};
    const int32_t l = 0;
    CHECK_THROWS_WITH(w.append(f, &l), Contains("float32 sample appended to a uint8 shard"));
  }
  CHECK(fs::is_empty(d.path));
  CHECK(squall::formats::detect_format(d.path.string()) == squall::formats::DatasetFormat::none);
}

TEST_CASE("broken shards: errors name the file and dataset", "[io]") {
  TempDir d;
  const Shape sample(1, 1, 4, 4);
  std::vector<float> images;
  std::vector<int32_t> labels;
  const std::string good = d.file("train-00000-of-00001.h5");
  write_shard(good, sample, SampleType::float32, false, 0, 0, 6, images, labels);

  SECTION("truncated file") {
    const std::string cut = d.file("cut-00000-of-00001.h5");
    fs::copy_file(good, cut);
    fs::resize_file(cut, fs::file_size(cut) / 2);
    const std::string e = open_error(cut);
    CHECK_THAT(e, Contains(cut));
    CHECK_THAT(e, Contains("truncated"));
    const auto report = squall::formats::inspect_paths({cut});
    REQUIRE(report.errors.size() == 1);
    CHECK_THAT(report.errors[0], Contains(cut));
  }
  SECTION("not HDF5 at all") {
    const std::string junk = d.file("junk-00000-of-00001.h5");
    std::ofstream(junk) << "hello";
    CHECK_THAT(open_error(junk), Contains(junk) && Contains("not an HDF5 file"));
  }
  SECTION("NaN and infinite values are bad samples naming file and index") {
    const std::string bad = d.file("nan-00000-of-00001.h5");
    {
      ShardWriter w(bad, sample, SampleType::float32, false, 0, test_meta(1));
      std::vector<float> img(16, 1.0f);
      const int32_t l = 1;
      w.append(img.data(), &l);
      img[5] = NAN;
      w.append(img.data(), &l);
      img[5] = INFINITY;
      w.append(img.data(), &l);
      w.close();
    }
    auto src = squall::formats::open_shard_files({bad}, k_raw);
    std::vector<float> out(16);
    int32_t l = 0;
    for (int64_t i : {int64_t{1}, int64_t{2}}) {
      try {
        src->read(std::span<const int64_t>(&i, 1), out.data(), &l);
        FAIL("no BadSample for sample " << i);
      } catch (const squall::data::BadSample& e) {
        CHECK(e.file() == bad);
        CHECK(e.index() == i);
        CHECK_THAT(std::string(e.what()), Contains(bad) && Contains("/images") && Contains("index " + std::to_string(i)));
      }
    }
    const int64_t zero = 0;
    src->read(std::span<const int64_t>(&zero, 1), out.data(), &l);
    const auto report = squall::formats::inspect_paths({bad});
    CHECK(report.samples == 1);
    CHECK(report.errors.size() == 2);
  }
  SECTION("label outside the classes is a bad sample") {
    const std::string bad = d.file("label-00000-of-00001.h5");
    ShardWriter w(bad, sample, SampleType::float32, false, 0, test_meta(1));
    std::vector<float> img(16, 1.0f);
    const int32_t l = 7;
    w.append(img.data(), &l);
    w.close();
    auto src = squall::formats::open_shard_files({bad}, k_raw);
    int32_t out_l = 0;
    const int64_t zero = 0;
    CHECK_THROWS_AS(src->read(std::span<const int64_t>(&zero, 1), img.data(), &out_l), squall::data::BadSample);
    CHECK_THROWS_WITH(src->read(std::span<const int64_t>(&zero, 1), img.data(), &out_l),
                      Contains(bad) && Contains("/labels") && Contains("label 7"));
  }
  SECTION("shards that disagree") {
    std::vector<uint8_t> im8;
    std::vector<int32_t> l8;
    write_shard(d.file("train-00001-of-00002.h5"), Shape(1, 1, 5, 5), SampleType::uint8, false, 0, 0, 2, im8, l8);
    CHECK_THROWS_WITH(squall::formats::open_shard_files({good, d.file("train-00001-of-00002.h5")}, k_raw),
                      Contains("train-00001-of-00002.h5") && Contains("[1,1,5,5]"));
  }
}

// Its own case: without h5py it skips, and the broken-shard sections above still run.
TEST_CASE("broken shards of the wrong layout, written by h5py: errors name the file and dataset", "[io]") {
  if (!have_h5py()) SQUALL_SKIP("/usr/bin/python3 cannot import h5py and numpy (install python3-h5py)");
  TempDir d;
  std::vector<float> images;
  std::vector<int32_t> labels;
  write_shard(d.file("train-00000-of-00001.h5"), Shape(1, 1, 4, 4), SampleType::float32, false, 0, 0, 6, images,
              labels);
  const std::string f = d.file("bad-00000-of-00001.h5");
  const std::string labels_ok = "f.create_dataset('labels', data=np.zeros(4, np.int32))\n";
  SECTION("images as float64") {
    h5py(f, "with h5py.File(path, 'w') as f:\n  f.create_dataset('images', data=np.zeros((4,1,2,2)))\n  " + labels_ok);
    CHECK_THAT(open_error(f), Contains(f) && Contains("/images") && Contains("float64"));
  }
  SECTION("images as int16") {
    h5py(f, "with h5py.File(path, 'w') as f:\n  f.create_dataset('images', data=np.zeros((4,1,2,2), np.int16))\n  " + labels_ok);
    CHECK_THAT(open_error(f), Contains(f) && Contains("/images") && Contains("int16"));
  }
  SECTION("images of rank 3") {
    h5py(f, "with h5py.File(path, 'w') as f:\n  f.create_dataset('images', data=np.zeros((4,2,2), np.uint8))\n  " + labels_ok);
    CHECK_THAT(open_error(f), Contains(f) && Contains("/images") && Contains("rank 4"));
  }
  SECTION("fewer labels than images") {
    h5py(f, "with h5py.File(path, 'w') as f:\n  f.create_dataset('images', data=np.zeros((4,1,2,2), np.uint8))\n"
            "  f.create_dataset('labels', data=np.zeros(3, np.int32))\n");
    CHECK_THAT(open_error(f), Contains(f) && Contains("/labels") && Contains("3 labels"));
  }
  SECTION("labels missing") {
    h5py(f, "with h5py.File(path, 'w') as f:\n  f.create_dataset('images', data=np.zeros((4,1,2,2), np.uint8))\n");
    CHECK_THAT(open_error(f), Contains(f) && Contains("/labels is missing"));
    const auto report = squall::formats::inspect_paths({d.path.string()});
    CHECK(report.format == squall::formats::DatasetFormat::shards);
    REQUIRE(report.errors.size() == 1);
    CHECK_THAT(report.errors[0], Contains(f) && Contains("/labels"));
    CHECK(report.samples == 6);  // the good shard beside it was still read
  }
}

TEST_CASE("detect_format tells the dataset kinds apart", "[io]") {
  TempDir d;
  CHECK(squall::formats::detect_format(d.path.string()) == squall::formats::DatasetFormat::none);
  CHECK(squall::formats::detect_format(d.file("missing")) == squall::formats::DatasetFormat::none);
  std::ofstream(d.file("data-2106-01-01-00-1.h5")) << "x";
  CHECK(squall::formats::detect_format(d.path.string()) == squall::formats::DatasetFormat::deepcam);
  std::ofstream(d.file("train-images-idx3-ubyte.gz")) << "x";
  CHECK(squall::formats::detect_format(d.path.string()) == squall::formats::DatasetFormat::idx);
}

TEST_CASE("shard reads from several threads at once agree with one thread", "[io]") {
  TempDir d;
  const Shape sample(1, 2, 8, 8);
  std::vector<float> images;
  std::vector<int32_t> labels;
  for (int f = 0; f < 3; ++f)
    write_shard(d.file(squall::formats::shard_name("train", f, 3)), sample, SampleType::float32, false, 2, f * 40, 40,
                images, labels);
  auto src = squall::formats::open_shards(d.path.string(), "train", k_raw);
  REQUIRE(src->size() == 120);
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> out(128);
      int32_t l = 0;
      for (int rep = 0; rep < 5; ++rep)
        for (int64_t i = t; i < 120; i += 3) {
          src->read(std::span<const int64_t>(&i, 1), out.data(), &l);
          if (l != labels[static_cast<size_t>(i)] ||
              !std::equal(out.begin(), out.end(), images.begin() + i * 128))
            ++mismatches[static_cast<size_t>(t)];
        }
    });
  for (auto& th : threads) th.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}
