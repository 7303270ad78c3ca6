// The performance model of perf_model.hpp; the formulas and the presets' sources are in
// docs/model.md.
#include "src/perf/perf_model.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "src/core/error.hpp"
#include "src/config/setup.hpp"
#include "src/nn/models/input_multiple.hpp"
#include "src/nn/models/split_check.hpp"

namespace squall::perf {

using nlohmann::json;

// ---- the model ----------------------------------------------------------------------------
void default_input(const std::string& model, int64_t& c, int64_t& h, int64_t& w, int64_t& classes) {
  if (model == "lenet5" || model == "resnet20") {
    c = 1; h = 28; w = 28; classes = 10;
  } else {
    c = 16; h = 768; w = 1152; classes = 3;
  }
}

ModelCost model_cost(const nn::ModelSpec& spec, int64_t c, int64_t h, int64_t w) {
  nn::ModelKnobs knobs;
  try {
    knobs = nn::model_knobs(spec.name);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (c <= 0 || h <= 0 || w <= 0) throw UsageError("the input C,H,W must be positive");
  if (spec.classes <= 0) throw UsageError("--classes must be positive, got " + std::to_string(spec.classes));
  ModelCost cost;
  cost.name = spec.name;
  cost.spec = spec;
  // The knobs as built: a 0 or an empty list is the zoo's default; one the model does not take, nothing.
  cost.spec.width = knobs.width ? (spec.width > 0 ? spec.width : knobs.default_width) : 0;
  cost.spec.depth = knobs.depth ? (spec.depth > 0 ? spec.depth : knobs.default_depth) : 0;
  cost.spec.aspp_rates = knobs.aspp_rates ? (spec.aspp_rates.empty() ? knobs.default_aspp_rates : spec.aspp_rates)
                                          : std::vector<int64_t>{};
  cost.c = c; cost.h = h; cost.w = w; cost.classes = spec.classes;
  try {
    // The graph training would build (src/config/setup.hpp), in f32: its parameters and FLOPs.
    auto graph = config::make_model_graph(cost.spec, nn::Shape(1, c, h, w), config::GraphFormat{});
    graph->setup(1);
    cost.parameters = static_cast<int64_t>(graph->parameter_count());
    cost.forward_flops = graph->forward_flops();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    const std::string knobs_now = knobs_text(cost.spec);
    throw UsageError(std::string("model '") + spec.name + "'" + (knobs_now.empty() ? "" : " (" + knobs_now + ")") +
                     " at input " + std::to_string(c) + "," + std::to_string(h) + "," + std::to_string(w) + ": " +
                     e.what());
  }
  return cost;
}

ModelCost model_cost(const std::string& model, int64_t c, int64_t h, int64_t w, int64_t classes) {
  nn::ModelSpec spec;
  spec.name = model;
  spec.classes = classes;
  return model_cost(spec, c, h, w);
}

ModelCost given_cost(const std::string& name, double parameters, double forward_flops, int64_t c, int64_t h,
                     int64_t w) {
  if (!(parameters >= 1) || parameters > 1e15)
    throw UsageError("--params must be a positive parameter count, got " + std::to_string(parameters));
  if (!(forward_flops > 0) || forward_flops > 1e21)
    throw UsageError("--flops must be positive forward FLOPs per sample, got " + std::to_string(forward_flops));
  ModelCost cost;
  cost.name = name;
  cost.spec.name = name;
  cost.c = c; cost.h = h; cost.w = w;
  cost.classes = 0;
  cost.parameters = static_cast<int64_t>(std::llround(parameters));
  cost.forward_flops = forward_flops;
  return cost;
}

std::string knobs_text(const nn::ModelSpec& spec) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (spec.width > 0) add("width " + std::to_string(spec.width));
  if (spec.depth > 0) add("depth " + std::to_string(spec.depth));
  if (!spec.aspp_rates.empty()) {
    std::string rates;
    for (const int64_t r : spec.aspp_rates) rates += (rates.empty() ? "" : ",") + std::to_string(r);
    add("aspp_rates " + rates);
  }
  return out;
}

// ---- the machine --------------------------------------------------------------------------
namespace {

// One published machine. Bandwidths per direction in bytes/s, peaks per GPU in FLOP/s. The
// latencies are estimates (no published figure): 3 us per ring step inside a node, 5 us across.
struct MachinePreset {
  const char* name;
  int gpus_per_node, max_nodes;
  double peak_fp32, peak_reduced;  // the reduced one: fp16 (or bf16) on the tensor/matrix cores
  double intra_bw, intra_latency, inter_bw, inter_latency, nvme_bw;
  const char* without_bf16;        // the GPU, when it has no bf16; nullptr when it has
  const char* notes;
};

constexpr MachinePreset k_machine_presets[] = {
    // OLCF Summit user guide: 6 NVIDIA V100 (SXM2, 16 GB) per node, 4,608 nodes; NVLink2
    // 50 GB/s per direction between connected GPUs; dual-rail EDR InfiniBand, 2 x 12.5 GB/s;
    // 1.6 TB NVMe, about 6 GB/s read.
    {"summit", 6, 4608, 15.7e12, 125e12, 50e9, 3e-6, 25e9, 5e-6, 6e9, "V100",
     "6 V100/node, 15.7 TF fp32 / 125 TF fp16 tensor peak, NVLink2 50 GB/s, 2x EDR IB 25 GB/s/node, NVMe 6 GB/s"},
    // NERSC Perlmutter architecture page: 1,792 GPU nodes of 4 NVIDIA A100 (40 GB), NVLink3
    // (4 links of 25 GB/s per direction between each pair of GPUs), 4 Slingshot-11 NICs of
    // 25 GB/s; no node-local NVMe on compute nodes.
    {"perlmutter", 4, 1792, 19.5e12, 312e12, 100e9, 3e-6, 100e9, 5e-6, 0, nullptr,
     "4 A100/node, 19.5 TF fp32 / 312 TF fp16-bf16 tensor peak, NVLink3 100 GB/s per pair, 4x Slingshot-11 100 "
     "GB/s/node"},
    // OLCF Frontier user guide: 9,408 nodes of 4 AMD MI250X = 8 GCDs; Infinity Fabric 200 GB/s
    // between the GCDs of one MI250X, 50-100 GB/s between packages (the ring's slowest link:
    // 50 GB/s); 4 Slingshot-11 NICs of 25 GB/s; 2 NVMe of 1.92 TB (8 GB/s: an estimate, two
    // drives' sequential read). The peaks are per GCD: half an MI250X.
    {"frontier", 8, 9408, 23.95e12, 191.5e12, 50e9, 3e-6, 100e9, 5e-6, 8e9, nullptr,
     "8 MI250X GCDs/node, 23.9 TF fp32 / 191.5 TF fp16 matrix peak per GCD, Infinity Fabric >= 50 GB/s, 4x "
     "Slingshot-11 100 GB/s/node"},
    // NERSC Cori GPU nodes (the MLPerf HPC v0.7 DeepCAM submission's system description):
    // 18 nodes of 8 NVIDIA V100 (SXM2) in an NVLink2 hybrid cube-mesh (25 GB/s per link per
    // direction: the ring's hop), 4 Mellanox ConnectX-5 EDR InfiniBand cards (12.5 GB/s each,
    // one port each taken as cabled: an assumption); node-local NVMe of unknown bandwidth
    // (I/O not modelled: that run read from the Lustre scratch file system).
    {"cori-gpu", 8, 18, 15.7e12, 125e12, 25e9, 3e-6, 50e9, 5e-6, 0, "V100",
     "8 V100/node, 15.7 TF fp32 / 125 TF fp16 tensor peak, NVLink2 cube-mesh 25 GB/s per link, 4x EDR IB 50 GB/s/node"},
    // The cluster of the Horovod paper's benchmark (Sergeev & Del Balso 2018; Horovod's
    // benchmarks page): 128 servers of 4 Pascal GPUs, RoCE at 25 Gbit/s = 3.125 GB/s per
    // server. The GPU model is not stated: taken as the P100 PCIe (9.3 TF fp32, 18.7 TF fp16,
    // NVIDIA data sheet), its GPUs joined by PCIe 3.0 x16 (15.75 GB/s per direction).
    {"horovod-p100", 4, 128, 9.3e12, 18.7e12, 15.75e9, 3e-6, 3.125e9, 5e-6, 0, "P100",
     "4 P100 (PCIe)/server, 9.3 TF fp32 / 18.7 TF fp16 peak, PCIe 3.0 x16 15.75 GB/s, 25 Gbit/s RoCE 3.125 "
     "GB/s/server"},
};

}  // namespace

std::vector<std::string> machine_names() {
  std::vector<std::string> names;
  for (const MachinePreset& p : k_machine_presets) names.push_back(p.name);
  names.push_back("local");  // calibrated from a run, never a preset
  return names;
}

Machine machine_preset(const std::string& name, config::Precision precision) {
  if (name == "local")
    throw UsageError("machine 'local' has no preset: give --calibrate RUN_DIR (a squall run's summary.json)");
  const MachinePreset* p = nullptr;
  for (const MachinePreset& row : k_machine_presets)
    if (name == row.name) p = &row;
  if (p == nullptr) {
    std::string known;
    for (const auto& n : machine_names()) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("unknown machine '" + name + "' (known: " + known + ")");
  }
  if (precision == config::Precision::bf16 && p->without_bf16 != nullptr)
    throw UsageError(std::string("precision 'bf16': ") + p->without_bf16 + " has no bf16 (use fp16 or fp32)");
  Machine m;
  m.name = name;
  m.precision = precision;
  m.efficiency = 0.4;  // convolution-heavy training: an assumption, docs/model.md
  m.gpus_per_node = p->gpus_per_node;
  m.max_nodes = p->max_nodes;
  m.peak_flops = precision == config::Precision::fp32 ? p->peak_fp32 : p->peak_reduced;
  m.intra_bw = p->intra_bw;
  m.intra_latency = p->intra_latency;
  m.inter_bw = p->inter_bw;
  m.inter_latency = p->inter_latency;
  m.nvme_bw = p->nvme_bw;
  m.notes = p->notes;
  return m;
}

// ---- the allreduce ------------------------------------------------------------------------
double ring_allreduce_s(double bytes, int p, double alpha, double beta) {
  if (bytes <= 0) return 0.0;
  return mpi::ring_seconds(bytes, p, mpi::LinkCost{alpha, beta});
}

double flat_allreduce_s(double bytes, int nodes, const Machine& m) {
  const int g = m.gpus_per_node;
  if (nodes <= 1) return ring_allreduce_s(bytes, g, m.intra_latency, m.intra_bw);
  return ring_allreduce_s(bytes, nodes * g, m.inter_latency, m.inter_bw / g);
}

mpi::LinkCost cross_link(const Machine& m) { return mpi::LinkCost{m.inter_latency, m.inter_bw / m.gpus_per_node}; }

mpi::CrossAlgorithm hier_cross_algorithm(double bytes, int nodes, const Machine& m, mpi::CrossAlgorithm forced) {
  // The allreduce's own choice, on the part each of the g owners per node sums.
  return mpi::choose_cross(bytes / m.gpus_per_node, nodes, cross_link(m), forced);
}

double hier_allreduce_s(double bytes, int nodes, const Machine& m, mpi::CrossAlgorithm cross) {
  const int g = m.gpus_per_node;
  // Reduce-scatter and allgather inside the node: each half a ring allreduce.
  const double intra = ring_allreduce_s(bytes, g, m.intra_latency, m.intra_bw);
  if (nodes <= 1 || bytes <= 0) return intra;
  // g concurrent sums across the nodes, each on bytes/g, each with inter_bw/g of the node's NICs.
  const mpi::CrossAlgorithm algorithm = hier_cross_algorithm(bytes, nodes, m, cross);
  return intra + mpi::cross_seconds(algorithm, bytes / g, nodes, cross_link(m));
}

// ---- stragglers ---------------------------------------------------------------------------
double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) throw UsageError("normal quantile of " + std::to_string(p) + ": needs 0 < p < 1");
  // Bisection on the CDF 0.5 erfc(-x / sqrt 2): monotone, and 200 halvings of [-40, 40] reach
  // double precision; the model calls it once per row.
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double expected_max_normal(int n) {
  if (n < 1) throw UsageError("the expected maximum of " + std::to_string(n) + " normals: needs n >= 1");
  if (n == 1) return 0.0;
  return normal_quantile((n - 0.375) / (n + 0.25));
}

