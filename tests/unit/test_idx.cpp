// The IDX reader on Debian's real Fashion-MNIST files, and its errors on broken files.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "io/formats/dataset.hpp"
#include "src/core/error.hpp"
#include "io/input/open_dataset.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using Catch::Contains;
using squall::input::k_debian_fashion_mnist_dir;
using squall::formats::open_idx;

namespace {

bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(k_debian_fashion_mnist_dir) + "/train-labels-idx1-ubyte.gz") ||
         std::filesystem::exists(std::string(k_debian_fashion_mnist_dir) + "/train-labels-idx1-ubyte");
}

struct TempDir : squall::test::TempDir {
  TempDir() : squall::test::TempDir("squall-idx") {}
};

void put_u32(std::ofstream& f, uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  f.write(reinterpret_cast<const char*>(b), 4);
}

// A small uncompressed IDX pair: n images of 2x3 and their labels.
void write_idx(const TempDir& d, uint32_t image_magic, uint32_t n, size_t pixel_bytes, uint32_t label_count) {
  std::ofstream img(d.file("t10k-images-idx3-ubyte"), std::ios::binary);
  put_u32(img, image_magic);
  put_u32(img, n);
  put_u32(img, 2);
  put_u32(img, 3);
  for (size_t i = 0; i < pixel_bytes; ++i) img.put(static_cast<char>(i * 40));
  std::ofstream lab(d.file("t10k-labels-idx1-ubyte"), std::ios::binary);
  put_u32(lab, 0x801);
  put_u32(lab, label_count);
  for (uint32_t i = 0; i < label_count; ++i) lab.put(static_cast<char>(i % 10));
}

}  // namespace

TEST_CASE("reads Debian's Fashion-MNIST", "[data]") {
  if (!have_fashion_mnist()) SQUALL_SKIP(k_debian_fashion_mnist_dir << " missing (install dataset-fashion-mnist)");
  auto train = open_idx(k_debian_fashion_mnist_dir, "train");
  auto test = open_idx(k_debian_fashion_mnist_dir, "test");
  CHECK(train->size() == 60000);
  CHECK(test->size() == 10000);
  const auto& info = train->info();
  CHECK(info.sample == squall::nn::Shape(1, 1, 28, 28));
  CHECK(info.classes == 10);
  REQUIRE(info.class_names.size() == 10);
  CHECK(info.class_names[0] == "T-shirt/top");
  CHECK(info.class_names[9] == "Ankle boot");
  CHECK_FALSE(info.per_pixel_labels);

  // The whole training set: label range, first label, normalised mean and std.
  const int64_t n = train->size();
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  std::vector<float> images(static_cast<size_t>(n) * 784);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  train->read(idx, images.data(), labels.data());
  CHECK(labels[0] == 9);  // Ankle boot
  std::vector<int64_t> per_class(10, 0);
  for (const int32_t l : labels) {
    REQUIRE(l >= 0);
    REQUIRE(l < 10);
    ++per_class[static_cast<size_t>(l)];
  }
  for (const int64_t c : per_class) CHECK(c == 6000);
  double sum = 0, sq = 0;
  for (const float v : images) sum += v, sq += static_cast<double>(v) * v;
  const double mean = sum / static_cast<double>(images.size());
  const double std = std::sqrt(sq / static_cast<double>(images.size()) - mean * mean);
  CHECK(std::fabs(mean) < 0.01);
  CHECK(std == Approx(1.0).margin(0.01));

  // Reading an arbitrary subset gives the same sample as the full pass.
  std::vector<int64_t> some = {59999, 0};
  std::vector<float> two(2 * 784);
  std::vector<int32_t> two_labels(2);
  train->read(some, two.data(), two_labels.data());
  CHECK(two_labels[0] == labels[59999]);
  CHECK(two[784 + 100] == images[100]);
  CHECK_THROWS_WITH(train->read(std::vector<int64_t>{60000}, two.data(), two_labels.data()),
                    Contains("train-images-idx3-ubyte") && Contains("60000"));
}

TEST_CASE("missing folders and files name the path and the package", "[data]") {
  CHECK_THROWS_WITH(open_idx("/nonexistent/fmnist", "train"),
                    Contains("/nonexistent/fmnist") && Contains("dataset-fashion-mnist"));
  TempDir d;
  CHECK_THROWS_WITH(open_idx(d.path.string(), "test"),
                    Contains("t10k-images-idx3-ubyte") && Contains("dataset-fashion-mnist"));
  CHECK_THROWS_WITH(open_idx(d.path.string(), "validation"), Contains("validation"));
}

TEST_CASE("broken IDX files are errors naming the file", "[data]") {
  TempDir d;
  SECTION("a small valid pair reads") {
    write_idx(d, 0x803, 2, 12, 2);
    auto src = open_idx(d.path.string(), "test");
    CHECK(src->size() == 2);
    CHECK(src->info().sample == squall::nn::Shape(1, 1, 2, 3));
    std::vector<float> x(6);
    std::vector<int32_t> y(1);
    src->read(std::vector<int64_t>{1}, x.data(), y.data());
    CHECK(y[0] == 1);
    CHECK(x[0] == Approx((6 * 40 / 255.0 - 0.2860) / 0.3530));
  }
  SECTION("wrong magic") {
    write_idx(d, 0x802, 2, 12, 2);
    CHECK_THROWS_WITH(open_idx(d.path.string(), "test"),
                      Contains(d.file("t10k-images-idx3-ubyte")) && Contains("magic"));
  }
  SECTION("truncated pixels") {
    write_idx(d, 0x803, 2, 7, 2);
    CHECK_THROWS_WITH(open_idx(d.path.string(), "test"),
                      Contains(d.file("t10k-images-idx3-ubyte")) && Contains("truncated"));
  }
  SECTION("label count differs") {
    write_idx(d, 0x803, 2, 12, 3);
    CHECK_THROWS_WITH(open_idx(d.path.string(), "test"), Contains(d.file("t10k-labels-idx1-ubyte")));
  }
  SECTION("truncated gzip") {
    write_idx(d, 0x803, 2, 12, 2);
    // Compress the images, then cut the .gz short; the plain file is removed so .gz is read.
    std::ifstream in(d.file("t10k-images-idx3-ubyte"), std::ios::binary);
    std::string raw((std::istreambuf_iterator<char>(in)), {});
    gzFile gz = gzopen(d.file("t10k-images-idx3-ubyte.gz").c_str(), "wb");
    gzwrite(gz, raw.data(), static_cast<unsigned>(raw.size()));
    gzclose(gz);
    std::filesystem::remove(d.file("t10k-images-idx3-ubyte"));
    std::filesystem::resize_file(d.file("t10k-images-idx3-ubyte.gz"), 20);
    CHECK_THROWS_WITH(open_idx(d.path.string(), "test"), Contains(d.file("t10k-images-idx3-ubyte.gz")));
  }
}
