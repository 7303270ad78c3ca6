// `squall model --model NAME [--width N] [--depth N] [--aspp-rates LIST] [--params N --flops F]
// [--input C,H,W] [--classes K] [--batch B] [--learners L] [--spatial R,C]
// [--machine summit|perlmutter|frontier|cori-gpu|horovod-p100|local] [--nodes LIST]
// [--algorithm ssgd|sma] [--allreduce hier|flat] [--cross-node auto|ring|halving-doubling]
// [--precision fp32|fp16|bf16] [--comm fp32|bf16|fp16] [--overlap F] [--jitter F]
// [--efficiency F] [--calibrate RUN_DIR] [--calibrate-allreduce FILE] [--json]`:
// the performance model of src/perf/perf_model.hpp (docs/model.md). It runs no training and
// needs no MPI job: the model's parameters and FLOPs (the zoo's graph, or --params/--flops for
// a model outside the zoo), the machine's rates, and per node count the step's compute, the
// wait for the slowest GPU, the allreduce (flat and hierarchical, with the cross-node
// algorithm the allreduce would take), the part the overlap does not hide, the step time,
// samples/s and the scaling efficiency against the smallest node count.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi/cross_algorithm.hpp"
#include "src/app/cli.hpp"
#include "src/core/error.hpp"
#include "src/nn/graph.hpp"
#include "src/perf/perf_model.hpp"
#include "src/perf/perf_run.hpp"
#include "src/config/setup.hpp"
#include "src/train/memory_need.hpp"

namespace squall::app {
namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model, input, machine, nodes, algorithm = "ssgd", allreduce = "hier";
  std::string precision = "fp32", comm = "fp32", calibrate, calibrate_allreduce, calibrate_algo;
  std::string cross_node = "auto";
  double params = 0, flops = 0;  // a model given by its counts (both, or neither)
  bool params_given = false, flops_given = false;
  double jitter = 0.02;
  int64_t classes = 0, batch = 0;
  int64_t width = 0, depth = 0;  // the model's knobs, when given
  std::string aspp_rates;
  bool width_given = false, depth_given = false, aspp_rates_given = false;
  int learners = 1;
  std::string spatial;  // --spatial R,C ("" : whole samples)
  double overlap = 0.8, efficiency = 0;
  bool json = false;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) parts.push_back(item);
  if (!text.empty() && text.back() == ',') parts.push_back("");
  return parts;
}

// A whole positive-or-not integer, or a UsageError naming the flag and the text.
int64_t parse_int(const std::string& flag, const std::string& text) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size()) throw UsageError(flag + ": '" + text + "' is not an integer");
  return v;
}

json read_json(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw UsageError(what + ": cannot read '" + path + "'");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw UsageError(what + ": '" + path + "' is not JSON: " + e.what());
  }
}

json row_json(const perf::Row& r) {
  return json{{"nodes", r.nodes},
              {"gpus", r.gpus},
              {"learners", r.learners},
              {"global_batch", r.global_batch},
              {"compute_ms", r.compute_ms},
              {"allreduce_flat_ms", r.allreduce_flat_ms},
              {"allreduce_hier_ms", r.allreduce_hier_ms},
              {"exposed_ms", r.exposed_ms},
              {"halo_ms", r.halo_ms},
              {"halo_exposed_ms", r.halo_exposed_ms},
              {"group_sum_ms", r.group_sum_ms},
              {"straggler_ms", r.straggler_ms},
              {"cross_node", mpi::k_cross_algorithms.name(r.cross)},
              {"io_ms", r.io_ms},
              {"step_ms", r.step_ms},
              {"samples_per_s", r.samples_per_s},
              {"efficiency", r.efficiency}};
}

json machine_json(const perf::Machine& m) {
  return json{{"name", m.name},
              {"gpus_per_node", m.gpus_per_node},
              {"max_nodes", m.max_nodes},
              {"precision", config::k_precisions.name(m.precision)},
              {"peak_tflops_per_gpu", m.peak_flops / 1e12},
              {"efficiency", m.efficiency},
              {"sustained_tflops_per_gpu", m.sustained_flops() / 1e12},
              {"intra_node_GBps", m.intra_bw / 1e9},
              {"intra_node_latency_us", m.intra_latency * 1e6},
              {"inter_node_GBps_per_node", m.inter_bw / 1e9},
              {"inter_node_latency_us", m.inter_latency * 1e6},
              {"nvme_GBps_per_node", m.nvme_bw / 1e9},
              {"step_overhead_ms", m.step_overhead * 1e3},
              {"notes", m.notes}};
}

