#pragma once
// DataSource: where samples come from. Implemented by the IDX reader (Debian's
// Fashion-MNIST files, src/train/idx_source.cpp) and, later, by the HDF5 shard loader in
// io/. Indices are global sample numbers in [0, size()); the sampler decides which a rank
// reads. read() is called from loader threads: implementations must be thread-safe.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/core/error.hpp"
#include "src/nn/tensor.hpp"

namespace squall::train {

struct DatasetInfo {
  nn::Shape sample;                      // one sample, batch dimension 1: [1, c, h, w]
  int64_t classes = 0;
  std::vector<std::string> class_names;
  bool per_pixel_labels = false;         // segmentation: labels [h, w] per sample
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
  // Normalised float images [indices.size(), c, h, w] and int32 labels ([n] or [n, h, w]).
  // Throws BadSample naming the file and index for a bad sample, squall::Error otherwise.
  virtual void read(std::span<const int64_t> indices, float* images, int32_t* labels) const = 0;

  // The files behind the samples, in index order: samples [offsets[i], offsets[i+1]) live in
  // files[i]; offsets has files().size() + 1 entries, the last being size(). Node-local
  // sampling and staging use them. A source held in memory is one "file".
  virtual std::vector<std::string> files() const { return {info().description}; }
  virtual std::vector<int64_t> file_offsets() const { return {0, size()}; }
};

// Fashion-MNIST from a folder of (optionally gzipped) IDX files, as Debian's
// dataset-fashion-mnist installs them. split: "train" or "test". Pixels are scaled to [0,1]
// and standardised with the training set's mean 0.2860 and std 0.3530. A missing folder or
// file is an error that names it and says which package provides it.
std::unique_ptr<DataSource> open_idx(const std::string& dir, const std::string& split);

// Any dataset squall reads, by what the folder holds: Fashion-MNIST IDX files, native
// shards (`split` picks train-* or test-*), or DeepCAM files. Errors name the path.
// cache_mb: shards smaller than this are held in memory (io::OpenOptions::cache_bytes).
std::unique_ptr<DataSource> open_dataset(const std::string& path, const std::string& split, bool normalize,
                                         const std::string& normalization, int64_t cache_mb = 1024);

inline constexpr const char* k_debian_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

}  // namespace squall::train
