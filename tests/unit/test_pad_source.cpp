// data.pad (io/input/pad_source.hpp): grids the model's stride does not divide, refused, padded
// (longitude periodically on a global grid, by the edge elsewhere; padded labels -1) or cropped,
// centred, with their coordinates; the masks mapped back onto the input's grid; padded pixels
// left out of the loss and the confusion matrix; the multiple each zoo model needs; and
// predict's grid rule and input statistics check (src/eval/predict.hpp); and the netCDF mask's
// fill value for pixels without a class, as xarray reads it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "io/formats/mask.hpp"
#include "io/formats/netcdf_mask.hpp"
#include "io/input/pad_source.hpp"
#include "src/core/error.hpp"
#include "src/eval/predict.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/metrics.hpp"
#include "src/nn/models/input_multiple.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_backend.hpp"

using namespace squall;
using input::GridFit;

namespace {

// Samples held in memory: image value 1000 s + 100 c + 10 y + x... as a code of where it came
// from (s sample, c channel, y row, x column), label y * w + x.
class GridSource final : public data::DataSource {
 public:
  GridSource(int64_t n, int64_t c, int64_t h, int64_t w, std::vector<double> lat, std::vector<double> lon)
      : m_n(n) {
    m_info.sample = nn::Shape(1, c, h, w);
    m_info.classes = 1000;
    m_info.per_pixel_labels = true;
    m_info.lat = std::move(lat);
    m_info.lon = std::move(lon);
    m_info.description = "grid test source";
  }
  const data::DatasetInfo& info() const override { return m_info; }
  int64_t size() const override { return m_n; }
  void read(std::span<const int64_t> indices, float* images, int32_t* labels) const override {
    const int64_t c = m_info.sample.c(), h = m_info.sample.h(), w = m_info.sample.w();
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t s = indices[k];
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) images[((static_cast<int64_t>(k) * c + ch) * h + y) * w + x] = value(s, ch, y, x);
      if (labels != nullptr)
        for (int64_t p = 0; p < h * w; ++p) labels[static_cast<int64_t>(k) * h * w + p] = static_cast<int32_t>(p);
    }
  }
  static float value(int64_t s, int64_t c, int64_t y, int64_t x) {
    return static_cast<float>(100000 * s + 10000 * c + 100 * y + x);
  }

 private:
  int64_t m_n;
  data::DatasetInfo m_info;
};

std::vector<double> steps(double first, double step, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = first + step * static_cast<double>(i);
  return v;
}

}  // namespace

TEST_CASE("data.pad = none refuses a grid the stride does not divide, naming both sizes, the stride and the key",
          "[pad]") {
  const GridSource era5(1, 2, 721, 1440, steps(-90, 0.25, 721), steps(0, 0.25, 1440));
  try {
    (void)input::plan_grid_fit(era5.info(), data::PadMode::none, 16, "data.train = era5/", "unet of depth 4");
    FAIL("a grid of 721 rows was accepted for a multiple of 16");
  } catch (const UsageError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("data.train = era5/") && Catch::Contains("721 x 1440") &&
                      Catch::Contains("unet of depth 4") && Catch::Contains("multiples of 16") &&
                      Catch::Contains("data.pad = \"pad\"") && Catch::Contains("736 x 1440") &&
                      Catch::Contains("data.pad = \"crop\"") && Catch::Contains("720 x 1440"));
  }
  // A grid that fits, or a multiple of 1, passes as it is whatever the mode.
  for (const data::PadMode mode : {data::PadMode::none, data::PadMode::pad, data::PadMode::crop}) {
    CHECK_FALSE(input::plan_grid_fit(era5.info(), mode, 1, "x", "m").changes());
    const GridSource fits(1, 2, 32, 48, {}, {});
    CHECK_FALSE(input::plan_grid_fit(fits.info(), mode, 16, "x", "m").changes());
  }
  // Cropping a side shorter than the multiple would leave nothing.
  const GridSource small(1, 1, 7, 40, {}, {});
  CHECK_THROWS_AS(input::plan_grid_fit(small.info(), data::PadMode::crop, 8, "x", "m"), UsageError);
}

