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

#include "src/nn/tensor.hpp"

namespace squall::train {

struct DatasetInfo {
  nn::Shape sample;                      // one sample, batch dimension 1: [1, c, h, w]
  int64_t classes = 0;
  std::vector<std::string> class_names;
  bool per_pixel_labels = false;         // segmentation: labels [h, w] per sample
  std::string description;               // "Fashion-MNIST train (IDX, 60000 samples)"
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual const DatasetInfo& info() const = 0;
  virtual int64_t size() const = 0;
  // Normalised float images [indices.size(), c, h, w] and int32 labels ([n] or [n, h, w]).
  // Throws squall::Error naming the file and index on bad data.
  virtual void read(std::span<const int64_t> indices, float* images, int32_t* labels) const = 0;
};

// Fashion-MNIST from a folder of (optionally gzipped) IDX files, as Debian's
// dataset-fashion-mnist installs them. split: "train" or "test". Pixels are scaled to [0,1]
// and standardised with the training set's mean 0.2860 and std 0.3530. A missing folder or
// file is an error that names it and says which package provides it.
std::unique_ptr<DataSource> open_idx(const std::string& dir, const std::string& split);

inline constexpr const char* k_debian_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

}  // namespace squall::train
