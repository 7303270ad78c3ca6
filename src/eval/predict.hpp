#pragma once
// `squall predict` (docs/inference.md): a checkpoint's central model applied to new files,
// with or without labels, writing one mask file per input: the class of every pixel (and,
// when asked, the softmax per class) with the input's grid and time, the class names and the
// checkpoint it came from. Inputs are normalised with the statistics the checkpoint holds (the
// training set's), so a labelled file gets exactly the classes `squall eval` scores on it.
#include <cstdint>
#include <string>
#include <vector>

#include "mpi/topology.hpp"
#include "io/checkpoint/named_weights.hpp"

namespace squall::eval {

struct PredictOptions {
  std::vector<std::string> data;       // files (DeepCAM *.h5, netCDF *.nc), or folders of them
  std::string out;                     // the folder the masks go to (made when missing)
  std::string format = "nc";           // "nc" (CF netCDF, io/formats/netcdf_mask.hpp) or "h5" (io/formats/mask.hpp)
  bool probabilities = false;          // the softmax per class too
  bool png = false;                    // a picture per input: its first channel and the mask
  std::vector<std::string> overrides;  // --set: keys of the checkpoint's config
};

// One input file's masks.
struct PredictedFile {
  std::string input, output;
  int64_t samples = 0;                    // time steps
  std::vector<std::string> class_names;
  std::vector<int64_t> pixels;            // per class, over its time steps
  std::vector<int64_t> regions;           // per class, connected regions summed over time steps
};

// The input files `paths` name, in order: a file as it is, a folder's *.nc and *.h5 files in
// name order (stats.h5 left out). Throws UsageError naming a path that does not exist or a folder that
// holds none.
std::vector<std::string> predict_inputs(const std::vector<std::string>& paths);

// Connected regions of class `cls` in a [h, w] map, 8-neighbours, longitude periodic (the
// first and last columns touch, as on the sphere).
int64_t count_regions(const uint8_t* mask, int64_t h, int64_t w, uint8_t cls);
// The same count for every class in [1, classes) at once (entry c; entry 0, the background,
// is left 0), in one pass over the map that joins each pixel to its neighbours of the same
// class (union-find): what predict writes per file, where count_regions per class took a flood
// fill per class.
std::vector<int64_t> count_event_regions(const uint8_t* mask, int64_t h, int64_t w, int64_t classes);

// What one rank's predict did.
struct Predictions {
  std::vector<PredictedFile> files;  // written, in input order
  int64_t samples = 0;               // time steps predicted
  double seconds = 0;                // from the model built to the last file written
};

// Collective over topo.world(): the files are split over the ranks in contiguous blocks; each
// rank writes its own files and returns what it wrote. Batches run across file boundaries
// (DeepCAM files hold one time step each), and a reader thread opens and reads the next batch,
// and writes the finished files, while the model runs. Every failure ends every rank with the
// same CollectiveError naming the file.
Predictions predict_files(const checkpoint::CheckpointModel& ck, const PredictOptions& options,
                                         const mpi::Topology& topo);

}  // namespace squall::eval
