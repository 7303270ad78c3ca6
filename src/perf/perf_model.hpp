#pragma once
// A performance model of data-parallel training (docs/model.md): step time and scaling
// efficiency of a zoo model on a machine preset, from the model's parameters and FLOPs, the
// GPUs' sustained FLOP rate and an alpha-beta model of the gradient allreduce (a flat ring
// against a hierarchical one whose cross-node stage is the allreduce's own choice of ring or
// halving-doubling, mpi/cross_algorithm.hpp), with part of the allreduce hidden behind the
// backward pass, and the wait for the slowest of the GPUs that synchronise (compute jitter).
// Backend-free: it builds no model (Graph::setup only) and touches no device.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mpi/cross_algorithm.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/spatial.hpp"
#include "src/config/config_enums.hpp"

namespace squall::perf {

// ---- the model ----------------------------------------------------------------------------
struct ModelCost {
  std::string name;
  nn::ModelSpec spec;        // as built: its knobs' effective values (the zoo's defaults filled in)
  int64_t c = 1, h = 1, w = 1, classes = 10;
  int64_t parameters = 0;
  double forward_flops = 0;  // per sample; a multiply-add counts 2
  double train_flops() const { return 3.0 * forward_flops; }  // forward + backward (2x forward)
};

// parallel.spatial: the bytes one sample's halos move between the tiles of `split`, forward and
// backward together, at `value_bytes` per activation value: every convolution whose kernel
// reaches across a tile edge sends each neighbour reach = dilation x (kernel - 1) / 2 rows (or
// columns) of its input, the whole sample's width (height) summed over the edge's tiles, each
// way, and each diagonal neighbour a reach x reach corner; backward sends as many gradients
// back (none to the model's input). What the split sends, exactly (tests/unit/test_spatial.cpp).
// 0 for [1, 1]. Throws UsageError naming --spatial where the
// model cannot run on the split's tiles (a pooling branch, a classifier).
double halo_bytes_per_sample(const ModelCost& model, nn::SpatialSplit split, int value_bytes);
// The input a model is usually trained on here: 1x28x28 and 10 classes for lenet5 and
// resnet20 (Fashion-MNIST), 16x768x1152 and 3 classes for the segmentation models (DeepCAM).
void default_input(const std::string& model, int64_t& c, int64_t& h, int64_t& w, int64_t& classes);
// Builds the model's graph (nn::make_model, shapes only) for one sample of c x h x w and
// counts its parameters and forward FLOPs; spec.classes are the classes. Throws UsageError for
// an unknown model or an input or knob the model cannot take, naming the model.
ModelCost model_cost(const nn::ModelSpec& spec, int64_t c, int64_t h, int64_t w);
// The zoo's defaults for every knob (width, depth, ASPP rates).
ModelCost model_cost(const std::string& model, int64_t c, int64_t h, int64_t w, int64_t classes);
// A model outside the zoo given by its counts (`squall model --params N --flops F`): `name` is
// a label, `forward_flops` per sample (a multiply-add counts 2), c,h,w the sample (0,0,0: I/O
// not modelled). Throws UsageError naming --params / --flops for a count that is not positive.
ModelCost given_cost(const std::string& name, double parameters, double forward_flops, int64_t c = 0,
                     int64_t h = 0, int64_t w = 0);
// "width 16, depth 4" / "aspp_rates 6,12,18" / "" (lenet5): the knobs the model takes, as built.
std::string knobs_text(const nn::ModelSpec& spec);

// ---- the machine --------------------------------------------------------------------------
struct Machine {
  std::string name;
  int gpus_per_node = 1;         // GPUs (GCDs on Frontier) per node: ranks per node
  int max_nodes = 1;
  double peak_flops = 0;         // per GPU at the chosen precision, FLOP/s
  double efficiency = 0.4;       // sustained fraction of peak
  double intra_bw = 0;           // bytes/s per GPU per direction on the ring's slowest intra-node link
  double intra_latency = 0;      // s per ring step inside a node
  double inter_bw = 0;           // bytes/s per node per direction (all NICs)
  double inter_latency = 0;      // s per ring step across nodes
  double nvme_bw = 0;            // bytes/s per node (read); 0: no node-local NVMe modelled
  double step_overhead = 0;      // s per step outside compute and allreduce (calibrated only)
  double overlap = -1;           // calibrated only: the run's hidden share (Scenario::overlap); -1 none
  // parallel.spatial's halos: the share of them hidden under the tile's compute, calibrated from
  // a split run's exposed halo seconds; -1: the allreduce's (overlap, else Scenario::overlap).
  double halo_overlap = -1;
  // The ranks whose wait for the slowest is already in step_overhead: 1 for the presets (no
  // wait), the run's world size for `local` (its measured step holds its own stragglers).
  int jitter_base_ranks = 1;
  config::Precision precision = config::Precision::fp32;
  std::string notes;             // where the numbers come from, in one line
  double sustained_flops() const { return peak_flops * efficiency; }
};
std::vector<std::string> machine_names();  // summit, perlmutter, frontier, cori-gpu, horovod-p100, local
// precision: fp32, or bf16/fp16 (reduced precision: the tensor/matrix-core peak). Throws
// UsageError for an unknown machine, a precision the machine lacks, and for `local` (it comes
// from calibration).
Machine machine_preset(const std::string& name, config::Precision precision = config::Precision::fp32);

// ---- the allreduce ------------------------------------------------------------------------
// Ring allreduce of `bytes` over p participants: 2(p-1) steps of latency alpha, each moving
// bytes/p over a link of bandwidth beta: 2(p-1) alpha + 2(p-1)/p * bytes / beta
// (mpi::ring_seconds; 0 for no bytes).
double ring_allreduce_s(double bytes, int p, double alpha, double beta);
// Flat: one ring over all nodes * gpus_per_node GPUs, topology-oblivious: with more than one
// node every GPU's share of the traffic crosses the network, inter_bw / gpus_per_node each,
// at inter_latency per step. On one node it is the ring over the intra-node links. (The flat
// allreduce has no cross-node stage, so no choice of algorithm: it stays a ring.)
double flat_allreduce_s(double bytes, int nodes, const Machine& m);
// The link of one of the gpus_per_node concurrent cross-node sums: inter_latency per message,
// inter_bw / gpus_per_node (they share the node's NICs).
mpi::LinkCost cross_link(const Machine& m);
// The algorithm the hierarchical allreduce's cross-node stage takes for `bytes` over `nodes`
// (mpi::choose_cross on bytes / gpus_per_node, the part each owner sums): `forced` unless auto.
mpi::CrossAlgorithm hier_cross_algorithm(double bytes, int nodes, const Machine& m,
                                         mpi::CrossAlgorithm forced = mpi::CrossAlgorithm::automatic);
// Hierarchical: reduce-scatter inside the node (a ring), gpus_per_node concurrent cross-node
// sums on 1/gpus_per_node of the data each (sharing the node's NICs) by hier_cross_algorithm
// (mpi::cross_seconds), allgather inside.
double hier_allreduce_s(double bytes, int nodes, const Machine& m,
                        mpi::CrossAlgorithm cross = mpi::CrossAlgorithm::automatic);

// ---- stragglers ---------------------------------------------------------------------------
// The expected maximum of n independent standard normals, by Blom's approximation
// Phi^-1((n - 0.375) / (n + 0.25)): 0 for n = 1, and within 5% of the exact value for every n
// (0.590 against 0.564 at n = 2, 1.282 against 1.267 at n = 6, 4.077 against 4.092 at
// n = 27,360), where the asymptotic sqrt(2 ln n) is 109%, 49% and 10% high. Throws UsageError
// for n < 1.
double expected_max_normal(int n);
// The standard normal quantile (inverse CDF) for p in (0, 1).
double normal_quantile(double p);

// ---- the forecast -------------------------------------------------------------------------
struct Scenario {
  int64_t batch = 1;             // per learner
  int learners = 1;              // per GPU
  parallel::Algorithm algorithm = parallel::Algorithm::ssgd;  // ssgd | sma (local-sgd is not modelled)
  std::string allreduce = "hier";  // which allreduce the step uses: hier | flat
  int grad_bytes = 4;            // per parameter in the allreduce: 4 (fp32) or 2 (bf16/fp16)
  double overlap = 0.8;          // fraction of the overlappable allreduce actually hidden
  double sample_bytes = 0;       // bytes read per sample (0: I/O not modelled)
  // Relative standard deviation of one GPU's compute time per step (an assumption,
  // docs/model.md): a synchronous step waits for the slowest of the GPUs.
  double jitter = 0.02;
  mpi::CrossAlgorithm cross = mpi::CrossAlgorithm::automatic;  // the hierarchical cross-node stage
  // parallel.spatial: each sample split over `spatial` consecutive GPUs of a node (a group,
  // which counts as one learner), each computing its tile's share of the FLOPs and sending
  // halo_bytes per sample (halo_bytes_per_sample / the group's GPUs) over the node's links,
  // hidden under the tile's interior by `overlap` as the allreduce is.
  int spatial = 1;
  double halo_bytes = 0;
};

struct Row {
  int nodes = 0, gpus = 0, learners = 0;
  int64_t global_batch = 0;
  double compute_ms = 0, allreduce_flat_ms = 0, allreduce_hier_ms = 0, exposed_ms = 0, io_ms = 0;
  double straggler_ms = 0;  // the wait for the slowest GPU beyond the mean compute
  double halo_ms = 0, halo_exposed_ms = 0;  // parallel.spatial: the halo exchanges, and their part not hidden
  // parallel.spatial, a job of one group: the group's sum of its tiles' gradients in the pass
  // (there is no allreduce over the job then).
  double group_sum_ms = 0;
  double step_ms = 0, samples_per_s = 0, efficiency = 0;
  mpi::CrossAlgorithm cross = mpi::CrossAlgorithm::ring;  // what the hierarchical cross-node stage took
};

// One row per node count; efficiency is relative to the first (smallest) node count, per
// node: (samples/s / nodes) / (samples/s at the base / base nodes). Throws UsageError for a
// node count < 1 or above the machine's.
std::vector<Row> forecast(const ModelCost& model, const Machine& m, const Scenario& s, std::vector<int> nodes);
// The step of one row (nodes given): compute, the wait for the slowest GPU, allreduce, exposed
// part, I/O, step.
Row forecast_one(const ModelCost& model, const Machine& m, const Scenario& s, int nodes);

// ---- calibration --------------------------------------------------------------------------
// From a squall run's summary.json: the run's shape and its per-step times.
struct RunMeasurement {
  std::string model;
  int world_size = 1;
  int64_t global_batch = 0, parameters = 0;
  int64_t steps = 0;  // the steps the figures below measured: the last attempt's (summary's `attempt.steps`)
  double samples_per_s = 0, compute_s = 0;
  double allreduce_s = 0;             // what the step waited for (time_breakdown_s.allreduce)
  double allreduce_overlapped_s = 0;  // hidden behind the passes (time_breakdown_s.allreduce_overlapped)
  int learners = 1;
  // parallel.spatial of a split run ([1, 1] otherwise): each group of split.ranks() ranks is one
  // learner; rank 0's halo seconds the graph waited for (exposed) and that travelled under its
  // compute (hidden), and its bytes sent, over the whole run (summary's parallel.spatial.halo).
  nn::SpatialSplit split;
  double halo_exposed_s = 0, halo_hidden_s = 0, halo_bytes = 0;
  double step_s() const { return static_cast<double>(global_batch) / samples_per_s; }
  int groups() const { return world_size / static_cast<int>(split.ranks()); }
  // Samples per learner per step: a group of a split run is one learner.
  int64_t batch_per_learner() const { return global_batch / (static_cast<int64_t>(groups()) * learners); }
};
// Throws Error naming a missing field. samples_per_s and time_breakdown_s are the last
// attempt's: a resumed run's step count is that attempt's (`attempt.steps`; before that field,
// the caller corrects it from the run's resume records).
RunMeasurement read_summary(const nlohmann::json& summary);

// Sets `local` (one node of world_size GPUs) so that the run's shape reproduces it: the
// sustained FLOP rate from compute time per step, the allreduce bandwidth from the whole
// allreduce time per step (exposed + overlapped; alpha as given), the overlap from the hidden
// share, and the rest of the step as a fixed overhead (which holds the run's own stragglers:
// jitter_base_ranks is its world size). `algorithm` decides the overlap window.
// A split run (run.split): the FLOP rate is of a rank's tile, its learner's batch over the
// group's ranks, from its compute less the halo seconds it waited for and, a job of one group,
// the model's time of the group's gradient sum (the graph's compute holds both); `halo_bytes`
// (halo_bytes_per_sample of the run's model and split) over the bandwidth is the model's halo
// time, and halo_overlap the share of it that leaves the run's exposed seconds exposed.
// `beta` > 0: the bandwidth of a benchmark (--calibrate-allreduce) instead of the run's
// allreduce, with `alpha` its latency.
Machine calibrate_local(const ModelCost& model, const RunMeasurement& run, double alpha = 0.0,
                        parallel::Algorithm algorithm = parallel::Algorithm::ssgd, double halo_bytes = 0.0,
                        double beta = 0.0);

// From `squall bench allreduce --json`: least squares of time = a + b * x over the sizes of
// one algorithm, with x = 2(p-1)/p * bytes; alpha = a / (2(p-1)), beta = 1 / b.
struct AlphaBetaFit {
  std::string algo;
  int ranks = 0;
  size_t points = 0;
  double alpha = 0, beta = 0, rms_rel_error = 0;
};
AlphaBetaFit fit_alpha_beta(const nlohmann::json& bench, const std::string& algo = "");

}  // namespace squall::perf