// "resnet20, unet and deeplabv3plus": the zoo's models that take a knob.
std::string models_taking(bool nn::ModelKnobs::*knob) {
  std::vector<std::string> takers;
  for (const auto& name : nn::model_names())
    if (nn::model_knobs(name).*knob) takers.push_back(name);
  std::string out;
  for (size_t i = 0; i < takers.size(); ++i)
    out += (i == 0 ? "" : i + 1 == takers.size() ? " and " : ", ") + takers[i];
  return out;
}

// C,H,W from --input.
void parse_input(const std::string& text, int64_t& c, int64_t& h, int64_t& w) {
  const auto parts = split(text);
  if (parts.size() != 3) throw UsageError("--input: '" + text + "' is not C,H,W");
  c = parse_int("--input", parts[0]);
  h = parse_int("--input", parts[1]);
  w = parse_int("--input", parts[2]);
  if (c <= 0 || h <= 0 || w <= 0) throw UsageError("--input: '" + text + "' needs positive C, H and W");
}

// The knob flags on `spec`: each must be one the model takes (the message names the flag and
// the models that take it) and positive.
void apply_knobs(const ModelArgs& a, nn::ModelSpec& spec) {
  nn::ModelKnobs knobs;
  try {
    knobs = nn::model_knobs(spec.name);
  } catch (const Error& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  auto refuse = [&](const std::string& flag, const std::string& what, bool nn::ModelKnobs::*knob) {
    return UsageError(flag + ": model " + spec.name + " takes no " + what + " (" + models_taking(knob) + " do)");
  };
  if (a.width_given) {
    if (!knobs.width) throw refuse("--width", "width", &nn::ModelKnobs::width);
    if (a.width < 1) throw UsageError("--width must be positive, got " + std::to_string(a.width));
    spec.width = a.width;
  }
  if (a.depth_given) {
    if (!knobs.depth) throw refuse("--depth", "depth", &nn::ModelKnobs::depth);
    if (a.depth < 1) throw UsageError("--depth must be positive, got " + std::to_string(a.depth));
    spec.depth = a.depth;
  }
  if (a.aspp_rates_given) {
    if (!knobs.aspp_rates) throw refuse("--aspp-rates", "ASPP rates", &nn::ModelKnobs::aspp_rates);
    spec.aspp_rates.clear();
    for (const auto& part : split(a.aspp_rates)) {
      const int64_t r = parse_int("--aspp-rates", part);
      if (r < 1) throw UsageError("--aspp-rates: rate " + part + " is not positive");
      spec.aspp_rates.push_back(r);
    }
    if (spec.aspp_rates.empty()) throw UsageError("--aspp-rates: give at least one rate");
  }
}

// "unet (width 8, depth 2)".
std::string model_text(const perf::ModelCost& cost) {
  const std::string knobs = perf::knobs_text(cost.spec);
  return cost.name + (knobs.empty() ? "" : " (" + knobs + ")");
}

json knobs_json(const nn::ModelSpec& spec) {
  json k = json::object();
  if (spec.width > 0) k["width"] = spec.width;
  if (spec.depth > 0) k["depth"] = spec.depth;
  if (!spec.aspp_rates.empty()) k["aspp_rates"] = spec.aspp_rates;
  return k;
}

// The calibrated run's own model as it trained. Its input: what its dir says; when it says
// nothing (no checkpoint, its data moved), --input and --classes are taken as the run's, and for
// a summary.json without config.toml or checkpoint, the knob flags too. Its parameter count must
// be summary.json's.
perf::ModelCost run_model_cost(const ModelArgs& a, const perf::CalibrationRun& cal) {
  if (!cal.has_input && (a.input.empty() || (cal.spec.classes <= 0 && a.classes == 0)))
    throw UsageError("--calibrate: cannot tell the input of the run's " + cal.spec.name + " (" + cal.no_input_why +
                     "); give the run's --input C,H,W" + (cal.spec.classes > 0 ? "" : " and --classes K"));
  nn::ModelSpec spec = cal.spec;
  if (!cal.has_knobs) apply_knobs(a, spec);
  int64_t c = cal.c, h = cal.h, w = cal.w;
  if (!cal.has_input) {
    parse_input(a.input, c, h, w);
    if (spec.classes <= 0) spec.classes = a.classes;
  }
  const perf::ModelCost cost = perf::model_cost(spec, c, h, w);
  const int64_t measured = cal.measurement.parameters;
  if (measured == cost.parameters) return cost;
  std::string hint;
  if (!cal.has_input) hint = "--input, --classes";
  if (!cal.has_knobs) hint += (hint.empty() ? "" : ", ") + std::string("the knobs --width, --depth, --aspp-rates");
  throw UsageError("--calibrate: the run's " + model_text(cost) + " at input " + std::to_string(c) + "x" +
                   std::to_string(h) + "x" + std::to_string(w) + ", " + std::to_string(spec.classes) +
                   " classes (model from " + cal.model_from + ", input from " +
                   (cal.has_input ? cal.input_from : std::string("--input")) + ") has " +
                   std::to_string(cost.parameters) + " parameters built here, but its summary.json says " +
                   std::to_string(measured) + (hint.empty() ? "" : " (give the run's " + hint + ")"));
}

int run_model(const ModelArgs& a) {
  // The calibration, when asked for: it decides the machine and, unless --model names
  // another, the model and its input (the run's own, from its config.toml and checkpoint or data).
  std::unique_ptr<perf::CalibrationRun> cal;
  if (!a.calibrate.empty()) {
    if (!a.machine.empty() && a.machine != "local")
      throw UsageError("--calibrate describes the machine 'local', not '" + a.machine + "'");
    cal = std::make_unique<perf::CalibrationRun>(perf::read_calibration_run(a.calibrate));
  } else if (!a.calibrate_allreduce.empty()) {
    throw UsageError("--calibrate-allreduce needs --calibrate RUN_DIR (the compute rate of 'local')");
  }
  const perf::RunMeasurement* run = cal ? &cal->measurement : nullptr;
  const std::string machine_name = a.machine.empty() ? (run ? "local" : "summit") : a.machine;
  // The model knows the overlap windows of ssgd and sma only.
  const parallel::Algorithm* algorithm = parallel::k_algorithms.find(a.algorithm);
  if (algorithm == nullptr || *algorithm == parallel::Algorithm::local_sgd || *algorithm == parallel::Algorithm::outer)
    throw UsageError("--algorithm: unknown algorithm '" + a.algorithm + "' (known: ssgd, sma)");
  const config::Precision precision = config::k_precisions.parse(a.precision, "--precision", "");
  if (a.allreduce != "hier" && a.allreduce != "flat")
    throw UsageError("--allreduce: unknown allreduce '" + a.allreduce + "' (known: hier, flat)");
  const config::Precision comm = config::k_precisions.parse(a.comm, "--comm", "");
  if (!(a.overlap >= 0 && a.overlap <= 1)) throw UsageError("--overlap must be in [0, 1]");
  if (!(a.efficiency >= 0 && a.efficiency <= 1)) throw UsageError("--efficiency must be in (0, 1]");
  if (a.classes < 0) throw UsageError("--classes must be positive, got " + std::to_string(a.classes));
  if (!(a.jitter >= 0 && a.jitter < 1)) throw UsageError("--jitter must be in [0, 1), got " + std::to_string(a.jitter));
  const mpi::CrossAlgorithm cross = mpi::k_cross_algorithms.parse(a.cross_node, "--cross-node", "");
  const bool given = a.params_given || a.flops_given;
  if (given && !(a.params_given && a.flops_given))
    throw UsageError(std::string(a.params_given ? "--params" : "--flops") + " needs " +
                     (a.params_given ? "--flops" : "--params") + ": a model outside the zoo is given by both counts");
  if (given && (a.width_given || a.depth_given || a.aspp_rates_given))
    throw UsageError(std::string(a.width_given ? "--width" : a.depth_given ? "--depth" : "--aspp-rates") +
                     ": a model given by --params and --flops takes no knobs");

  // The model forecast: the calibrated run's, or --model's (default: DeepCAM's network, what
  // squall is for) at its usual input; then the flags.
  const bool runs_model = !given && cal && (a.model.empty() || a.model == cal->spec.name);
  nn::ModelSpec spec;
  int64_t c = 0, h = 0, w = 0, classes = 0;
  if (given) {
    // Outside the zoo: the counts as given; the input only for the I/O term.
    spec.name = a.model.empty() ? "custom" : a.model;
  } else if (runs_model) {
    spec = cal->spec;
    perf::default_input(spec.name, c, h, w, classes);
    if (cal->has_input) c = cal->c, h = cal->h, w = cal->w;
    classes = spec.classes > 0 ? spec.classes : classes;
  } else {
    spec.name = !a.model.empty() ? a.model : "deeplabv3plus-resnet50";
    perf::default_input(spec.name, c, h, w, classes);
  }
  if (!given) apply_knobs(a, spec);
  if (!a.input.empty()) parse_input(a.input, c, h, w);
  if (a.classes != 0) classes = a.classes;
  spec.classes = classes;
  const perf::ModelCost cost =
      given ? perf::given_cost(spec.name, a.params, a.flops, c, h, w) : perf::model_cost(spec, c, h, w);

  perf::Machine m;
  std::unique_ptr<perf::AlphaBetaFit> fit;
  std::unique_ptr<perf::ModelCost> run_cost;  // the calibrated run's own model, as it trained
  if (machine_name == "local") {
    if (!run) throw UsageError("machine 'local' has no preset: give --calibrate RUN_DIR");
    run_cost = std::make_unique<perf::ModelCost>(run_model_cost(a, *cal));
    if (!a.calibrate_allreduce.empty()) {
      try {
        fit = std::make_unique<perf::AlphaBetaFit>(
            perf::fit_alpha_beta(read_json(a.calibrate_allreduce, "--calibrate-allreduce"), a.calibrate_algo));
      } catch (const UsageError&) {
        throw;
      } catch (const Error& e) {
        throw UsageError(std::string("--calibrate-allreduce: ") + e.what());
      }
    }
    // A split run's halos, counted on its own model and split (its activations in f32).
    const double run_halo = run->split.split() ? perf::halo_bytes_per_sample(*run_cost, run->split, 4) : 0.0;
    // The benchmark's alpha and beta, when given, replace the run's single-size estimate.
    m = perf::calibrate_local(*run_cost, *run, fit ? fit->alpha : 0.0, *algorithm, run_halo, fit ? fit->beta : 0.0);
  } else {
    m = perf::machine_preset(machine_name, precision);
  }
  if (a.efficiency > 0) m.efficiency = a.efficiency;

  perf::Scenario s;
  s.algorithm = *algorithm;
  s.allreduce = a.allreduce;
  s.learners = a.learners;
  s.grad_bytes = comm == config::Precision::fp32 ? 4 : 2;
  s.jitter = a.jitter;
  s.cross = cross;
  s.overlap = m.overlap >= 0 ? m.overlap : a.overlap;  // calibrated: the run's hidden share
  if (a.batch < 0) throw UsageError("--batch must be positive (0: the default), got " + std::to_string(a.batch));
  s.batch = a.batch > 0 ? a.batch : (cost.c * cost.h * cost.w > 100000 ? 2 : 32);
  s.sample_bytes = 4.0 * static_cast<double>(cost.c * cost.h * cost.w);
  if (run && a.batch == 0) s.batch = run->batch_per_learner();
  if (run && a.learners == 1) s.learners = run->learners;
  nn::SpatialSplit tiles;
  // A split run's split is the forecast's unless --spatial says otherwise (1,1: whole samples).
  if (run && a.spatial.empty() && run->split.split() && !given) {
    tiles = run->split;
    s.spatial = static_cast<int>(tiles.ranks());
    s.halo_bytes = perf::halo_bytes_per_sample(cost, tiles, precision == config::Precision::fp32 ? 4 : 2);
  }
  if (!a.spatial.empty()) {
    if (given) throw UsageError("--spatial needs a zoo model (its layers give the halos), not --params and --flops");
    const std::vector<std::string> parts = split(a.spatial);
    if (parts.size() != 2) throw UsageError("--spatial: give ROWS,COLS, got '" + a.spatial + "'");
    tiles = {parse_int("--spatial", parts[0]), parse_int("--spatial", parts[1])};
    if (tiles.rows < 1 || tiles.cols < 1) throw UsageError("--spatial: ROWS and COLS must be >= 1, got " + a.spatial);
    s.spatial = static_cast<int>(tiles.ranks());
    s.halo_bytes = perf::halo_bytes_per_sample(cost, tiles, precision == config::Precision::fp32 ? 4 : 2);
  }

  std::vector<int> nodes;
  if (a.nodes.empty()) {
    nodes = machine_name == "local" ? std::vector<int>{1, 2, 4, 8}
                                    : std::vector<int>{1, 16, 256, m.max_nodes};
  } else {
    for (const auto& part : split(a.nodes)) {
      const int64_t n = parse_int("--nodes", part);
      if (n < 1 || n > (int64_t{1} << 30)) throw UsageError("--nodes: node count " + part + " is not positive");
      nodes.push_back(static_cast<int>(n));
    }
  }
  const auto rows = perf::forecast(cost, m, s, nodes);

  json measured;
  if (run) {
    perf::Scenario shape = s;
    shape.batch = run->batch_per_learner();
    shape.learners = run->learners;
    shape.spatial = static_cast<int>(run->split.ranks());
    shape.halo_bytes = run->split.split() ? perf::halo_bytes_per_sample(*run_cost, run->split, 4) : 0.0;
    // The run's own model on its own shape: the prediction reproduces the measurement.
    const perf::Row pred = perf::forecast_one(*run_cost, m, shape, 1);
    measured = json{{"run", a.calibrate},
                    {"model", run_cost->name},
                    {"knobs", knobs_json(run_cost->spec)},
                    {"input", {run_cost->c, run_cost->h, run_cost->w}},
                    {"classes", run_cost->classes},
                    {"parameters", run_cost->parameters},
                    {"model_from", cal->model_from},
                    {"input_from", cal->has_input ? cal->input_from : std::string("--input")},
                    {"steps", run->steps},
                    {"world_size", run->world_size},
                    {"global_batch", run->global_batch},
                    {"spatial", {run->split.rows, run->split.cols}},
                    {"batch_per_learner", run->batch_per_learner()},
                    {"measured_halo_exposed_ms", run->steps > 0 ? run->halo_exposed_s / run->steps * 1e3 : 0.0},
                    {"predicted_halo_exposed_ms", pred.halo_exposed_ms},
                    {"halo_overlap", m.halo_overlap},
                    {"measured_samples_per_s", run->samples_per_s},
                    {"predicted_samples_per_s", pred.samples_per_s},
                    {"measured_step_ms", run->step_s() * 1e3},
                    {"predicted_step_ms", pred.step_ms},
                    {"sustained_gflops_per_rank", m.sustained_flops() / 1e9},
                    {"allreduce_GBps", m.intra_bw / 1e9},
                    {"allreduce_latency_us", m.intra_latency * 1e6},
                    {"overlap", m.overlap}};
    if (fit)
      measured["allreduce_fit"] = json{{"algo", fit->algo}, {"ranks", fit->ranks}, {"points", fit->points},
                                       {"alpha_us", fit->alpha * 1e6}, {"beta_GBps", fit->beta / 1e9},
                                       {"rms_relative_error", fit->rms_rel_error}};
  }

  // What a GPU of the forecast holds: its learners on its tile (train::memory_need, from the
  // graphs as training would plan them, no backend). A model given by its counts has no graph.
  json memory;
  std::string memory_text;
  if (!given) {
    train::MemoryQuery q;
    q.model = cost.spec;
    q.sample = nn::Shape(1, cost.c, cost.h, cost.w);
    q.batch = s.batch;
    q.split = tiles;
    q.precision = config::precision_dtype(precision);
    q.learners = s.learners;
    // A GPU machine: cuDNN's workspace cap and the batch staged in device memory; `local`: the
    // CPU backend's plain-layout plans (the blocked layouts depend on the CPU's ISA).
    q.gpu = machine_name != "local";
    q.caps.host_accessible = !q.gpu;
    try {
      const train::MemoryNeed need = train::memory_need(q);
      json parts = json::object();
      for (const auto& [part, bytes] : need.parts()) parts[part] = bytes;
      memory = json{{"bytes", need.total()}, {"parts", parts}, {"tile", {need.tile_h, need.tile_w}},
                    {"group_rank", need.group_rank}};
      memory_text = "memory " + need.text() + " (one GPU): its tile " + std::to_string(need.tile_h) + " x " +
                    std::to_string(need.tile_w) + ", batch " + std::to_string(s.batch) + " x " +
                    std::to_string(s.learners) + " learner(s), SGD's momentum; no evaluation graph or loader batches\n";
    } catch (const Error& e) {
      memory = json{{"error", e.what()}};
      memory_text = std::string("memory per GPU: not planned (") + e.what() + ")\n";
    }
  }

  if (process_rank() > 0) return 0;  // under mpiexec every rank computes the same; rank 0 prints
  json doc{{"model", cost.name},
           {"knobs", knobs_json(cost.spec)},
           {"input", {cost.c, cost.h, cost.w}},
           {"classes", cost.classes},
           {"parameters", cost.parameters},
           {"forward_gflop_per_sample", cost.forward_flops / 1e9},
           {"train_gflop_per_sample", cost.train_flops() / 1e9},
           {"machine", machine_json(m)},
           {"algorithm", parallel::algorithm_name(s.algorithm)},
           {"allreduce", s.allreduce},
           {"gradient_bytes", static_cast<double>(cost.parameters) * s.grad_bytes},
           {"batch_per_learner", s.batch},
           {"learners_per_gpu", s.learners},
           {"spatial", {tiles.rows, tiles.cols}},
           {"halo_bytes_per_sample", s.halo_bytes},
           {"overlap", s.overlap},
           {"jitter", s.jitter},
           {"cross_node", a.cross_node},
           {"model_from", given ? "--params/--flops" : "zoo"},
           {"rows", json::array()}};
  for (const auto& r : rows) doc["rows"].push_back(row_json(r));
  if (run) doc["calibration"] = measured;
  if (!memory.is_null()) doc["memory_per_gpu"] = memory;
  std::ostringstream out;
  char line[512];
  if (given)
    out << "model " << cost.name << " (given by --params and --flops, not built)"
        << (cost.c > 0 ? " at input " + std::to_string(cost.c) + "x" + std::to_string(cost.h) + "x" +
                             std::to_string(cost.w)
                       : std::string())
        << "\n";
  else
    out << "model " << model_text(cost) << " at input " << cost.c << "x" << cost.h << "x" << cost.w << ", "
        << cost.classes << " classes\n";
  std::snprintf(line, sizeof line, "  parameters %lld (%.3f M); forward %.4f GFLOP/sample, training step %.4f GFLOP/sample\n",
                static_cast<long long>(cost.parameters), cost.parameters / 1e6, cost.forward_flops / 1e9,
                cost.train_flops() / 1e9);
  out << line;
  std::snprintf(line, sizeof line,
                "machine %s: %d GPU(s)/node, %s peak %.4g TF x %.0f%% = %.4g TF sustained; intra %.4g GB/s "
                "%.3g us; inter %.4g GB/s/node %.3g us\n",
                m.name.c_str(), m.gpus_per_node, config::k_precisions.name(m.precision), m.peak_flops / 1e12,
                m.efficiency * 100, m.sustained_flops() / 1e12, m.intra_bw / 1e9, m.intra_latency * 1e6,
                m.inter_bw / 1e9, m.inter_latency * 1e6);
  out << line;
  std::snprintf(line, sizeof line,
                "%s, %s allreduce of %.1f MB (%s gradients), cross-node %s, overlap %.2f, jitter %.3f; batch %lld per "
                "learner, %d learner(s)/GPU\n",
                parallel::algorithm_name(s.algorithm), s.allreduce.c_str(), cost.parameters * s.grad_bytes / 1e6,
                a.comm.c_str(), a.cross_node.c_str(), s.overlap, s.jitter, static_cast<long long>(s.batch), s.learners);
  out << line;
  if (tiles.split()) {
    std::snprintf(line, sizeof line,
                  "parallel.spatial %s: each sample over a group of %lld GPUs (one learner), halos %.1f MB per sample "
                  "(forward and backward), hidden under the tile's compute by the overlap; a job of one group has no "
                  "allreduce, its gradient summed over the group in the pass (group_sum_ms)\n",
                  tiles.str().c_str(), static_cast<long long>(tiles.ranks()), s.halo_bytes / 1e6);
    out << line;
  }
  out << memory_text;
  // cross: the algorithm the hierarchical allreduce's cross-node stage takes (hd: halving-doubling).
  out << "   nodes    GPUs  learners  global_batch  compute_ms  straggler_ms  flat_ms  hier_ms  cross  exposed_ms"
      << (tiles.split() ? "  halo_ms  halo_exposed_ms  group_sum_ms" : "") << "    io_ms   step_ms     samples/s  efficiency\n";
  for (const auto& r : rows) {
    const char* cross_text = r.nodes <= 1 ? "-" : r.cross == mpi::CrossAlgorithm::halving_doubling ? "hd" : "ring";
    std::snprintf(line, sizeof line, "%8d %7d %9d %13lld %11.2f %13.2f %8.2f %8.2f %6s %11.2f", r.nodes, r.gpus,
                  r.learners, static_cast<long long>(r.global_batch), r.compute_ms, r.straggler_ms,
                  r.allreduce_flat_ms, r.allreduce_hier_ms, cross_text, r.exposed_ms);
    out << line;
    if (tiles.split()) {
      std::snprintf(line, sizeof line, " %8.2f %16.2f %13.2f", r.halo_ms, r.halo_exposed_ms, r.group_sum_ms);
      out << line;
    }
    std::snprintf(line, sizeof line, " %8.2f %9.2f %13.1f %11.3f\n", r.io_ms, r.step_ms, r.samples_per_s, r.efficiency);
    out << line;
  }
  if (run) {
    out << "calibration: the run's " << model_text(*run_cost) << " at input " << run_cost->c << "x" << run_cost->h
        << "x" << run_cost->w << ", " << run_cost->classes << " classes, " << run_cost->parameters
        << " parameters (model from " << cal->model_from << ", input from "
        << (cal->has_input ? cal->input_from : std::string("--input")) << ")\n";
    std::snprintf(line, sizeof line,
                  "calibration: %s on %d rank(s)%s: measured %.1f samples/s (%.2f ms/step), predicted %.1f "
                  "(%.2f ms); %.4g GFLOP/s per rank, allreduce %.4g GB/s, %.3g us, overlap %.2f\n",
                  a.calibrate.c_str(), run->world_size,
                  run->split.split() ? (", parallel.spatial " + run->split.str()).c_str() : "",
                  measured["measured_samples_per_s"].get<double>(),
                  measured["measured_step_ms"].get<double>(), measured["predicted_samples_per_s"].get<double>(),
                  measured["predicted_step_ms"].get<double>(), m.sustained_flops() / 1e9, m.intra_bw / 1e9,
                  m.intra_latency * 1e6, m.overlap);
    out << line;
    if (fit) {
      std::snprintf(line, sizeof line, "allreduce fit (%s, %d ranks, %zu sizes): alpha %.3g us, beta %.4g GB/s, rms error %.1f%%\n",
                    fit->algo.c_str(), fit->ranks, fit->points, fit->alpha * 1e6, fit->beta / 1e9,
                    fit->rms_rel_error * 100);
      out << line;
    }
  }
  print_result(a.json, doc, out.str());
  return 0;
}

}  // namespace