// ---- the forecast -------------------------------------------------------------------------
double halo_bytes_per_sample(const ModelCost& model, nn::SpatialSplit split, int value_bytes) {
  if (!split.split()) return 0.0;
  const nn::Shape sample(1, model.c, model.h, model.w);
  if (const std::string why = nn::split_refusal(model.spec, sample, split); !why.empty()) {
    const std::optional<nn::SpatialSplit> works = nn::largest_working_split(model.spec, sample, split);
    throw UsageError("--spatial " + std::to_string(split.rows) + "," + std::to_string(split.cols) + ": " + why +
                     (works ? "; the largest split within it that works is " + std::to_string(works->rows) + "," +
                                  std::to_string(works->cols)
                            : std::string("; no split within it works")));
  }
  // What each rank of the group receives, from its layers' own halo plans (the cells its
  // reach takes from other tiles, near or beyond the next); backward sends the halos'
  // gradients back, except to the model's input, which has none.
  const int64_t multiple = nn::input_multiple(model.spec);
  double values = 0;
  for (int64_t r = 0; r < split.ranks(); ++r) {
    std::unique_ptr<nn::Graph> graph;
    nn::PlanningComm comm(r, split.ranks());
    try {
      graph = config::make_model_graph(model.spec, sample, config::GraphFormat{});
      graph->set_tile(nn::SpatialPlace::make(split, r, model.h, model.w, multiple), &comm);
      graph->setup(1);
    } catch (const Error& e) {
      throw UsageError(std::string("--spatial: ") + e.what());
    }
    for (int i = 1; i < graph->size(); ++i) {
      const nn::Layer* layer = graph->node_layer(i);
      if (layer == nullptr) continue;
      const double passes = graph->node_inputs(i).front() == 0 ? 1.0 : 2.0;
      values += passes * static_cast<double>(layer->halo_values());
    }
  }
  return values * value_bytes;
}

