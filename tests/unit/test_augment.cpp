// Augmentation on the sphere: a roll in longitude moves fields and labels together and
// periodically; a north-south flip reverses the rows and changes the meridional wind's sign in
// raw units (written in normalised ones); the draws depend on (seed, rank, learner, step,
// sample) only; data that is not climate fields is refused, naming the key.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "src/core/error.hpp"
#include "src/data/augment.hpp"

using namespace squall;

namespace {

data::DatasetInfo climate_info(int64_t c, int64_t h, int64_t w) {
  data::DatasetInfo info;
  info.sample = nn::Shape(1, c, h, w);
  info.classes = 3;
  info.per_pixel_labels = true;
  info.description = "test fields";
  return info;
}

}  // namespace

TEST_CASE("a roll in longitude moves every channel and the labels together, periodically", "[augment]") {
  const int64_t n = 8, c = 3, h = 4, w = 7;
  std::vector<float> images(static_cast<size_t>(n * c * h * w));
  std::vector<int32_t> labels(static_cast<size_t>(n * h * w));
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 3);
  const auto before = images;
  const auto labels_before = labels;
  const data::SphereAugment a = data::make_sphere_augment(true, false, climate_info(c, h, w), {});
  data::augment_batch(a, images.data(), labels.data(), n, c, h, w, 7, 0, 0, 3);
  int rolled = 0;
  for (int64_t k = 0; k < n; ++k) {
    // The shift of sample k: where its pixel (0, 0) of channel 0 went.
    const float* src = before.data() + k * c * h * w;
    const float* dst = images.data() + k * c * h * w;
    int64_t shift = -1;
    for (int64_t x = 0; x < w; ++x)
      if (dst[x] == src[0]) shift = x;
    REQUIRE(shift >= 0);
    rolled += shift != 0;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const int64_t at = ch * h * w + y * w + (x + shift) % w;
          CHECK(dst[at] == src[ch * h * w + y * w + x]);
          if (ch == 0) CHECK(labels[k * h * w + y * w + (x + shift) % w] == labels_before[k * h * w + y * w + x]);
        }
  }
  CHECK(rolled > 0);  // 8 draws of 7 shifts: not all zero
}

TEST_CASE("a north-south flip reverses the rows and negates the meridional wind in raw units", "[augment]") {
  const int64_t c = 16, h = 4, w = 3;
  data::Normalization norm;
  norm.kind = "zscore";
  for (int64_t i = 0; i < c; ++i) {
    norm.mean.push_back(0.5f * static_cast<float>(i));
    norm.std.push_back(2.0f + static_cast<float>(i));
  }
  const data::SphereAugment a = data::make_sphere_augment(false, true, climate_info(c, h, w), norm);
  // Raw fields, normalised as the reader would; find a draw that flips (the draw is a coin).
  std::vector<float> raw(static_cast<size_t>(c * h * w));
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = std::sin(0.7f * static_cast<float>(i)) * 10.0f;
  auto normalised = [&](const std::vector<float>& r) {
    std::vector<float> x(r.size());
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < h * w; ++p)
        x[ch * h * w + p] = (r[ch * h * w + p] - norm.mean[ch]) / norm.std[ch];
    return x;
  };
  int flips = 0, stays = 0;
  for (int64_t step = 0; step < 16; ++step) {
    std::vector<float> x = normalised(raw);
    std::vector<int32_t> labels(static_cast<size_t>(h * w));
    for (int64_t p = 0; p < h * w; ++p) labels[p] = static_cast<int32_t>(p / w % 3);
    data::augment_batch(a, x.data(), labels.data(), 1, c, h, w, 5, 0, 0, step);
    std::vector<float> expect_raw = raw;
    if (labels[w] != 1) {  // row 1's label (1) moved: the rows were reversed (0 1 2 0 -> 0 2 1 0)
      ++flips;
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t xx = 0; xx < w; ++xx) {
            float v = raw[ch * h * w + (h - 1 - y) * w + xx];
            if (ch == 2 || ch == 4) v = -v;
            expect_raw[ch * h * w + y * w + xx] = v;
          }
      for (int64_t y = 0; y < h; ++y) CHECK(labels[y * w] == static_cast<int32_t>((h - 1 - y) % 3));
    } else {
      ++stays;
    }
    const std::vector<float> expect = normalised(expect_raw);
    for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == Approx(expect[i]).margin(1e-5));
  }
  CHECK(flips > 0);
  CHECK(stays > 0);
}

TEST_CASE("the draws depend on seed, rank, learner, step and sample only", "[augment]") {
  const int64_t n = 4, c = 16, h = 6, w = 10;
  const data::SphereAugment a = data::make_sphere_augment(true, true, climate_info(c, h, w), {});
  auto run = [&](uint64_t seed, int rank, int learner, int64_t step) {
    std::vector<float> x(static_cast<size_t>(n * c * h * w));
    std::vector<int32_t> l(static_cast<size_t>(n * h * w));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97);
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<int32_t>(i % 3);
    data::augment_batch(a, x.data(), l.data(), n, c, h, w, seed, rank, learner, step);
    return x;
  };
  CHECK(run(1, 0, 0, 5) == run(1, 0, 0, 5));
  CHECK(run(1, 0, 0, 5) != run(1, 0, 0, 6));
  CHECK(run(1, 0, 0, 5) != run(2, 0, 0, 5));
  CHECK(run(1, 0, 0, 5) != run(1, 1, 0, 5));
  CHECK(run(1, 0, 0, 5) != run(1, 0, 1, 5));
}

TEST_CASE("augmentation on the sphere is refused for data that is not climate fields", "[augment]") {
  data::DatasetInfo images = climate_info(1, 28, 28);
  images.per_pixel_labels = false;
  images.description = "Fashion-MNIST train";
  CHECK_THROWS_WITH(data::make_sphere_augment(true, false, images, {}),
                    Catch::Contains("data.augment_roll") && Catch::Contains("Fashion-MNIST"));
  CHECK_THROWS_WITH(data::make_sphere_augment(false, true, climate_info(3, 8, 8), {}),
                    Catch::Contains("data.augment_flip") && Catch::Contains("16 channels"));
  CHECK_FALSE(data::make_sphere_augment(false, false, images, {}).any());
}
