#pragma once
// Opening datasets stored in HDF5: squall's native shards and DeepCAM's files as they are.
// These, and the Fashion-MNIST IDX reader, are the DataSource implementations of io/
// (input::open_dataset picks among them).
// Header free of HDF5: src/ includes it.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/core/enum_table.hpp"
#include "src/data/data_source.hpp"
#include "src/data/normalization_kind.hpp"

namespace squall::formats {

// What a dataset path holds (detect_format), with the names `squall data inspect` prints:
// Fashion-MNIST's IDX files, squall's shards, DeepCAM's files, netCDF files (a *.nc file or a
// folder of them; io/formats/netcdf_file.hpp), none of them (""), or, in inspect's report of
// several paths, more than one of them ("mixed"; detect_format never answers it).
enum class DatasetFormat { none, idx, shards, deepcam, netcdf, mixed };
inline constexpr auto k_dataset_formats = enum_table<DatasetFormat>({{"", DatasetFormat::none},
                                                                     {"idx", DatasetFormat::idx},
                                                                     {"shards", DatasetFormat::shards},
                                                                     {"deepcam", DatasetFormat::deepcam},
                                                                     {"netcdf", DatasetFormat::netcdf},
                                                                     {"mixed", DatasetFormat::mixed}});

struct OpenOptions {
  bool normalize = true;
  data::NormalizationKind normalization = data::NormalizationKind::zscore;  // mean/std, or min/max (DeepCAM's)
  // Shards whose samples and labels together fit in this many bytes are read into memory
  // once, when opened, and served from there (no HDF5 call per sample); 0: always stream.
  int64_t cache_bytes = int64_t{1} << 30;
  // DeepCAM files without /climate/labels_0 are read with every label -1 (no class), for
  // `squall predict` on new simulation output; otherwise such a file is an error.
  bool labels_optional = false;
  // When set (and normalize is true), these statistics are applied instead of the folder's
  // own (stats.h5, shard attributes): the training set's, given to the test set. Its kind
  // replaces `normalization`; a channel count that differs from the data's is an error.
  std::optional<data::Normalization> fixed = std::nullopt;
};

// What `path` holds, from file names only (nothing is opened); DatasetFormat::none when none of them.
DatasetFormat detect_format(const std::string& path);

// Fashion-MNIST from a folder of (optionally gzipped) IDX files, as Debian's
// dataset-fashion-mnist installs them (io/formats/idx_source.cpp). split: "train" or "test". Pixels are
// scaled to [0,1] and standardised with the training set's mean 0.2860 and std 0.3530. A
// missing folder or file is an error that names it and says which package provides it.
std::unique_ptr<data::DataSource> open_idx(const std::string& dir, const std::string& split);

// Native shards: every `<split>-NNNNN-of-MMMMM.h5` in `dir` (docs/formats.md), in name order.
std::unique_ptr<data::DataSource> open_shards(const std::string& dir, const std::string& split,
                                               const OpenOptions& options);

// DeepCAM: every `data-*.h5` in `dir` (one sample each, /climate/data [H,W,C] float32 and
// /climate/labels_0 [H,W]); statistics from `dir/stats.h5` (or `dir/../stats.h5`).
std::unique_ptr<data::DataSource> open_deepcam(const std::string& dir, const OpenOptions& options);

// The same readers over an explicit list of files (inspection, staging, tests). An empty
// stats_path is allowed only with options.normalize == false.
// The DeepCAM reader's read() takes a null `labels`: the labels are then not read at all (what
// `squall predict` wants of a labelled file).
std::unique_ptr<data::DataSource> open_shard_files(const std::vector<std::string>& files, const OpenOptions& options);
std::unique_ptr<data::DataSource> open_deepcam_files(const std::vector<std::string>& files,
                                                      const std::string& stats_path, const OpenOptions& options);
// One DeepCAM file (normalised with options.fixed, or not at all), and its grid: /climate/lat
// and /climate/lon (empty when absent; what mask.hpp's read_deepcam_grid reads), from the one
// opening of the file that the reader keeps.
std::unique_ptr<data::DataSource> open_deepcam_file_and_grid(const std::string& file, const OpenOptions& options,
                                                              std::vector<double>& lat, std::vector<double>& lon);

// DeepCAM's stats.h5: /climate/{count,mean,sqmean,minval,maxval}, std = sqrt(sqmean - mean^2),
// formed in double whatever the file stores (`squall data stats` writes it: stats_file.hpp).
struct ChannelStats {
  std::vector<float> mean, std, min, max;
};
ChannelStats read_deepcam_stats(const std::string& stats_path);

// The per-channel normalisation of climate fields (DeepCAM and netCDF readers): options.fixed
// when given (checked against `channels`), else `stats_path` read as options.normalization
// says. Throws squall::Error naming `files` (the readers' files) or `folder`, or the stats
// file, when there is none (naming `squall data stats` and data.normalize = false), the
// channels differ, or a channel has no spread.
data::Normalization channel_normalization(const OpenOptions& options, const std::string& stats_path, int64_t channels,
                                          const std::string& files, const std::string& folder);
// dir/stats.h5, else dir/../stats.h5, else "".
std::string find_deepcam_stats(const std::string& dir);
// Every data-*.h5 in dir, sorted by name.
std::vector<std::string> list_deepcam_files(const std::string& dir);

}  // namespace squall::formats