Row forecast_one(const ModelCost& model, const Machine& m, const Scenario& s, int nodes) {
  Row r;
  r.nodes = nodes;
  r.gpus = nodes * m.gpus_per_node;
  // A split sample's group of GPUs is one learner; each GPU computes its tile's share.
  const int split = std::max(1, s.spatial);
  r.learners = r.gpus / split * s.learners;
  r.global_batch = static_cast<int64_t>(r.learners) * s.batch;
  const double samples_per_gpu = static_cast<double>(s.batch) * s.learners;
  const double compute_s = model.train_flops() * samples_per_gpu / split / m.sustained_flops();
  // Each GPU sends its share of the halos over the node's links, one message per edge and pass.
  const double halo = split > 1 ? samples_per_gpu * s.halo_bytes / split / m.intra_bw + 4.0 * m.intra_latency : 0.0;
  const double halo_overlap = m.halo_overlap >= 0 ? m.halo_overlap : s.overlap;
  const double halo_exposed = halo - halo_overlap * std::min(halo, compute_s);
  // Each GPU's compute is the mean plus noise of relative deviation `jitter`; the step waits for
  // the slowest of the r.gpus, beyond what the machine's overhead already holds (local: the
  // calibrated run's own ranks).
  const double z = std::max(0.0, expected_max_normal(r.gpus) - expected_max_normal(std::max(1, m.jitter_base_ranks)));
  const double straggler = compute_s * s.jitter * z;
  const double bytes = static_cast<double>(model.parameters) * s.grad_bytes;
  // A split job of one group is one learner: it has no allreduce over the job; its ranks sum
  // their tiles' gradient shares in the pass, a gather over the group of every rank's share in
  // double (parallel::Learner::sum_tile_gradients), not hidden. With several groups, ssgd sums
  // tiles and groups in the one allreduce over every GPU, as whole samples do.
  const bool one_group = split > 1 && r.gpus == split;
  const double flat = one_group ? 0.0 : flat_allreduce_s(bytes, nodes, m);
  const double hier = one_group ? 0.0 : hier_allreduce_s(bytes, nodes, m, s.cross);
  const double reduce = s.allreduce == "flat" ? flat : hier;
  const double group_sum =
      one_group ? (split - 1) * (8.0 * static_cast<double>(model.parameters) / m.intra_bw + m.intra_latency) : 0.0;
  // ssgd: buckets reduce while backward (2/3 of compute) runs; sma: the model sum runs beside
  // the whole next forward and backward.
  const double window = s.algorithm == parallel::Algorithm::sma ? compute_s : compute_s * 2.0 / 3.0;
  const double exposed = reduce - s.overlap * std::min(reduce, window);
  double io = 0;
  if (m.nvme_bw > 0 && s.sample_bytes > 0)
    io = s.sample_bytes * samples_per_gpu * m.gpus_per_node / m.nvme_bw;
  // Reading is prefetched: it limits the step only when it takes longer than the step.
  // The allreduce starts when the slowest GPU's gradients are ready: the wait adds to the step.
  const double step = std::max(compute_s + straggler + exposed + halo_exposed + group_sum + m.step_overhead, io);
  r.group_sum_ms = group_sum * 1e3;
  r.halo_ms = halo * 1e3;
  r.halo_exposed_ms = halo_exposed * 1e3;
  r.compute_ms = compute_s * 1e3;
  r.straggler_ms = straggler * 1e3;
  r.cross = hier_cross_algorithm(bytes, nodes, m, s.cross);
  r.allreduce_flat_ms = flat * 1e3;
  r.allreduce_hier_ms = hier * 1e3;
  r.exposed_ms = exposed * 1e3;
  r.io_ms = io * 1e3;
  r.step_ms = step * 1e3;
  r.samples_per_s = static_cast<double>(r.global_batch) / step;
  return r;
}

