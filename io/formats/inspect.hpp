#pragma once
// Inspecting datasets: opens every file, reads every sample (every chunk), checks shapes,
// dtypes, labels and values, and collects every problem found (naming the file and dataset)
// instead of stopping at the first. `squall data inspect` prints this; staging can use
// inspect_paths on the copies it made. Header free of HDF5.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/formats/dataset.hpp"
#include "io/formats/netcdf_file.hpp"

// IDX folders are listed (files, format "idx") but not read: the IDX reader lives in
// src/train, above io/; callers that link it (cmd_data.cpp) fill in samples and shape.

namespace squall::formats {

struct ChannelSummary {
  std::vector<float> mean, std, min, max;  // one entry per channel; empty when unknown
};

struct InspectReport {
  DatasetFormat format = DatasetFormat::none;  // what the paths hold; mixed when they differ
  std::vector<std::string> files;          // every file looked at
  std::vector<std::string> skipped;        // files left out: masks squall predict wrote (mask.hpp's marker)
  int64_t samples = 0;                     // samples read (all splits)
  std::map<std::string, int64_t> splits;   // samples per split (shards: by file name; idx: train/test)
  std::vector<int64_t> shape;              // one sample: [c, h, w]
  std::string dtype;                       // as stored: "uint8", "float32"
  bool per_pixel_labels = false;
  int64_t classes = 0;
  std::vector<std::string> class_names;
  std::vector<std::string> channels;       // channel names (may be empty)
  std::vector<std::string> channel_units;  // their values' units as read, when known (netCDF)
  ChannelSummary stored;                   // statistics the files carry (shard attributes, stats.h5)
  ChannelSummary measured;                 // statistics of the raw values actually read
  std::vector<int64_t> label_counts;       // per class: samples (or pixels) with that label
  std::vector<NetcdfFileInfo> netcdf;      // netCDF input: per file its format, dims, variables, time steps, channels
  int64_t time_steps = 0;                  // netCDF input: time steps in the files, read or not
  std::vector<std::string> errors;         // "FILE: dataset D: ...", empty when every chunk read
};

// netCDF files are read with the channel list of `netcdf` (formats::netcdf_options: DeepCAM's 16
// channels by default); each file says which channels it can supply and which not, all at
// once. Mask files squall wrote are left out (skipped), not read as data.
// paths: dataset folders or single files. Never throws for bad data: problems go to errors.
InspectReport inspect_paths(const std::vector<std::string>& paths, const NetcdfOptions& netcdf = {});

}  // namespace squall::formats
