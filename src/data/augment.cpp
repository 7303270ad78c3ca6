// Climate augmentation on the sphere (augment.hpp).
#include "src/data/augment.hpp"
#include "src/core/numeric.hpp"

#include <algorithm>
#include <vector>

#include "src/core/error.hpp"
#include "src/data/climate_channels.hpp"

namespace squall::data {
namespace {

// The meridional winds, whose sign a flip across the equator changes.
const std::vector<int64_t> k_meridional = {k_v850, k_vbot};

}  // namespace

SphereAugment make_sphere_augment(bool roll, bool flip, const DatasetInfo& info, const Normalization& norm) {
  SphereAugment a;
  a.roll = roll;
  a.flip = flip;
  if (!a.any()) return a;
  const std::string key = roll ? "data.augment_roll" : "data.augment_flip";
  if (!info.per_pixel_labels)
    throw UsageError(key + ": augmentation on the sphere is for climate fields with a label per pixel; " +
                     info.description + " has a label per sample");
  if (flip && info.sample.c() != k_climate_channels)
    throw UsageError("data.augment_flip: needs DeepCAM's 16 channels (V850 and VBOT change sign); " + info.description +
                     " has " + std::to_string(info.sample.c()));
  a.meridional = flip ? k_meridional : std::vector<int64_t>{};
  const auto c = static_cast<size_t>(info.sample.c());
  a.mean.assign(c, 0.0f);
  a.std.assign(c, 1.0f);
  if (norm.kind != "none" && norm.mean.size() == c && norm.std.size() == c) {
    a.mean = norm.mean;
    a.std = norm.std;
  }
  return a;
}

void augment_batch(const SphereAugment& a, float* images, int32_t* labels, int64_t n, int64_t c, int64_t h, int64_t w,
                   uint64_t seed, int rank, int learner, int64_t step) {
  if (!a.any()) return;
  std::vector<float> row(static_cast<size_t>(w));
  std::vector<int32_t> label_row(static_cast<size_t>(w));
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t r = splitmix64(splitmix64(splitmix64(splitmix64(seed ^ 0x5a5a17ull) ^ static_cast<uint64_t>(rank)) ^
                               (static_cast<uint64_t>(learner) << 32 | static_cast<uint64_t>(k))) ^
                           static_cast<uint64_t>(step));
    const int64_t shift = a.roll ? static_cast<int64_t>(r % static_cast<uint64_t>(w)) : 0;
    const bool flip = a.flip && ((r >> 40) & 1u) != 0;
    float* image = images + k * c * h * w;
    int32_t* label = labels + k * h * w;
    // A plane [h, w]: rolled by `shift` columns (x -> x + shift, periodic), rows reversed on a flip.
    auto move_plane = [&](auto* plane, auto& buffer) {
      if (shift != 0)
        for (int64_t y = 0; y < h; ++y) {
          auto* line = plane + y * w;
          for (int64_t x = 0; x < w; ++x) buffer[static_cast<size_t>((x + shift) % w)] = line[x];
          std::copy(buffer.begin(), buffer.end(), line);
        }
      if (flip)
        for (int64_t y = 0; y < h / 2; ++y) std::swap_ranges(plane + y * w, plane + (y + 1) * w, plane + (h - 1 - y) * w);
    };
    for (int64_t ch = 0; ch < c; ++ch) move_plane(image + ch * h * w, row);
    move_plane(label, label_row);
    if (!flip) continue;
    for (int64_t ch : a.meridional) {  // v -> -v in raw units, written in the normalised ones
      const float offset = -2.0f * a.mean[static_cast<size_t>(ch)] / a.std[static_cast<size_t>(ch)];
      float* plane = image + ch * h * w;
      for (int64_t p = 0; p < h * w; ++p) plane[p] = -plane[p] + offset;
    }
  }
}

}  // namespace squall::data