std::vector<Row> forecast(const ModelCost& model, const Machine& m, const Scenario& s, std::vector<int> nodes) {
  if (nodes.empty()) throw UsageError("--nodes: give at least one node count");
  for (int n : nodes) {
    if (n < 1) throw UsageError("--nodes: node count " + std::to_string(n) + " is not positive");
    if (n > m.max_nodes)
      throw UsageError("--nodes: node count " + std::to_string(n) + " exceeds " + m.name + "'s " +
                       std::to_string(m.max_nodes) + " nodes");
  }
  if (s.batch < 1) throw UsageError("--batch must be positive, got " + std::to_string(s.batch));
  if (s.learners < 1) throw UsageError("--learners must be positive, got " + std::to_string(s.learners));
  if (s.spatial < 1 || m.gpus_per_node % s.spatial != 0)
    throw UsageError("--spatial: groups of " + std::to_string(s.spatial) + " GPUs do not divide " + m.name + "'s " +
                     std::to_string(m.gpus_per_node) + " GPUs per node (a group lies inside a node here)");
  if (!(s.jitter >= 0 && s.jitter < 1)) throw UsageError("--jitter must be in [0, 1), got " + std::to_string(s.jitter));
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::vector<Row> rows;
  for (int n : nodes) rows.push_back(forecast_one(model, m, s, n));
  const double base = rows.front().samples_per_s / rows.front().nodes;
  for (Row& r : rows) r.efficiency = r.samples_per_s / r.nodes / base;
  return rows;
}

