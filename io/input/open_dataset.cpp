#include <filesystem>

#include "io/formats/dataset.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/stats_file.hpp"
#include "src/core/error.hpp"
#include "io/input/open_dataset.hpp"

namespace squall::input {
namespace {

// A climate source normalised with its folder's own stats.h5: when the file names the channels
// it holds statistics of (`squall data stats` records them), they must be the channels read.
std::unique_ptr<data::DataSource> checked_against_stats(std::unique_ptr<data::DataSource> source,
                                                        const std::string& path, bool own_stats) {
  const data::Normalization& n = source->normalization();
  if (own_stats && n.kind != "none" && !n.source.empty())
    formats::check_stats_channels(n.source, source->info().channel_names, path);
  return source;
}

}  // namespace

std::unique_ptr<data::DataSource> open_dataset(const std::string& path, const std::string& split,
                                               const DatasetOptions& o) {
  const std::optional<data::Normalization>& fixed = o.fixed;
  if (path.empty()) throw Error("no dataset path given (data.train / data.test)");
  if (!std::filesystem::exists(path))
    throw Error("dataset '" + path + "' does not exist" +
                (path == k_debian_fashion_mnist_dir ? " (install Debian's dataset-fashion-mnist package)" : ""));
  const formats::DatasetFormat format = formats::detect_format(path);
  if (format == formats::DatasetFormat::idx) {
    auto source = formats::open_idx(path, split);
    // IDX pixels are always standardised with the fixed Fashion-MNIST constants.
    if (fixed && !fixed->same_as(source->normalization()))
      throw Error("dataset '" + path + "' (Fashion-MNIST IDX) is normalised with fixed constants, not with the given " +
                  fixed->kind + " statistics (" + fixed->source + ")");
    return source;
  }
  formats::OpenOptions options;
  options.normalize = o.normalize;
  options.normalization = o.normalization;
  options.cache_bytes = o.cache_mb * (int64_t{1} << 20);
  options.fixed = fixed;
  if (format == formats::DatasetFormat::shards) return formats::open_shards(path, split, options);
  const bool own_stats = o.normalize && !fixed;
  if (format == formats::DatasetFormat::deepcam)
    return checked_against_stats(formats::open_deepcam(path, options), path, own_stats);
  if (format == formats::DatasetFormat::netcdf) {
    // A test set given the training set's statistics is read in the units they describe.
    formats::NetcdfOptions netcdf = formats::netcdf_options(o.netcdf_channels, o.netcdf_variables, o.netcdf_labels);
    if (fixed && !fixed->units.empty() && netcdf.units.empty()) netcdf.units = fixed->units;
    auto source = formats::open_netcdf(path, options, netcdf);
    // Training and evaluation need a label per pixel; new output without them is for predict.
    if (!source->has_labels())
      throw Error(path + " holds netCDF files without the labels variable '" + o.netcdf_labels +
                  "' (data.netcdf_labels): training and evaluation need labelled samples (`squall data label` "
                  "computes them; `squall predict` takes unlabelled files)");
    return checked_against_stats(std::move(source), path, own_stats);
  }
  throw Error("dataset '" + path + "' holds no Fashion-MNIST IDX files, no squall shards (" + split +
              "-NNNNN-of-MMMMM.h5), no DeepCAM files (data-*.h5) and no netCDF files (*.nc); see docs/formats.md "
              "and docs/data.md");
}

}  // namespace squall::input