TEST_CASE("data.pad = pad: a global grid's longitudes wrap, latitudes repeat the edge row, padded labels are -1",
          "[pad]") {
  // 5 x 6 at 60 degrees of longitude (global), latitudes 36 apart; to multiples of 4: 8 x 8,
  // 1 row south and 2 north, 1 column west and 1 east.
  const int64_t h = 5, w = 6;
  auto inner = std::make_unique<GridSource>(2, 2, h, w, steps(-72, 36, h), steps(30, 60, w));
  const GridFit fit = input::plan_grid_fit(inner->info(), data::PadMode::pad, 4, "x", "m");
  CHECK(fit.out_h == 8);
  CHECK(fit.out_w == 8);
  CHECK(fit.top == 1);
  CHECK(fit.left == 1);
  CHECK(fit.periodic);
  const auto src = input::fit_grid(std::move(inner), fit);
  const data::DatasetInfo& info = src->info();
  CHECK(info.sample == nn::Shape(1, 2, 8, 8));
  CHECK(src->size() == 2);
  // Coordinates: latitude extended by its spacing, longitude by whole turns.
  CHECK(info.lat == std::vector<double>{-108, -72, -36, 0, 36, 72, 108, 144});
  CHECK(info.lon == std::vector<double>{-30, 30, 90, 150, 210, 270, 330, 390});
  std::vector<float> images(static_cast<size_t>(2 * 2 * 64));
  std::vector<int32_t> labels(static_cast<size_t>(2 * 64));
  const std::vector<int64_t> idx{1, 0};
  src->read(idx, images.data(), labels.data());
  for (int64_t k = 0; k < 2; ++k)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t y = 0; y < 8; ++y)
        for (int64_t x = 0; x < 8; ++x) {
          const int64_t sy = std::clamp<int64_t>(y - 1, 0, h - 1), sx = ((x - 1) % w + w) % w;
          INFO("sample " << k << " channel " << c << " row " << y << " column " << x);
          REQUIRE(images[static_cast<size_t>(((k * 2 + c) * 8 + y) * 8 + x)] == GridSource::value(idx[k], c, sy, sx));
        }
  for (int64_t k = 0; k < 2; ++k)
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x) {
        const bool inside = y >= 1 && y < 1 + h && x >= 1 && x < 1 + w;
        REQUIRE(labels[static_cast<size_t>((k * 8 + y) * 8 + x)] == (inside ? (y - 1) * w + (x - 1) : -1));
      }
  // The west pad column is the grid's east edge, the east pad column its west edge.
  CHECK(images[8 * 3 + 0] == GridSource::value(1, 0, 2, w - 1));
  CHECK(images[8 * 3 + 7] == GridSource::value(1, 0, 2, 0));
}

TEST_CASE("data.pad = pad on a regional grid, or one without coordinates, repeats the edge column", "[pad]") {
  // 5 x 6 covering 60 degrees of longitude: not global.
  for (const bool coordinates : {true, false}) {
    INFO((coordinates ? "regional coordinates" : "no coordinates"));
    auto inner = std::make_unique<GridSource>(1, 1, 5, 6, coordinates ? steps(10, 2, 5) : std::vector<double>{},
                                              coordinates ? steps(100, 10, 6) : std::vector<double>{});
    const GridFit fit = input::plan_grid_fit(inner->info(), data::PadMode::pad, 4, "x", "m");
    CHECK_FALSE(fit.periodic);
    const auto src = input::fit_grid(std::move(inner), fit);
    if (coordinates) {
      CHECK(src->info().lon == std::vector<double>{90, 100, 110, 120, 130, 140, 150, 160});
      CHECK(src->info().lat == std::vector<double>{8, 10, 12, 14, 16, 18, 20, 22});
    } else {
      CHECK(src->info().lat.empty());
      CHECK(src->info().lon.empty());
    }
    std::vector<float> images(64);
    const int64_t i = 0;
    src->read(std::span<const int64_t>(&i, 1), images.data(), nullptr);  // no labels asked for: none read
    for (int64_t y = 0; y < 8; ++y) {
      const int64_t sy = std::clamp<int64_t>(y - 1, 0, 4);
      CHECK(images[static_cast<size_t>(y * 8 + 0)] == GridSource::value(0, 0, sy, 0));
      CHECK(images[static_cast<size_t>(y * 8 + 7)] == GridSource::value(0, 0, sy, 5));
    }
  }
}

