#pragma once
// DataSource: where samples come from. Implemented by the IDX reader (Debian's
// Fashion-MNIST files, io/formats/idx_source.cpp) and by the HDF5 shard and DeepCAM readers
// in io/. Indices are global sample numbers in [0, size()); the sampler decides which a rank
// reads. read() and read_window() are called from loader threads: implementations must be
// thread-safe.
// The interface sits below both io/ and src/train (which opens datasets through io/), so
// that neither includes the other's headers the wrong way round.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/core/error.hpp"
#include "src/nn/tensor.hpp"

namespace squall::data {

// What a source does to the raw values of each sample: normalised = (raw * input_scale -
// mean[c]) / std[c] per channel c. kind "zscore": mean and std are the channel means and
// standard deviations; "minmax": mean holds the minima and std the spans (max - min); "none":
// no normalisation (empty vectors, input_scale 1). Training reads these from the training set
// and hands them to the test set (docs/training.md, "Normalisation").
struct Normalization {
  std::string kind = "none";
  std::vector<float> mean, std;
  float input_scale = 1.0f;
  std::string source;  // where the statistics came from: "stats.h5 of <folder>", "<shard> attributes"
  // The units of the values the statistics describe, per channel, when the source converts
  // units (netCDF): a test set normalised with a training set's statistics is read in these.
  std::vector<std::string> units;
  // The same transform (the source is only a description).
  bool same_as(const Normalization& o) const {
    return kind == o.kind && mean == o.mean && std == o.std && input_scale == o.input_scale;
  }
};

// A rectangle of a sample's grid (a rank's tile under parallel.spatial): rows [row0, row0 + rows),
// columns [col0, col0 + cols), in the sample's coordinates as read() returns it.
struct Window {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  bool operator==(const Window&) const = default;
};

// "rows [8, 16) x columns [0, 30)"
std::string window_text(const Window& w);

struct DatasetInfo {
  nn::Shape sample;                      // one sample, batch dimension 1: [1, c, h, w]
  int64_t classes = 0;
  std::vector<std::string> class_names;
  bool per_pixel_labels = false;         // segmentation: labels [h, w] per sample
  // What each input channel is, when the source knows (climate fields): its name ("TMQ",
  // "u@850") and the units its values are in as read (UDUNITS-2 text, "Pa"; "" unknown).
  // Empty when the source does not name its channels (images).
  std::vector<std::string> channel_names, channel_units;
  // The grid every sample lies on, rows and columns as read (latitude south to north,
  // longitude as stored), in degrees; empty when the source has no coordinates.
  std::vector<double> lat, lon;
  std::string description;               // "Fashion-MNIST train (IDX, 60000 samples)"
};

// A sample that cannot be used (NaN or infinite values, a wrong shape, a label out of range,
// an unreadable chunk). The message names the file, the dataset and the sample index; the
// loader skips and counts such samples when data.skip_bad_samples is set, and fails
// otherwise. Other errors (a missing file, a broken layout) are plain squall::Error.
class BadSample : public Error {
 public:
  BadSample(const std::string& what, std::string file, int64_t index)
      : Error(what), m_file(std::move(file)), m_index(index) {}
  const std::string& file() const { return m_file; }
  int64_t index() const { return m_index; }

 private:
  std::string m_file;
  int64_t m_index;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual const DatasetInfo& info() const = 0;
  virtual int64_t size() const = 0;
  // The normalisation read() applies (the default: none).
  virtual const Normalization& normalization() const {
    static const Normalization none;
    return none;
  }
  // Normalised float images [indices.size(), c, h, w] and int32 labels ([n] or [n, h, w]).
  // Throws BadSample naming the file and index for a bad sample, squall::Error otherwise.
  virtual void read(std::span<const int64_t> indices, float* images, int32_t* labels) const = 0;

  // The window `w` of each sample: images [indices.size(), c, w.rows, w.cols] (normalised as read()),
  // labels [indices.size(), w.rows, w.cols] for per-pixel labels, [indices.size()] otherwise. The window
  // must lie inside the sample (throws squall::Error naming the window and the sample's size otherwise).
  // The default reads whole samples and crops them; sources whose files allow it read only the window.
  // `labels` may be null where read() allows it (DeepCAM's reader): the labels are then not read.
  virtual void read_window(std::span<const int64_t> indices, const Window& w, float* images, int32_t* labels) const;

  // The files behind the samples, in index order: samples [offsets[i], offsets[i+1]) live in
  // files[i]; offsets has files().size() + 1 entries, the last being size(). Node-local
  // sampling and staging use them. A source held in memory is one "file".
  virtual std::vector<std::string> files() const { return {info().description}; }
  virtual std::vector<int64_t> file_offsets() const { return {0, size()}; }
};

// Throws squall::Error, naming `source`'s description, the window and the sample's grid, unless `w`
// is a non-empty rectangle inside `source`'s samples.
void check_window(const DataSource& source, const Window& w);

// The window `w` of one sample: `planes` planes of `h` x `w_full` values from `in` to `out`
// ([planes, w.rows, w.cols]). T: float for images, int32_t for per-pixel labels.
template <typename T>
void crop_planes(const T* in, T* out, int64_t planes, int64_t h, int64_t w_full, const Window& w) {
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < w.rows; ++y) {
      const T* row = in + (p * h + w.row0 + y) * w_full + w.col0;
      T* dst = out + (p * w.rows + y) * w.cols;
      for (int64_t x = 0; x < w.cols; ++x) dst[x] = row[x];
    }
}

}  // namespace squall::data
