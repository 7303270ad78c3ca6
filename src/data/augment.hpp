#pragma once
// Augmentation of climate training samples that respects the sphere (docs/training.md,
// "Augmentation"): a random roll in longitude (the grid is periodic in x, so every shift is
// another valid field) and a random north-south flip, under which the meridional wind
// changes sign (a flipped field must still be a field a model could have produced). Each
// sample's draw depends only on (seed, rank, learner, step, position in the batch): runs are
// reproducible and a resumed run draws what the uninterrupted one drew. Off by default.
#include <cstdint>
#include <string>
#include <vector>

#include "src/data/data_source.hpp"

namespace squall::data {

struct SphereAugment {
  bool roll = false, flip = false;
  // The channels whose sign a flip changes (V850 and VBOT in DeepCAM's order), and for each
  // channel the normalisation (x_norm = (x - mean) / std): -x in raw units is -x_norm - 2 mean / std.
  std::vector<int64_t> meridional;
  std::vector<float> mean, std;
  bool any() const { return roll || flip; }
};

// The augmentation data.augment_roll / data.augment_flip ask for, for samples of `info`
// normalised by `norm`. Throws UsageError naming the key when the data is not climate fields
// in DeepCAM's channel order (per-pixel labels, 16 channels).
SphereAugment make_sphere_augment(bool roll, bool flip, const DatasetInfo& info, const Normalization& norm);

// Augments a batch in place: images [n, c, h, w] (normalised), labels [n, h, w].
void augment_batch(const SphereAugment& a, float* images, int32_t* labels, int64_t n, int64_t c, int64_t h, int64_t w,
                   uint64_t seed, int rank, int learner, int64_t step);

}  // namespace squall::data
