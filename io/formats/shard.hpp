#pragma once
// Writing squall's native HDF5 shards (the layout is documented in docs/formats.md).
// Header free of HDF5.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/nn/tensor.hpp"

namespace squall::formats {

struct ShardMeta {
  std::vector<std::string> class_names;
  std::vector<std::string> channel_names;
  // Per-channel statistics of the raw values (before normalisation), one entry per channel.
  std::vector<float> mean, std, min, max;
  std::string source;  // free text: where the samples came from
};

enum class SampleType { float32, uint8 };

// Writes one shard. The file appears under its final name only after close() succeeds
// (written to "<path>.tmp" first, then renamed), so a crash never leaves a half shard.
class ShardWriter {
 public:
  // sample: one sample's shape [1, c, h, w]; per_pixel_labels: labels [h, w] per sample
  // instead of one int32; compression: 0 = none, 1..9 = deflate level (chunk = one sample).
  ShardWriter(const std::string& path, nn::Shape sample, SampleType type, bool per_pixel_labels, int compression,
              const ShardMeta& meta);
  ~ShardWriter();  // without close(): removes the temporary file
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const float* image, const int32_t* label);    // SampleType::float32
  void append(const uint8_t* image, const int32_t* label);  // SampleType::uint8
  int64_t count() const;
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// The first sample of shard i of `shards` over n samples: shard i holds [i*n/shards,
// (i+1)*n/shards), so shard sizes differ by at most one.
inline int64_t shard_begin(int64_t n, int shards, int i) { return n * i / shards; }

// "train-00003-of-00016.h5"
std::string shard_name(const std::string& split, int index, int count);

// What one shard file holds, from its datasets and attributes (no sample is read). Throws
// squall::Error naming the file and dataset when the layout is not a squall shard.
struct ShardFileInfo {
  nn::Shape sample;               // [1, c, h, w]
  SampleType type = SampleType::float32;
  bool per_pixel_labels = false;
  int64_t count = 0;              // samples
  int compression = 0;            // deflate level of /images, 0 = none
  ShardMeta meta;
};
ShardFileInfo read_shard_info(const std::string& path);

// "uint8" / "float32"
const char* sample_type_name(SampleType type);

// The shard files of `split` in `dir` ("<split>-NNNNN-of-MMMMM.h5"), sorted by name; with an
// empty split, the shards of every split.
std::vector<std::string> list_shards(const std::string& dir, const std::string& split);

}  // namespace squall::formats
