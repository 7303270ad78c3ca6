#pragma once
// Opening the datasets squall trains on, whichever reader of io/ a folder needs (Debian's
// Fashion-MNIST IDX files, shards, DeepCAM and netCDF files). The DataSource interface itself
// is src/data/data_source.hpp.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/data/data_source.hpp"
#include "src/data/normalization_kind.hpp"

namespace squall::input {

// How a dataset is opened: the config's data.* keys (config::dataset_options fills it).
struct DatasetOptions {
  bool normalize = true;        // standardise the inputs (data.normalize)
  data::NormalizationKind normalization = data::NormalizationKind::zscore;  // data.normalization
  // Shards smaller than this are held in memory (formats::OpenOptions::cache_bytes); 0: always
  // stream (data.cache_mb).
  int64_t cache_mb = 1024;
  // When set (and normalize is), the statistics to normalise with instead of the folder's
  // own: the training set's, for a test set (docs/training.md, "Normalisation").
  std::optional<data::Normalization> fixed;
  // data.netcdf_variables, data.netcdf_labels and data.channels (formats::netcdf_options),
  // used for netCDF input only.
  std::string netcdf_variables;
  std::string netcdf_labels = "labels";
  std::vector<std::string> netcdf_channels;
};

// Any dataset squall reads, by what the folder holds: Fashion-MNIST IDX files, native
// shards (`split` picks train-* or test-*), DeepCAM files or netCDF files, opened as `options`
// say. Errors name the path. A DeepCAM or netCDF folder normalised with its own stats.h5 is
// refused when the file names other channels than the data's (formats::check_stats_channels).
std::unique_ptr<data::DataSource> open_dataset(const std::string& path, const std::string& split,
                                               const DatasetOptions& options = {});

inline constexpr const char* k_debian_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

}  // namespace squall::input
