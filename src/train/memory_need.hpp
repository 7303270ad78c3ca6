#pragma once
// The memory a rank needs to train, stated before it trains (issue 46, "Memory stated before
// training"): what each part of the model holds at the rank's tile of a sample split across
// ranks (parallel.spatial), from the graph's shapes alone, without allocating; the smallest
// split whose largest tile fits a limit; and the refusal of a run whose rank would not fit
// (run.memory_limit on the CPU, the device's memory on a GPU).
//
// Exact: what the graph, the optimizer, the group's sum and the halos allocate (their sizes
// follow from the shapes). Estimated: the workspace of the backend's plans (oneDNN's scratchpads
// and reordered copies, cuDNN's workspaces), which only the library knows once it has made its
// plans; memory_need.cpp says how the figure is made and what it was calibrated against.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/nn/device.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/spatial.hpp"
#include "src/optim/options.hpp"

namespace squall::train {

// What a rank trains, as far as its memory goes.
struct MemoryQuery {
  nn::ModelSpec model;
  nn::Shape sample;                      // one whole sample, [1, c, h, w]
  int64_t batch = 1;                     // samples per learner (train.batch_size)
  nn::SpatialSplit split;                // parallel.spatial
  int64_t group_rank = -1;               // this rank's place in its group; -1: the rank that needs most
  nn::DType precision = nn::DType::f32;  // the activations' type (train.precision)
  nn::Layout layout = nn::Layout::nchw;  // model.layout as resolved for the backend
  optim::OptimizerKind optimizer = optim::OptimizerKind::sgd;
  int learners = 1;                      // parallel.replicas_per_device
  int64_t eval_batch = 0;                // the central model's forward-only graph, built at the first
                                         // evaluation and kept; 0: none counted
  int64_t loader_batches = 0;            // batches of the tile the loader holds (data.prefetch + 1); 0:
                                         // not counted
  nn::Capabilities caps;                 // the backend's: fusion, blocked layout, host access
  bool gpu = false;                      // the CUDA backend (its workspace is counted as cuDNN's cap)
};

// Bytes per rank, by part.
struct MemoryNeed {
  nn::SpatialSplit split;
  int64_t group_rank = 0;
  int64_t tile_h = 0, tile_w = 0;  // this rank's tile of the model's input
  size_t activations = 0;  // every learner's activation arena (values and gradients), its scratch
                           // gradient, f32 input and labels
  size_t parameters = 0;   // every learner's parameters and non-learned state (running statistics)
  size_t gradients = 0;    // every learner's parameter gradients
  size_t optimizer = 0;    // every learner's optimizer state (momentum; Adam's two moments)
  size_t mirrors = 0;      // the convolutions' reduced-precision copies of their weights
  size_t sums = 0;         // the group's fused sum buffer (parameters, state, the finite check)
  size_t halos = 0;        // a split sample's halo and edge-strip buffers (src/nn/layers/halo.hpp)
  size_t evaluation = 0;   // the central model's forward-only graph (its arenas and halos)
  size_t workspace = 0;    // the backend's plans, the evaluation graph's too: an estimate
                           // (memory_need.cpp); everything else is exact
  size_t input = 0;        // host batches of the tile: the loader's, and the evaluation's two

  size_t total() const;
  // Every part by name ("activations", ...), in the order above, zeros included: for
  // summary.json and the text.
  std::vector<std::pair<std::string, size_t>> parts() const;
  // "per rank: 1.23 GiB (activations 0.98, parameters 0.01, gradients 0.01, optimizer 0.01,
  // workspace 0.20)": the parts in the unit of the total (GiB, or MiB below 1 GiB); the first
  // five always, the others where not zero.
  std::string text() const;
};

// The memory of the rank q.group_rank of q.split (of the rank that needs most for -1: the
// largest tile with the most neighbours). Throws squall::Error, as the graph does, for a split
// the model cannot run on (a tile thinner than a halo, a sample the split does not divide).
MemoryNeed memory_need(const MemoryQuery& q);

// The split of the fewest ranks, at most max_ranks, whose every rank needs at most `limit`
// bytes, with that need (of its rank that needs most); nothing when none does. Among splits of
// as many ranks: rows only first ([n, 1]), then the squarest ([2, 2] before [4, 1] is not
// reached: [4, 1] is rows only), more rows than columns first. Splits the model cannot run on
// are skipped. q.split and q.group_rank are ignored.
std::optional<MemoryNeed> fitting_split(const MemoryQuery& q, size_t limit, int64_t max_ranks = 64);

// "" when `need` fits `limit`; otherwise the refusal: the need and its parts, the limit and
// what set it (`limit_name`: "run.memory_limit", or "the device's memory"), and the split that
// would fit (as `split_key` = [rows, cols], with its figure) or that none of up to max_ranks does.
std::string memory_refusal(const MemoryNeed& need, size_t limit, const std::optional<MemoryNeed>& fits,
                           const std::string& limit_name = "run.memory_limit",
                           const std::string& split_key = "parallel.spatial", int64_t max_ranks = 64);

// This process's resident memory now and at its peak (VmRSS and VmHWM of /proc/self/status), in
// bytes; zeros where the system does not say.
struct ProcessMemory {
  size_t resident = 0, peak = 0;
};
ProcessMemory process_memory();

// Bytes as a message says them: "12.0 GiB", "800.0 MiB", "512 bytes".
std::string bytes_text(size_t bytes);

}  // namespace squall::train
