#pragma once
// The picture training writes at each evaluation of a segmentation model
// (predictions/epoch-N.png in the run directory, docs/training.md): for a few held-out
// samples, side by side, the first input channel (TMQ for climate fields), the label mask
// and the predicted mask.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/pictures/png.hpp"
#include "src/nn/tensor.hpp"

namespace squall::pictures {

// One held-out sample: an h x w plane of the first input channel, its labels and the
// model's predictions (class per pixel; a label < 0 is ignored).
struct PredictionSample {
  std::vector<float> channel;
  std::vector<int32_t> label, pred;
};

// One strip per sample, three panels each, k_gap white pixels between panels and strips.
// The grid's last row is drawn at the top: north up for CAM5's ascending latitude
// (docs/formats.md, "Grid"). The channel is grey, scaled to the sample's own range; in the
// masks class 0 is that grey dimmed, class 1 red, class 2 blue, further classes other
// colours, ignored pixels black.
inline constexpr int64_t k_gap = 4;
RgbImage prediction_picture(const std::vector<PredictionSample>& samples, int64_t h, int64_t w);

// Writes <run_dir>/predictions/epoch-N.png (a later evaluation in the same epoch replaces it)
// for samples of `sample`'s shape. A picture must not end a training run: returns why it could
// not be written ("" when it was), for a warning.
std::string write_prediction_picture(const std::filesystem::path& run_dir, int64_t epoch,
                                     const std::vector<PredictionSample>& samples, const nn::Shape& sample);

// The colour of class c in the masks.
void class_colour(int32_t c, uint8_t rgb[3]);

// The file name of `squall predict --png`'s picture of time step t (from 0) of an input of
// `times` steps whose mask file is named after `stem`: "<stem>-mask.png" for a file of one
// step (a DeepCAM sample), else "<stem>-mask-<t>.png" with t in as many digits as the last
// step needs, at least 4 ("cam5-h3-mask-0007.png"), so that the names sort in time order.
std::string mask_picture_name(const std::string& stem, int64_t t, int64_t times);

}  // namespace squall::pictures
