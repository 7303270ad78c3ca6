#pragma once
// A performance model of data-parallel training (docs/model.md): step time and scaling
// efficiency of a zoo model on a machine preset, from the model's parameters and FLOPs, the
// GPUs' sustained FLOP rate and an alpha-beta model of the gradient allreduce (a flat ring
// against a hierarchical one), with part of the allreduce hidden behind the backward pass.
// Backend-free: it builds no model (Graph::setup only) and touches no device.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "src/nn/graph.hpp"
#include "src/train/config_enums.hpp"

namespace squall::train::perf {

// ---- the model ----------------------------------------------------------------------------
struct ModelCost {
  std::string name;
  nn::ModelSpec spec;        // as built: its knobs' effective values (the zoo's defaults filled in)
  int64_t c = 1, h = 1, w = 1, classes = 10;
  int64_t parameters = 0;
  double forward_flops = 0;  // per sample; a multiply-add counts 2
  double train_flops() const { return 3.0 * forward_flops; }  // forward + backward (2x forward)
};
// The input a model is usually trained on here: 1x28x28 and 10 classes for lenet5 and
// resnet20 (Fashion-MNIST), 16x768x1152 and 3 classes for the segmentation models (DeepCAM).
void default_input(const std::string& model, int64_t& c, int64_t& h, int64_t& w, int64_t& classes);
// Builds the model's graph (nn::make_model, shapes only) for one sample of c x h x w and
// counts its parameters and forward FLOPs; spec.classes are the classes. Throws UsageError for
// an unknown model or an input or knob the model cannot take, naming the model.
ModelCost model_cost(const nn::ModelSpec& spec, int64_t c, int64_t h, int64_t w);
// The zoo's defaults for every knob (width, depth, ASPP rates).
ModelCost model_cost(const std::string& model, int64_t c, int64_t h, int64_t w, int64_t classes);
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
  Precision precision = Precision::fp32;
  std::string notes;             // where the numbers come from, in one line
  double sustained_flops() const { return peak_flops * efficiency; }
};
std::vector<std::string> machine_names();  // summit, perlmutter, frontier, local
// precision: fp32, or bf16/fp16 (reduced precision: the tensor/matrix-core peak). Throws
// UsageError for an unknown machine, a precision the machine lacks, and for `local` (it comes
// from calibration).
Machine machine_preset(const std::string& name, Precision precision = Precision::fp32);

// ---- the allreduce ------------------------------------------------------------------------
// Ring allreduce of `bytes` over p participants: 2(p-1) steps of latency alpha, each moving
// bytes/p over a link of bandwidth beta: 2(p-1) alpha + 2(p-1)/p * bytes / beta.
double ring_allreduce_s(double bytes, int p, double alpha, double beta);
// Flat: one ring over all nodes * gpus_per_node GPUs, topology-oblivious: with more than one
// node every GPU's share of the traffic crosses the network, inter_bw / gpus_per_node each,
// at inter_latency per step. On one node it is the ring over the intra-node links.
double flat_allreduce_s(double bytes, int nodes, const Machine& m);
// Hierarchical: reduce-scatter inside the node, gpus_per_node concurrent rings across the
// nodes on 1/gpus_per_node of the data each (sharing the node's NICs), allgather inside.
double hier_allreduce_s(double bytes, int nodes, const Machine& m);

// ---- the forecast -------------------------------------------------------------------------
struct Scenario {
  int64_t batch = 1;             // per learner
  int learners = 1;              // per GPU
  Algorithm algorithm = Algorithm::ssgd;  // ssgd | sma (local-sgd is not modelled)
  std::string allreduce = "hier";  // which allreduce the step uses: hier | flat
  int grad_bytes = 4;            // per parameter in the allreduce: 4 (fp32) or 2 (bf16/fp16)
  double overlap = 0.8;          // fraction of the overlappable allreduce actually hidden
  double sample_bytes = 0;       // bytes read per sample (0: I/O not modelled)
};

struct Row {
  int nodes = 0, gpus = 0, learners = 0;
  int64_t global_batch = 0;
  double compute_ms = 0, allreduce_flat_ms = 0, allreduce_hier_ms = 0, exposed_ms = 0, io_ms = 0;
  double step_ms = 0, samples_per_s = 0, efficiency = 0;
};

// One row per node count; efficiency is relative to the first (smallest) node count, per
// node: (samples/s / nodes) / (samples/s at the base / base nodes). Throws UsageError for a
// node count < 1 or above the machine's.
std::vector<Row> forecast(const ModelCost& model, const Machine& m, const Scenario& s, std::vector<int> nodes);
// The step of one row (nodes given): compute, allreduce, exposed part, I/O, step.
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
  double step_s() const { return static_cast<double>(global_batch) / samples_per_s; }
};
// Throws Error naming a missing field. samples_per_s and time_breakdown_s are the last
// attempt's: a resumed run's step count is that attempt's (`attempt.steps`; before that field,
// the caller corrects it from the run's resume records).
RunMeasurement read_summary(const nlohmann::json& summary);

// Sets `local` (one node of world_size GPUs) so that the run's shape reproduces it: the
// sustained FLOP rate from compute time per step, the allreduce bandwidth from the whole
// allreduce time per step (exposed + overlapped; alpha as given), the overlap from the hidden
// share, and the rest of the step as a fixed overhead. `algorithm` decides the overlap window.
Machine calibrate_local(const ModelCost& model, const RunMeasurement& run, double alpha = 0.0,
                        Algorithm algorithm = Algorithm::ssgd);

// From `squall bench allreduce --json`: least squares of time = a + b * x over the sizes of
// one algorithm, with x = 2(p-1)/p * bytes; alpha = a / (2(p-1)), beta = 1 / b.
struct AlphaBetaFit {
  std::string algo;
  int ranks = 0;
  size_t points = 0;
  double alpha = 0, beta = 0, rms_rel_error = 0;
};
AlphaBetaFit fit_alpha_beta(const nlohmann::json& bench, const std::string& algo = "");

}  // namespace squall::train::perf