TEST_CASE("data.pad = crop keeps the centre, its coordinates and labels, and the masks go back with a fill", "[pad]") {
  // 7 x 11 to multiples of 4: 4 x 8, 1 row cut south and 2 north, 1 column west and 2 east.
  const int64_t h = 7, w = 11;
  auto inner = std::make_unique<GridSource>(1, 1, h, w, steps(0, 1, h), steps(0, 1, w));
  const GridFit fit = input::plan_grid_fit(inner->info(), data::PadMode::crop, 4, "x", "m");
  CHECK(fit.out_h == 4);
  CHECK(fit.out_w == 8);
  CHECK(fit.top == 1);
  CHECK(fit.left == 1);
  const auto src = input::fit_grid(std::move(inner), fit);
  CHECK(src->info().lat == std::vector<double>{1, 2, 3, 4});
  CHECK(src->info().lon == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK_THAT(src->info().description, Catch::Contains("cropped from 7 x 11 to 4 x 8"));
  std::vector<float> images(32);
  std::vector<int32_t> labels(32);
  const int64_t i = 0;
  src->read(std::span<const int64_t>(&i, 1), images.data(), labels.data());
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 8; ++x) {
      CHECK(images[static_cast<size_t>(y * 8 + x)] == GridSource::value(0, 0, y + 1, x + 1));
      CHECK(labels[static_cast<size_t>(y * 8 + x)] == (y + 1) * w + (x + 1));
    }
  // Back onto the input's grid: the model's values where it saw the input, the fill elsewhere.
  std::vector<uint8_t> model(32), back(static_cast<size_t>(h * w));
  for (size_t p = 0; p < model.size(); ++p) model[p] = static_cast<uint8_t>(p % 3);
  input::unfit_plane(model.data(), back.data(), fit, uint8_t{255});
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const bool seen = y >= 1 && y < 5 && x >= 1 && x < 9;
      CHECK(back[static_cast<size_t>(y * w + x)] ==
            (seen ? model[static_cast<size_t>((y - 1) * 8 + (x - 1))] : uint8_t{255}));
    }
}

TEST_CASE("a padded plane goes back onto the input's grid as it was", "[pad]") {
  GridSource g(1, 1, 9, 13, {}, steps(0, 360.0 / 13, 13));
  const GridFit fit = input::plan_grid_fit(g.info(), data::PadMode::pad, 8, "x", "m");
  REQUIRE(fit.changes());
  std::vector<float> in(9 * 13), padded(static_cast<size_t>(fit.out_h * fit.out_w)), back(9 * 13);
  for (size_t p = 0; p < in.size(); ++p) in[p] = static_cast<float>(p) * 0.5f;
  input::fit_plane(in.data(), padded.data(), fit);
  input::unfit_plane(padded.data(), back.data(), fit, -1.0f);
  CHECK(back == in);
}

