#pragma once
// The statistics file of climate data (`squall data stats`, docs/data.md, "Statistics"):
// per-channel moments accumulated one sample at a time, merged across ranks, and written as
// DeepCAM's stats.h5 (/climate/{count,mean,sqmean,minval,maxval}, float64 [c], what
// read_deepcam_stats reads) with attributes that say what the numbers are of: the channel
// names and units, the sample count, the squall version and the source folder. DeepCAM's own
// stats.h5 files have none of the attributes and read as before.
// Header free of HDF5: src/ includes it.
#include <cstdint>
#include <string>
#include <vector>

namespace squall::formats {

// Count, mean, M2 (the sum of squared deviations from the mean), min and max of each channel,
// in double. A sample's contribution is computed in two passes over its plane (its mean, then
// the squared deviations from it) and merged with Chan, Golub and LeVeque's update, so that a
// dataset of thousands of 721 x 1440 fields keeps its variance to about 1e-12 relative, where
// DeepCAM's sum of squares minus the squared mean loses it for fields whose spread is small
// beside their mean (surface pressure: 1e5 Pa, spread 1e3 Pa).
class ChannelMoments {
 public:
  struct Channel {
    int64_t count = 0;
    double mean = 0, m2 = 0;
    double min = 0, max = 0;  // meaningful when count > 0
  };

  explicit ChannelMoments(int64_t channels = 0) : m_channels(static_cast<size_t>(channels)) {}

  // One sample, channels first: chw[c * plane + p]. The values must be finite (the readers
  // refuse a sample that is not: data::BadSample).
  void add_sample(const float* chw, int64_t plane);
  // Folds in `other`'s values as if they had been added after this one's (Chan et al.). The
  // result depends on the order of merges only in the last bits: merge in a fixed order (rank
  // order) for a file that is the same whatever the timing.
  void merge(const ChannelMoments& other);

  int64_t channels() const { return static_cast<int64_t>(m_channels.size()); }
  int64_t samples() const { return m_samples; }
  const Channel& channel(int64_t c) const { return m_channels[static_cast<size_t>(c)]; }
  // Population variance (M2 / count), as DeepCAM's sqmean - mean^2 is; 0 when empty.
  double variance(int64_t c) const;

  // Every field as bytes, exactly (for sending to rank 0), and back; decode throws
  // squall::Error on bytes that are not an encoding.
  std::string encode() const;
  static ChannelMoments decode(const std::string& bytes);

 private:
  std::vector<Channel> m_channels;
  int64_t m_samples = 0;
};

// What the numbers of a statistics file are of: root attributes of stats.h5. Every field is
// empty (0) in DeepCAM's own files, which have no attributes.
struct StatsProvenance {
  std::vector<std::string> channel_names;  // "channel_names": one per channel, when the data names them
  std::vector<std::string> channel_units;  // "channel_units": UDUNITS-2 text, "" unknown
  int64_t samples = 0;                     // "samples": samples the statistics are of
  int64_t skipped_samples = 0;             // "skipped_samples": bad samples left out (data.skip_bad_samples)
  std::string source;                      // "source": the dataset folder or file
  std::string squall_version;              // "squall_version"
  std::string created_by;                  // "created_by": the command, "squall data stats"
};

// Writes `path` as DeepCAM's stats.h5 with `provenance` as root attributes: to `path`.tmp,
// flushed and renamed, so that `path` is whole or absent (a failure removes the temporary
// file and leaves an existing `path` as it was). sqmean is written as M2 / count + mean^2 in
// double, so that read_deepcam_stats' sqrt(sqmean - mean^2) gives back the variance to about
// 1e-16 of sqmean. Refuses (squall::Error naming the channel) an empty channel.
void write_stats_file(const std::string& path, const ChannelMoments& moments, const StatsProvenance& provenance);

// The attributes of a stats.h5 (empty fields where it has none, as DeepCAM's own files).
StatsProvenance read_stats_provenance(const std::string& path);

// The channel check of training against a statistics file: when `stats_path` records channel
// names and `data_channels` is not empty, they must be the same list, in the same order.
// Otherwise throws squall::Error naming both lists, the file and the command that remakes it
// (`squall data stats --in <data_path> --overwrite`).
void check_stats_channels(const std::string& stats_path, const std::vector<std::string>& data_channels,
                          const std::string& data_path);

}  // namespace squall::formats