void add_model_command(CLI::App& root, Context&, Actions& actions) {
  CLI::App* sub = root.add_subcommand(
      "model",
      "Performance model: a model's parameters and FLOPs (the zoo's, or --params/--flops), and its step time and "
      "scaling on a machine (compute, the wait for the slowest GPU, the allreduce and its cross-node algorithm)");
  auto args = std::make_shared<ModelArgs>();
  sub->add_option("--model", args->model,
                  "Zoo model (lenet5, resnet20, unet, deeplabv3plus, deeplabv3plus-resnet50; default: the calibrated "
                  "run's, else deeplabv3plus-resnet50, DeepCAM's network); with --params/--flops, a label");
  CLI::Option* params = sub->add_option("--params", args->params,
                                        "A model outside the zoo: its parameter count (with --flops)");
  CLI::Option* flops = sub->add_option("--flops", args->flops,
                                       "A model outside the zoo: forward FLOPs per sample, a multiply-add counting 2 "
                                       "(with --params)");
  CLI::Option* width = sub->add_option("--width", args->width, "Base channels (resnet20, unet, deeplabv3plus; default: "
                                                               "the run's, else the model's)");
  CLI::Option* depth = sub->add_option("--depth", args->depth, "Blocks per stage (resnet20), levels (unet) or encoder "
                                                               "stages (deeplabv3plus); default: the run's, else the model's");
  CLI::Option* rates = sub->add_option("--aspp-rates", args->aspp_rates, "ASPP rates of deeplabv3plus and "
                                                                         "deeplabv3plus-resnet50 (default 6,12,18)")
                           ->type_name("LIST");
  sub->add_option("--input", args->input, "Sample shape C,H,W (default: the run's; else 1,28,28 for lenet5/resnet20, "
                                          "16,768,1152 for the others)")
      ->type_name("C,H,W");
  sub->add_option("--classes", args->classes, "Classes (default: the run's; else 10, or 3 for the segmentation models)");
  sub->add_option("--batch", args->batch, "Batch per learner (default: 32, or 2 for inputs over 100k values)");
  sub->add_option("--learners", args->learners, "Learners (model replicas) per GPU (default 1)");
  sub->add_option("--spatial", args->spatial,
                  "ROWS,COLS: each sample split over a group of ROWS x COLS GPUs of a node (parallel.spatial)")
      ->type_name("R,C");
  std::string machines;
  for (const std::string& name : perf::machine_names()) machines += (machines.empty() ? "" : " | ") + name;
  sub->add_option("--machine", args->machine, machines + " (default summit; local with --calibrate)");
  sub->add_option("--nodes", args->nodes, "Node counts, comma-separated (default 1,16,256,all)")->type_name("LIST");
  sub->add_option("--algorithm", args->algorithm, "ssgd (allreduce overlaps backward) | sma (overlaps forward+backward)");
  sub->add_option("--allreduce", args->allreduce, "The allreduce the step uses: hier (default) | flat");
  sub->add_option("--cross-node", args->cross_node,
                  "The hierarchical allreduce's cross-node stage: auto (default: the cheaper per size and node count, "
                  "as the allreduce chooses) | ring | halving-doubling");
  sub->add_option("--precision", args->precision, "Compute precision: fp32 (default) | fp16 | bf16 (tensor-core peak)");
  sub->add_option("--comm", args->comm, "Gradient type in the allreduce: fp32 (4 B, default) | bf16 | fp16 (2 B)");
  sub->add_option("--overlap", args->overlap, "Fraction of the overlappable allreduce that is hidden (default 0.8)");
  sub->add_option("--jitter", args->jitter,
                  "Relative standard deviation of one GPU's compute time per step; the step waits for the slowest GPU "
                  "(default 0.02, an assumption)");
  sub->add_option("--efficiency", args->efficiency, "Sustained fraction of peak FLOP/s (default 0.4)");
  sub->add_option("--calibrate", args->calibrate,
                  "A squall run dir (or its summary.json): calibrates machine 'local' with the run's model, knobs "
                  "and input (its config.toml, checkpoint or data)")
      ->type_name("RUN_DIR");
  sub->add_option("--calibrate-allreduce", args->calibrate_allreduce,
                  "`squall bench allreduce --json` output: fits alpha and beta of 'local'")
      ->type_name("FILE");
  sub->add_option("--calibrate-algo", args->calibrate_algo, "Which algo of that file to fit (default: its first)");
  sub->add_flag("--json", args->json, "Print one JSON object instead of the table");
  sub->footer("Exit status: 0 done; 2 a usage error (unknown model, machine or cross-node algorithm, a node count < 1 "
              "or above the machine's, --params without --flops or the reverse, a --jitter outside [0, 1), an "
              "unreadable calibration). docs/model.md describes the model and compares it with published runs.");
  actions[sub] = [args, width, depth, rates, params, flops] {
    args->params_given = params->count() > 0;
    args->flops_given = flops->count() > 0;
    args->width_given = width->count() > 0;
    args->depth_given = depth->count() > 0;
    args->aspp_rates_given = rates->count() > 0;
    return run_model(*args);
  };
}

}  // namespace squall::app