TEST_CASE("padded pixels change neither the loss nor the confusion matrix", "[pad][cpu]") {
  // Logits and labels on a 5 x 6 grid, then padded to 8 x 8 with labels -1 and logits that would
  // cost a lot if they counted: the same mean loss, the same confusion, the same mIoU.
  const int64_t n = 2, k = 3, h = 5, w = 6;
  GridSource g(1, 1, h, w, {}, {});
  const GridFit fit = input::plan_grid_fit(g.info(), data::PadMode::pad, 4, "x", "m");
  const int64_t hw = h * w, phw = fit.out_h * fit.out_w;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(n * k * hw)), padded(static_cast<size_t>(n * k * phw));
  std::vector<int32_t> labels(static_cast<size_t>(n * hw)), padded_labels(static_cast<size_t>(n * phw));
  for (float& v : logits) v = u(gen);
  for (int32_t& l : labels) l = static_cast<int32_t>(gen() % 3);
  for (int64_t p = 0; p < n * k; ++p) input::fit_plane(logits.data() + p * hw, padded.data() + p * phw, fit);
  for (int64_t s = 0; s < n; ++s) input::fit_labels(labels.data() + s * hw, padded_labels.data() + s * phw, fit);
  // The padding's logits: class 0 by far, whatever its neighbours' labels.
  for (int64_t s = 0; s < n; ++s)
    for (int64_t q = 0; q < phw; ++q)
      if (padded_labels[static_cast<size_t>(s * phw + q)] < 0)
        for (int64_t c = 0; c < k; ++c) padded[static_cast<size_t>((s * k + c) * phw + q)] = c == 0 ? 40.0f : -40.0f;
  CHECK(std::count(padded_labels.begin(), padded_labels.end(), -1) == n * (phw - hw));

  nn::Backend& be = test::test_backend();
  const auto stream = be.create_stream();
  const auto loss_of = [&](const std::vector<float>& x, const std::vector<int32_t>& l, int64_t pixels) {
    nn::Buffer dx = be.allocate(x.size()), grad = be.allocate(x.size()), loss = be.allocate(1), lab_owner;
    int32_t* dl = be.allocate_labels(l.size(), lab_owner);
    be.copy_from_host(*stream, dx.data(), x.data(), x.size());
    be.copy_labels_from_host(*stream, dl, l.data(), l.size());
    be.softmax_cross_entropy(*stream, nn::DType::f32, dx.data(), dl, nullptr, n, k, pixels, grad.data(), loss.data(),
                             nullptr);
    float out = 0;
    be.copy_to_host(*stream, &out, loss.data(), 1);
    be.synchronize(*stream);
    return out;
  };
  const float plain = loss_of(logits, labels, hw), with_padding = loss_of(padded, padded_labels, phw);
  // The same terms summed in the same order per sample, over more (skipped) pixels: equal up
  // to the float rounding of the sum's blocking, far below the padding's cost of ~40 a pixel.
  CHECK(with_padding == Approx(plain).epsilon(1e-5));

  // The confusion matrix of argmax predictions: padded pixels predicted class 0, never counted.
  const auto argmax = [&](const std::vector<float>& x, int64_t pixels) {
    std::vector<int32_t> pred(static_cast<size_t>(n * pixels));
    for (int64_t s = 0; s < n; ++s)
      for (int64_t q = 0; q < pixels; ++q) {
        int32_t best = 0;
        for (int32_t c = 1; c < k; ++c)
          if (x[static_cast<size_t>((s * k + c) * pixels + q)] > x[static_cast<size_t>((s * k + best) * pixels + q)]) best = c;
        pred[static_cast<size_t>(s * pixels + q)] = best;
      }
    return pred;
  };
  nn::ConfusionMatrix a(k), b(k);
  a.add(argmax(logits, hw), labels);
  b.add(argmax(padded, phw), padded_labels);
  CHECK(std::vector<int64_t>(a.counts().begin(), a.counts().end()) ==
        std::vector<int64_t>(b.counts().begin(), b.counts().end()));
  CHECK(b.total() == n * hw);
  CHECK(b.mean_iou() == a.mean_iou());
  CHECK(b.accuracy() == a.accuracy());
}

TEST_CASE("input_multiple: what each zoo model needs its sides to be multiples of", "[pad][models]") {
  nn::ModelSpec s;
  s.classes = 3;
  s.name = "unet";
  CHECK(nn::input_multiple(s) == 8);  // the default depth, 3
  s.depth = 4;
  CHECK(nn::input_multiple(s) == 16);
  CHECK(nn::input_multiple_text(s) == "unet of depth 4");
  s.depth = 2;
  CHECK(nn::input_multiple(s) == 4);
  s.depth = 0;
  s.name = "deeplabv3plus";
  CHECK(nn::input_multiple(s) == 8);
  s.name = "deeplabv3plus-resnet50";
  CHECK(nn::input_multiple(s) == 16);
  s.name = "lenet5";
  CHECK(nn::input_multiple(s) == 1);
  s.name = "resnet20";
  CHECK(nn::input_multiple(s) == 1);
  // The zoo's own check agrees: the multiple is taken, one row fewer is refused.
  for (const auto& [name, depth] : {std::pair{"unet", 2}, std::pair{"deeplabv3plus", 2}}) {
    nn::ModelSpec m;
    m.name = name, m.classes = 3, m.width = 4, m.depth = depth;
    const int64_t k = nn::input_multiple(m);
    INFO(name);
    CHECK_NOTHROW(nn::make_model(m, nn::Shape(1, 2, 3 * k, 2 * k)));
    CHECK_THROWS(nn::make_model(m, nn::Shape(1, 2, 3 * k - 1, 2 * k)));
  }
}

