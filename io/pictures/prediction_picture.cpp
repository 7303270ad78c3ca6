#include "io/pictures/prediction_picture.hpp"

#include <algorithm>
#include <cmath>

#include "src/core/error.hpp"

namespace squall::pictures {

void class_colour(int32_t c, uint8_t rgb[3]) {
  static const uint8_t colours[][3] = {{0, 0, 0},     {230, 50, 40},  {40, 120, 240}, {240, 200, 40},
                                       {60, 200, 90}, {200, 80, 220}, {60, 210, 210}};
  const auto& p = colours[c < 1 ? 0 : 1 + (c - 1) % 6];
  std::copy(p, p + 3, rgb);
}

std::string mask_picture_name(const std::string& stem, int64_t t, int64_t times) {
  if (times <= 1) return stem + "-mask.png";
  const std::string last = std::to_string(times - 1);
  std::string index = std::to_string(t);
  const size_t digits = std::max<size_t>(4, last.size());
  if (index.size() < digits) index.insert(0, digits - index.size(), '0');
  return stem + "-mask-" + index + ".png";
}

RgbImage prediction_picture(const std::vector<PredictionSample>& samples, int64_t h, int64_t w) {
  if (samples.empty() || h < 1 || w < 1) throw Error("prediction picture: no samples");
  const auto plane = static_cast<size_t>(h * w);
  for (const auto& s : samples)
    if (s.channel.size() != plane || s.label.size() != plane || s.pred.size() != plane)
      throw Error("prediction picture: a sample is not " + std::to_string(h) + "x" + std::to_string(w));
  const auto n = static_cast<int64_t>(samples.size());
  RgbImage img(3 * w + 2 * k_gap, n * h + (n - 1) * k_gap, 255);
  for (int64_t k = 0; k < n; ++k) {
    const PredictionSample& s = samples[static_cast<size_t>(k)];
    const auto [lo, hi] = std::minmax_element(s.channel.begin(), s.channel.end());
    const float range = *hi > *lo ? *hi - *lo : 1.0f;
    const int64_t top = k * (h + k_gap);
    for (int64_t y = 0; y < h; ++y) {
      const int64_t row = h - 1 - y;  // the grid's last row at the top
      for (int64_t x = 0; x < w; ++x) {
        const auto i = static_cast<size_t>(row * w + x);
        const float v = std::isfinite(s.channel[i]) ? (s.channel[i] - *lo) / range : 0.0f;
        const auto grey = static_cast<uint8_t>(std::clamp(v, 0.0f, 1.0f) * 255.0f + 0.5f);
        img.set(x, top + y, grey, grey, grey);
        for (int panel = 1; panel <= 2; ++panel) {
          const int32_t c = panel == 1 ? s.label[i] : s.pred[i];
          uint8_t rgb[3];
          class_colour(c, rgb);
          if (c == 0) rgb[0] = rgb[1] = rgb[2] = static_cast<uint8_t>(grey / 2);
          img.set(panel * (w + k_gap) + x, top + y, rgb[0], rgb[1], rgb[2]);
        }
      }
    }
  }
  return img;
}

std::string write_prediction_picture(const std::filesystem::path& run_dir, int64_t epoch,
                                     const std::vector<PredictionSample>& samples, const nn::Shape& sample) {
  try {
    const std::filesystem::path dir = run_dir / "predictions";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    write_png((dir / ("epoch-" + std::to_string(epoch) + ".png")).string(),
                  prediction_picture(samples, sample.h(), sample.w()));
    return "";
  } catch (const Error& e) {
    return std::string("cannot write the predictions picture: ") + e.what();
  }
}

}  // namespace squall::pictures