// ---- calibration --------------------------------------------------------------------------
RunMeasurement read_summary(const json& doc) {
  RunMeasurement r;
  try {
    r.model = doc.at("model").get<std::string>();
    r.world_size = doc.at("world_size").get<int>();
    r.global_batch = doc.at("global_batch").get<int64_t>();
    r.parameters = doc.at("parameters").get<int64_t>();
    r.samples_per_s = doc.at("samples_per_s").get<double>();
    r.compute_s = doc.at("time_breakdown_s").at("compute").get<double>();
    r.allreduce_s = doc.at("time_breakdown_s").at("allreduce").get<double>();
    r.allreduce_overlapped_s = doc.at("time_breakdown_s").value("allreduce_overlapped", 0.0);
    r.steps = doc.value("steps", int64_t{0});
    // A resumed run's figures are its last attempt's, and so are its steps.
    if (doc.contains("attempt") && doc.at("attempt").is_object() && doc.at("attempt").contains("steps"))
      r.steps = doc.at("attempt").at("steps").get<int64_t>();
    r.learners = doc.value("replicas_per_device", 1);
    if (doc.contains("parallel") && doc.at("parallel").contains("spatial")) {
      const json& sp = doc.at("parallel").at("spatial");
      r.split = {sp.at("rows").get<int64_t>(), sp.at("cols").get<int64_t>()};
      const json& halo = sp.at("halo");
      r.halo_exposed_s = halo.value("exposed_s", 0.0);
      r.halo_hidden_s = halo.value("hidden_s", 0.0);
      r.halo_bytes = halo.value("bytes", 0.0);
    }
  } catch (const json::exception& e) {
    throw Error(std::string("summary.json: ") + e.what());
  }
  if (r.world_size < 1 || r.global_batch < 1 || r.samples_per_s <= 0 || r.compute_s <= 0)
    throw Error("summary.json: needs world_size, global_batch, samples_per_s and time_breakdown_s.compute > 0");
  // A split run's groups must be whole, and so must their batches (a split the summary cannot
  // have come from: a hand-edited file).
  if (r.split.rows < 1 || r.split.cols < 1 ||
      (r.split.split() && (r.world_size % r.split.ranks() != 0 ||
                           r.global_batch % (static_cast<int64_t>(r.groups()) * r.learners) != 0)))
    throw Error("summary.json: parallel.spatial " + r.split.str() + " does not divide its " +
                std::to_string(r.world_size) + " rank(s) and global batch " + std::to_string(r.global_batch) +
                " into whole groups");
  return r;
}

