// The parts of DataSource that every source shares: the window check and the default window
// read (whole samples, cropped), for sources whose files give no cheaper way.
#include "src/data/data_source.hpp"

#include <vector>

namespace squall::data {

std::string window_text(const Window& w) {
  return "rows [" + std::to_string(w.row0) + ", " + std::to_string(w.row0 + w.rows) + ") x columns [" +
         std::to_string(w.col0) + ", " + std::to_string(w.col0 + w.cols) + ")";
}

void check_window(const DataSource& source, const Window& w) {
  const DatasetInfo& info = source.info();
  const int64_t h = info.sample.h(), width = info.sample.w();
  const bool inside = w.rows > 0 && w.cols > 0 && w.row0 >= 0 && w.col0 >= 0 && w.row0 <= h - w.rows &&
                      w.col0 <= width - w.cols;
  if (!inside)
    throw Error(info.description + ": the window " + window_text(w) + (w.rows > 0 && w.cols > 0 ? "" : " is empty or") +
                " does not lie inside its samples of " + std::to_string(h) + " x " + std::to_string(width) +
                " (rows x columns)");
}

void DataSource::read_window(std::span<const int64_t> indices, const Window& w, float* images, int32_t* labels) const {
  check_window(*this, w);
  const DatasetInfo& i = info();
  const int64_t c = i.sample.c(), h = i.sample.h(), width = i.sample.w();
  const auto n = static_cast<int64_t>(indices.size());
  if (n == 0) return;
  // Whole samples, then their window: correct for any source, and no cheaper than read().
  std::vector<float> whole(static_cast<size_t>(n * c * h * width));
  std::vector<int32_t> whole_labels;
  int32_t* read_labels = labels;
  if (labels != nullptr && i.per_pixel_labels) {
    whole_labels.resize(static_cast<size_t>(n * h * width));
    read_labels = whole_labels.data();
  }
  read(indices, whole.data(), read_labels);  // class labels, one per sample, land in place
  crop_planes(whole.data(), images, n * c, h, width, w);
  if (labels != nullptr && i.per_pixel_labels) crop_planes(whole_labels.data(), labels, n, h, width, w);
}

}  // namespace squall::data