TEST_CASE("predict's grid rule: spacing from coordinates, or from the sizes as global grids", "[pad][predict]") {
  using eval::grid_spacing;
  const auto same = [](const eval::GridSpacing& file, const eval::GridSpacing& trained) {
    return eval::same_spacing(file, trained, data::PadMode::none, 16);
  };
  // 96 x 144 without coordinates: 1.875 x 2.5 degrees.
  const eval::GridSpacing trained = grid_spacing(96, 144, {}, {});
  CHECK(trained.dlat == Approx(1.875));
  CHECK(trained.dlon == Approx(2.5));
  CHECK_FALSE(trained.lat_from_coordinates);
  const eval::GridSpacing coords = grid_spacing(96, 144, steps(-89.0625, 1.875, 96), steps(0, 2.5, 144));
  CHECK(coords.lat_from_coordinates);
  CHECK(coords.dlat == Approx(1.875));
  CHECK(same(coords, trained));
  // Twice the pixels each way: not the same spacing.
  const eval::GridSpacing fine = grid_spacing(192, 288, {}, {});
  CHECK_FALSE(same(fine, trained));
  CHECK_THAT(eval::grid_text(fine), Catch::Contains("192 x 288 (rows x columns) at 0.9375 x 1.25 degrees"));
  // Both with coordinates: a region of the same spacing is the same, whatever its size;
  // 4% apart is the same spacing, 6% is not.
  const eval::GridSpacing trained_c = grid_spacing(96, 144, steps(-89.0625, 1.875, 96), steps(0, 2.5, 144));
  CHECK(same(grid_spacing(40, 30, steps(0, 1.875, 40), steps(100, 2.5, 30)), trained_c));
  CHECK(same(grid_spacing(96, 144, steps(0, 1.875 * 1.04, 96), steps(0, 2.5, 144)), trained_c));
  CHECK_FALSE(same(grid_spacing(96, 144, steps(0, 1.875, 96), steps(0, 2.5 * 1.06, 144)), trained_c));
  // Without coordinates in training, sizes within 5% are the same spacing, 6% not.
  CHECK(same(grid_spacing(100, 144, {}, {}), trained));
  CHECK_FALSE(same(grid_spacing(96, 153, {}, {}), trained));
  // Trained on 181 x 360 padded to 192 x 368 (no coordinates): any size that pads to the
  // recorded one is the training size, so the same files match whatever predict's data.pad.
  const eval::GridSpacing padded = grid_spacing(192, 368, {}, {});
  const eval::GridSpacing one_degree = grid_spacing(181, 360, steps(-90, 1, 181), steps(0, 1, 360));
  CHECK(eval::same_spacing(one_degree, padded, data::PadMode::pad, 16));
  CHECK_FALSE(eval::same_spacing(one_degree, padded, data::PadMode::none, 16));
  CHECK_FALSE(eval::same_spacing(grid_spacing(361, 720, {}, {}), padded, data::PadMode::pad, 16));
  // ... and cropped: 721 x 1440 cropped to 720 x 1440.
  const eval::GridSpacing era5 = grid_spacing(721, 1440, steps(-90, 0.25, 721), steps(0, 0.25, 1440));
  CHECK(eval::same_spacing(era5, grid_spacing(720, 1440, {}, {}), data::PadMode::crop, 16));
}