Machine calibrate_local(const ModelCost& model, const RunMeasurement& run, double alpha,
                        parallel::Algorithm algorithm, double halo_bytes, double beta) {
  const double step = run.step_s();
  // Per-step times: from the step count when the summary has it, else the shares of the
  // compute and allreduce totals in a step of global_batch / samples_per_s.
  double compute = 0, reduce = 0, hidden = 0;
  if (run.steps > 0) {
    const double steps = static_cast<double>(run.steps);
    compute = run.compute_s / steps;
    reduce = run.allreduce_s / steps;
    hidden = run.allreduce_overlapped_s / steps;
  } else {
    const double total = run.compute_s + run.allreduce_s;
    compute = step * run.compute_s / total;
    reduce = step * run.allreduce_s / total;
    hidden = step * run.allreduce_overlapped_s / total;
  }
  Machine m;
  m.name = "local";
  m.gpus_per_node = run.world_size;
  m.max_nodes = 1 << 20;
  m.efficiency = 1.0;
  const double bytes = 4.0 * static_cast<double>(run.parameters);
  const int p = run.world_size;
  const double whole = reduce + hidden;  // the allreduce's duration, hidden or not
  if (beta > 0) {
    m.intra_bw = beta;  // a benchmark's (--calibrate-allreduce)
  } else if (p > 1 && whole > 2.0 * (p - 1) * alpha) {
    m.intra_bw = 2.0 * (p - 1) / p * bytes / (whole - 2.0 * (p - 1) * alpha);
  } else {
    m.intra_bw = 1e12;  // one rank (or no measurable time): no allreduce to fit
  }
  m.intra_latency = alpha;
  m.inter_bw = m.intra_bw * m.gpus_per_node;  // unknown: taken as one more ring step's worth
  m.inter_latency = alpha;

  // A split run's compute holds the waits for its halos (rank 0's, in the training passes:
  // summary.json leaves the evaluations' out) and, in a job of one group, the group's sum of
  // the gradient in the pass (forecast_one's group_sum): the tile's own compute is the rest.
  // At most 90% of the compute is taken for them, against records that contradict each other.
  double halo_waited = 0, group_sum = 0;
  const int split = static_cast<int>(run.split.ranks());
  if (run.split.split()) {
    const double steps_done = run.steps > 0 ? static_cast<double>(run.steps) : run.compute_s / compute;
    halo_waited = run.halo_exposed_s / steps_done;
    if (run.groups() == 1)
      group_sum = (split - 1) * (8.0 * static_cast<double>(run.parameters) / m.intra_bw + m.intra_latency);
    const double taken = std::min(0.9 * compute, halo_waited + group_sum);
    group_sum = taken * group_sum / std::max(halo_waited + group_sum, 1e-30);
    halo_waited = taken - group_sum;
  }
  compute -= halo_waited + group_sum;
  // A rank's share of the samples: the whole global batch over all ranks; in a split run each
  // rank computes its tile of its group's samples, the same share.
  const double samples_per_rank = static_cast<double>(run.global_batch) / run.world_size;
  m.peak_flops = model.train_flops() * samples_per_rank / compute;
  const double window = algorithm == parallel::Algorithm::sma ? compute : compute * 2.0 / 3.0;
  m.overlap = hidden > 0 ? std::min(1.0, hidden / std::min(whole, window)) : 0.0;
  double halo_exposed = 0;
  if (run.split.split()) {
    // The model's halo time on this run's shape (forecast_one's), and the overlap that leaves
    // the measured wait exposed; what the model's halo time cannot explain stays in the overhead.
    const double per_gpu = static_cast<double>(run.batch_per_learner()) * run.learners;
    const double halo = per_gpu * halo_bytes / split / m.intra_bw + 4.0 * m.intra_latency;
    const double reach = std::min(halo, compute);
    m.halo_overlap = reach > 0 ? std::clamp((halo - halo_waited) / reach, 0.0, 1.0) : 0.0;
    halo_exposed = halo - m.halo_overlap * reach;
  }
  m.step_overhead = std::max(0.0, step - compute - halo_exposed - group_sum - reduce);
  m.jitter_base_ranks = run.world_size;  // the run's wait for its slowest rank is in the overhead
  m.notes = "calibrated from a run of " + run.model + " on " + std::to_string(run.world_size) + " rank(s)" +
            (run.split.split() ? ", parallel.spatial " + run.split.str() : std::string());
  return m;
}

