#pragma once
// `squall predict` (docs/inference.md): a checkpoint's central model applied to new files,
// with or without labels, writing one mask file per input: the class of every pixel (and,
// when asked, the softmax per class) with the input's grid and time, the class names and the
// checkpoint it came from. Inputs are normalised with the statistics the checkpoint holds (the
// training set's), so a labelled file gets exactly the classes `squall eval` scores on it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mpi/topology.hpp"
#include "src/data/data_source.hpp"
#include "src/data/pad_mode.hpp"
#include "io/checkpoint/named_weights.hpp"
#include "src/nn/spatial.hpp"

namespace squall::eval {

struct PredictOptions {
  std::vector<std::string> data;       // files (DeepCAM *.h5, netCDF *.nc), or folders of them
  std::string out;                     // the folder the masks go to (made when missing)
  std::string format = "nc";           // "nc" (CF netCDF, io/formats/netcdf_mask.hpp) or "h5" (io/formats/mask.hpp)
  bool probabilities = false;          // the softmax per class too
  bool png = false;                    // a picture per input: its first channel and the mask
  std::vector<std::string> overrides;  // --set: keys of the checkpoint's config
  bool any_grid = false;               // --any-grid: predict on a grid of another spacing than training's, warned
  std::optional<nn::SpatialSplit> spatial;  // --spatial: the split instead of the run's parallel.spatial
};

// A grid's size and spacing, as the grid rule of predict compares them (docs/inference.md,
// "Grids"): the spacing of each direction from its coordinates (the mean step between the
// first and the last), or where there are none, from the size as if the grid were global
// (180 / rows degrees of latitude, 360 / columns of longitude).
struct GridSpacing {
  int64_t rows = 0, cols = 0;
  double dlat = 0, dlon = 0;  // degrees
  bool lat_from_coordinates = false, lon_from_coordinates = false;
};
GridSpacing grid_spacing(int64_t rows, int64_t cols, const std::vector<double>& lat, const std::vector<double>& lon);
// Whether a file's grid has the spacing the model was trained at: within 5% in each direction.
// A direction where both grids have coordinates compares their spacings; where either has none,
// their sizes, as global grids': the file's as read against the training grid's, which the
// checkpoint records as the model's size after the run's data.pad (`trained_pad`, to multiples
// of `multiple`), so that any size that pads (crops) to it counts as the training size: 181
// rows padded to 192 match 181 rows again.
bool same_spacing(const GridSpacing& file, const GridSpacing& trained, data::PadMode trained_pad, int64_t multiple);
// "96 x 144 (rows x columns) at 1.875 x 2.5 degrees (latitude x longitude)".
std::string grid_text(const GridSpacing& g);

// What predict checks of an input's values against the training set's (docs/inference.md,
// "Input statistics"): a channel whose normalised values average more than this many standard
// deviations (zscore; spans, minmax) from 0 over a file is warned about.
inline constexpr double k_input_mean_limit = 10.0;

// The per-channel sums predict keeps of a file's normalised values over its time steps.
struct ChannelSums {
  std::vector<double> sum, sum_sq;
  int64_t count = 0;  // values per channel
  void add(const float* images, int64_t samples, int64_t channels, int64_t hw);
};
// The warnings a file's sums give: one per channel whose normalised mean is beyond
// k_input_mean_limit, naming the channel (`names`, else its index), `file`, the file's mean in
// raw units, the training set's statistics from `norm` and the likely causes. Empty for a
// normalisation of kind "none".
std::vector<std::string> input_statistics_warnings(const ChannelSums& sums, const data::Normalization& norm,
                                                   const std::vector<std::string>& names,
                                                   const std::vector<std::string>& units, const std::string& file);

// One input file's masks.
struct PredictedFile {
  std::string input, output;
  int64_t samples = 0;                    // time steps
  std::vector<std::string> class_names;
  std::vector<int64_t> pixels;            // per class, over its time steps
  std::vector<int64_t> regions;           // per class, connected regions summed over time steps
  // Lines about the file's grid for the log (its size where it differs from training's).
  std::vector<std::string> notes;
  // The warnings given about it (another spacing with --any-grid, channels far from the
  // training statistics), each also written to stderr by the rank that read the file.
  std::vector<std::string> warnings;
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
  int64_t warnings = 0;              // PredictedFile::warnings, over the files
  double seconds = 0;                // from the model built to the last file written
};

// Collective over topo.world(): the files are split over the ranks in contiguous blocks; each
// rank writes its own files and returns what it wrote. With a split (options.spatial, else the
// run's parallel.spatial), over the groups instead: each rank of a group reads and runs its tile
// of the group's files, and the group's first rank gathers the tiles and writes each mask whole,
// as an unsplit predict writes it (the others return no files). Batches run across file boundaries
// (DeepCAM files hold one time step each), and a reader thread opens and reads the next batch,
// and writes the finished files, while the model runs. Every failure ends every rank with the
// same CollectiveError naming the file.
Predictions predict_files(const checkpoint::CheckpointModel& ck, const PredictOptions& options,
                                         const mpi::Topology& topo);

}  // namespace squall::eval