TEST_CASE("predict's statistics check warns about a channel 100 standard deviations off, naming it and the file",
          "[pad][predict]") {
  data::Normalization norm;
  norm.kind = "zscore";
  norm.mean = {101325.0f, 280.0f};
  norm.std = {1000.0f, 10.0f};
  // PSL in hPa (1013.25, as a file in the wrong units has it) and TS as trained; normalised.
  const int64_t hw = 4, samples = 3;
  std::vector<float> images(static_cast<size_t>(samples * 2 * hw));
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t p = 0; p < hw; ++p) {
      images[static_cast<size_t>((s * 2 + 0) * hw + p)] = (1013.25f + static_cast<float>(p) - 101325.0f) / 1000.0f;
      images[static_cast<size_t>((s * 2 + 1) * hw + p)] = (285.0f + static_cast<float>(p) - 280.0f) / 10.0f;
    }
  eval::ChannelSums sums;
  sums.add(images.data(), 1, 2, hw);
  sums.add(images.data() + 2 * hw, samples - 1, 2, hw);
  CHECK(sums.count == samples * hw);
  const auto w = eval::input_statistics_warnings(sums, norm, {"PSL", "TS"}, {"Pa", "K"}, "era5-2001.nc");
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Contains("era5-2001.nc") && Catch::Contains("PSL (channel 0)") &&
                       Catch::Contains("averages 1014.") && Catch::Contains("100.3 standard deviations below") &&
                       Catch::Contains("training mean 101325 Pa") && Catch::Contains("units"));
  // Without names, the channel's index; with normalisation "none", nothing to compare with.
  const auto unnamed = eval::input_statistics_warnings(sums, norm, {}, {}, "f.nc");
  REQUIRE(unnamed.size() == 1);
  CHECK_THAT(unnamed[0], Catch::Contains("channel 0 ") && Catch::Contains("f.nc"));
  CHECK(eval::input_statistics_warnings(sums, data::Normalization{}, {}, {}, "f.nc").empty());
  // A channel 5 standard deviations off is weather, not a unit: no warning.
  std::vector<float> warm(static_cast<size_t>(2 * hw), 5.0f);
  eval::ChannelSums ok;
  ok.add(warm.data(), 1, 2, hw);
  CHECK(eval::input_statistics_warnings(ok, norm, {"PSL", "TS"}, {}, "f.nc").empty());
}

TEST_CASE("netCDF masks mark pixels without a class missing: xarray reads them as NaN", "[pad][netcdf]") {
  if (test::run_command("/usr/bin/python3 -c 'import xarray, netCDF4, numpy'").exit_code != 0)
    SQUALL_SKIP("/usr/bin/python3 cannot import xarray and netCDF4 (install python3-xarray python3-netcdf4)");
  test::TempDir d("squall-mask-fill");
  // 1 time step of 4 x 6, the outer ring without a class (cropped away), classes inside.
  formats::MaskGrid grid;
  grid.lat = steps(-67.5, 45, 4);
  grid.lon = steps(0, 60, 6);
  grid.time = {0.0};
  std::vector<uint8_t> masks(24);
  std::vector<float> probs(3 * 24);
  int64_t missing = 0;
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 6; ++x) {
      const auto p = static_cast<size_t>(y * 6 + x);
      const bool ring = y == 0 || y == 3 || x == 0 || x == 5;
      masks[p] = ring ? formats::k_mask_fill : static_cast<uint8_t>((x + y) % 3);
      for (size_t c = 0; c < 3; ++c) probs[c * 24 + p] = ring ? std::numeric_limits<float>::quiet_NaN() : 1.0f / 3.0f;
      missing += ring;
    }
  const std::string path = d.file("masks.nc");
  formats::write_netcdf_masks(path, grid, masks, probs, {"background", "tropical cyclone", "atmospheric river"});
  const auto r = test::run_command(
      "/usr/bin/python3 -c 'import sys, xarray as xr; ds = xr.open_dataset(sys.argv[1]); m = ds.mask.values.ravel(); "
      "print(int(ds.mask.isnull().sum()), int(ds.probability.isnull().sum()), "
      "\",\".join(str(int(v)) for v in m if v == v))' " + path);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::string classes;
  for (size_t p = 0; p < masks.size(); ++p)
    if (masks[p] != formats::k_mask_fill) classes += (classes.empty() ? "" : ",") + std::to_string(masks[p]);
  CHECK(r.out == std::to_string(missing) + " " + std::to_string(3 * missing) + " " + classes + "\n");
  // Any other value that is not a class is still refused.
  masks[7] = 3;
  CHECK_THROWS_WITH(formats::write_netcdf_masks(d.file("bad.nc"), grid, masks, {}, {"a", "b", "c"}),
                    Catch::Contains("mask value 3") && Catch::Contains("not a class"));
}