AlphaBetaFit fit_alpha_beta(const json& bench, const std::string& algo) {
  AlphaBetaFit fit;
  if (!bench.contains("results") || !bench["results"].is_array() || bench["results"].empty())
    throw Error("allreduce benchmark: no 'results' list (expected `squall bench allreduce --json` output)");
  fit.algo = algo.empty() ? bench["results"][0].at("algo").get<std::string>() : algo;
  std::vector<double> xs, ys;
  for (const auto& r : bench["results"]) {
    if (r.at("algo").get<std::string>() != fit.algo) continue;
    fit.ranks = r.at("ranks").get<int>();
    const double bytes = r.at("bytes").get<double>();
    const int p = fit.ranks;
    xs.push_back(p > 1 ? 2.0 * (p - 1) / p * bytes : bytes);
    ys.push_back(r.at("time_us").get<double>() * 1e-6);
  }
  fit.points = xs.size();
  if (fit.points < 2) throw Error("allreduce benchmark: fewer than 2 sizes for algorithm '" + fit.algo + "'");
  if (fit.ranks < 2) throw Error("allreduce benchmark: needs at least 2 ranks to fit a ring");
  // Weighted least squares, relative error: the sizes span orders of magnitude, and an
  // unweighted fit would let the largest ones decide alone. Minimise sum ((a + b x - y) / y)^2.
  double s_w = 0, s_x = 0, s_y = 0, s_xx = 0, s_xy = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double wgt = 1.0 / (ys[i] * ys[i]);
    s_w += wgt; s_x += wgt * xs[i]; s_y += wgt * ys[i]; s_xx += wgt * xs[i] * xs[i]; s_xy += wgt * xs[i] * ys[i];
  }
  const double det = s_w * s_xx - s_x * s_x;
  double a = 0, b = 0;
  if (std::abs(det) > 0) {
    b = (s_w * s_xy - s_x * s_y) / det;
    a = (s_y - b * s_x) / s_w;
  }
  if (b <= 0) throw Error("allreduce benchmark: time does not grow with size; cannot fit a bandwidth");
  a = std::max(a, 0.0);
  fit.alpha = a / (2.0 * (fit.ranks - 1));
  fit.beta = 1.0 / b;
  double err = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double rel = (a + b * xs[i] - ys[i]) / ys[i];
    err += rel * rel;
  }
  fit.rms_rel_error = std::sqrt(err / static_cast<double>(xs.size()));
  return fit;
}

}  // namespace squall::perf
