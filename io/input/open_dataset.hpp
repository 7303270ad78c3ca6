#pragma once
// Opening the datasets squall trains on, whichever reader of io/ a folder needs (Debian's
// Fashion-MNIST IDX files, shards, DeepCAM and netCDF files). The DataSource interface itself
// is src/data/data_source.hpp.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/data/data_source.hpp"
#include "src/data/normalization_kind.hpp"

namespace squall::input {

// Any dataset squall reads, by what the folder holds: Fashion-MNIST IDX files, native
// shards (`split` picks train-* or test-*), DeepCAM files or netCDF files. Errors name the path.
// cache_mb: shards smaller than this are held in memory (formats::OpenOptions::cache_bytes).
// fixed: when given (and normalize is set), the statistics to normalise with instead of the
// folder's own: the training set's, for a test set (docs/training.md, "Normalisation").
// A DeepCAM or netCDF folder normalised with its own stats.h5 is refused when the file names
// other channels than the data's (formats::check_stats_channels).
// netcdf_variables / netcdf_labels / netcdf_channels: data.netcdf_variables, data.netcdf_labels
// and data.channels (formats::netcdf_options), used for netCDF input only.
std::unique_ptr<data::DataSource> open_dataset(const std::string& path, const std::string& split, bool normalize,
                                         data::NormalizationKind normalization, int64_t cache_mb = 1024,
                                         const data::Normalization* fixed = nullptr,
                                         const std::string& netcdf_variables = "",
                                         const std::string& netcdf_labels = "labels",
                                         const std::vector<std::string>& netcdf_channels = {});

inline constexpr const char* k_debian_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

}  // namespace squall::input
