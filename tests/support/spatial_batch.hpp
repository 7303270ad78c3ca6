#pragma once
// What the tests of split samples share (tests/unit/test_spatial.cpp, tests/mpi/test_spatial_mpi.cpp):
// a batch of whole samples with per-pixel labels, its tiles, and the climate U-Net they train.
#include <cstdint>
#include <random>
#include <vector>

#include "src/nn/graph.hpp"
#include "src/nn/spatial.hpp"

namespace squall::testing {

// A batch of whole samples: images [n, c, h, w] and labels [n, h, w] (none: empty).
struct Batch {
  int64_t n = 0, c = 0, h = 0, w = 0;
  std::vector<float> images;
  std::vector<int32_t> labels;
};

// Normal values, and bands of classes with some pixels ignored (-1).
inline Batch random_batch(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed) {
  Batch b{n, c, h, w, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(-1, static_cast<int32_t>(classes) - 1);
  b.images.resize(static_cast<size_t>(n * c * h * w));
  for (auto& v : b.images) v = normal(rng);
  b.labels.resize(static_cast<size_t>(n * h * w));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        int32_t l = static_cast<int32_t>(((y / 7) + (x / 11) + i) % classes);
        if (label(rng) < 0 && (x + y) % 13 == 0) l = -1;
        b.labels[static_cast<size_t>((i * h + y) * w + x)] = l;
      }
  return b;
}

// The tile rows x cols of every sample of b (and of its labels, when it has them).
inline Batch crop(const Batch& b, nn::Span rows, nn::Span cols) {
  Batch t{b.n, b.c, rows.size(), cols.size(), {}, {}};
  for (int64_t i = 0; i < b.n; ++i) {
    for (int64_t ch = 0; ch < b.c; ++ch)
      for (int64_t y = rows.begin; y < rows.end; ++y)
        for (int64_t x = cols.begin; x < cols.end; ++x)
          t.images.push_back(b.images[static_cast<size_t>(((i * b.c + ch) * b.h + y) * b.w + x)]);
    if (b.labels.empty()) continue;
    for (int64_t y = rows.begin; y < rows.end; ++y)
      for (int64_t x = cols.begin; x < cols.end; ++x)
        t.labels.push_back(b.labels[static_cast<size_t>((i * b.h + y) * b.w + x)]);
  }
  return t;
}

// configs/climate-tiny.toml's U-Net.
inline nn::ModelSpec climate_unet() {
  nn::ModelSpec spec;
  spec.name = "unet";
  spec.classes = 3;
  spec.width = 16;
  spec.depth = 4;
  return spec;
}

// The loss's class weights in these tests (configs/climate-tiny.toml's, rounded).
inline const std::vector<float> k_class_weights{1.0f, 2.2f, 1.5f};

}  // namespace squall::testing
