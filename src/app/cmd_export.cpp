// `squall export --checkpoint PATH | --run DIR --format onnx --out FILE [--batch N] [--data PATH]`:
// a checkpoint's model as an inference graph for other runtimes (docs/inference.md, "Export to
// ONNX"). The checkpoint is read through the same path as `squall eval`; the run's test set (or
// --data) fixes the input size, which the checkpoint does not record.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi/topology.hpp"
#include "squall/version.hpp"
#include "src/app/checkpoint_options.hpp"
#include "src/app/cli.hpp"
#include "src/core/error.hpp"
#include "src/eval/eval_run.hpp"
#ifdef SQUALL_HAVE_ONNX
#include "src/export/onnx_export.hpp"
#endif

namespace squall::app {
namespace {

struct ExportArgs {
  CheckpointArgs from;
  std::string format = "onnx";
  std::string out;
  std::string data;
  int64_t batch = 0;
};

#ifdef SQUALL_HAVE_ONNX
// A float32 value as JSON text with the fewest digits that read back to the same float32
// ("0.1", not "0.10000000149011612"); null when it is not finite (JSON has no NaN).
std::string float_text(float v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(b, sizeof(b), "%.*g", digits, static_cast<double>(v));
    if (std::strtof(b, nullptr) == v) break;
  }
  return b;
}

std::string float_array(const std::vector<float>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + float_text(v[i]);
  return s + "]";
}

// The file's metadata_props (docs/inference.md, "Metadata"): what a caller must know to feed
// the graph and read its output, from the checkpoint. Lists are JSON arrays; numbers are
// float32 values as the checkpoint holds them.
std::vector<std::pair<std::string, std::string>> onnx_metadata(const checkpoint::ModelCheckpoint& m,
                                                               const eval::CheckpointGraph& cg) {
  using nlohmann::json;
  std::vector<std::pair<std::string, std::string>> out;
  const data::Normalization& n = m.normalization;
  out.emplace_back("squall_version", k_version);
  out.emplace_back("model", cg.model);
  out.emplace_back("checkpoint_step", std::to_string(cg.step));
  out.emplace_back("normalization_kind", n.kind);
  out.emplace_back("normalization_mean", float_array(n.mean));
  out.emplace_back("normalization_std", float_array(n.std));
  out.emplace_back("input_scale", float_text(n.input_scale));
  out.emplace_back("channel_names", json(m.channel_names).dump(-1, ' ', false, json::error_handler_t::replace));
  out.emplace_back("channel_units", json(m.channel_units).dump(-1, ' ', false, json::error_handler_t::replace));
  out.emplace_back("grid_rows", std::to_string(m.input.h()));
  out.emplace_back("grid_cols", std::to_string(m.input.w()));
  // A grid axis: its first and last coordinate and, when the steps are equal (to a thousandth
  // of a step: the checkpoint keeps the coordinates in float32), the spacing.
  auto axis = [&](const std::string& name, const std::vector<double>& v) {
    out.emplace_back(name + "_first", float_text(static_cast<float>(v.front())));
    out.emplace_back(name + "_last", float_text(static_cast<float>(v.back())));
    if (v.size() < 2) return;
    const double step = (v.back() - v.front()) / static_cast<double>(v.size() - 1);
    for (size_t i = 1; i < v.size(); ++i)
      if (std::abs((v[i] - v[i - 1]) - step) > 1e-3 * std::abs(step)) return;
    out.emplace_back(name + "_spacing", float_text(static_cast<float>(step)));
  };
  if (!m.lat.empty() && !m.lon.empty()) {
    axis("lat", m.lat);
    axis("lon", m.lon);
  }
  out.emplace_back("class_names", json(m.class_names).dump(-1, ' ', false, json::error_handler_t::replace));
  return out;
}
#endif

int run_export(Context& ctx, const ExportArgs& args) {
  args.from.check();
  if (args.format != "onnx") throw UsageError("export: unknown --format '" + args.format + "' (known: onnx)");
  if (args.batch < 0) throw UsageError("export: --batch must be 0 (dynamic) or positive");
#ifndef SQUALL_HAVE_ONNX
  (void)ctx;
  throw Error("export: this squall was built without ONNX export (libonnx-dev and libprotobuf-dev were not found "
              "at configure time; scripts/install-deps installs them)");
#else
  const mpi::Topology topo = mpi::Topology::create(mpi::resolve_ranks_per_node(ctx.global.ranks_per_node));
  const checkpoint::CheckpointModel ck = args.from.read(topo.world());
  if (topo.rank() != 0) return 0;  // one writer
  eval::EvalOptions options;
  options.data = args.data;
  const eval::CheckpointGraph cg = eval::checkpoint_graph(ck, options, args.batch > 0 ? args.batch : 1);
  exporting::OnnxOptions o;
  o.batch = args.batch;
  o.graph_name = cg.model;
  o.producer_version = k_version;
  const std::string norm = cg.normalization.empty()
                               ? "the run did not normalise its inputs"
                               : "normalise the input as the run did (data.normalization = " + cg.normalization +
                                     ", with the training data's statistics) before feeding it";
  o.metadata = onnx_metadata(ck.model, cg);
  o.doc = "squall " + cg.model + " from " + ck.name() + " (step " + std::to_string(cg.step) +
          "); evaluation mode; input NCHW float32: " + norm + "; logits before softmax";
  exporting::write_onnx(*cg.graph, cg.params, cg.state, args.out, o);
  const nn::Shape in = cg.graph->node_shape(nn::Graph::k_input), out = cg.graph->output_shape();
  auto dims = [&](const nn::Shape& s) {
    std::string t = "[" + (args.batch > 0 ? std::to_string(args.batch) : std::string("N"));
    for (int i = 1; i < s.rank; ++i) t += "," + std::to_string(s[i]);
    return t + "]";
  };
  std::cout << "export " << ck.name() << " (" << cg.model << ", step " << cg.step << ") to " << args.out
            << ": ONNX opset " << exporting::k_onnx_opset << ", input " << dims(in) << ", logits " << dims(out)
            << "; " << norm << "\n"
            << std::flush;
  return 0;
#endif
}

}  // namespace

void add_export_command(CLI::App& root, Context& ctx, Actions& actions) {
  CLI::App* sub = root.add_subcommand("export", "Export a checkpoint's model for inference (ONNX)");
  auto args = std::make_shared<ExportArgs>();
  add_checkpoint_options(*sub, args->from);
  sub->add_option("--format", args->format, "The file format (onnx)")->type_name("FORMAT")->capture_default_str();
  sub->add_option("--out", args->out, "The file to write (replaced atomically)")->type_name("FILE")->required();
  sub->add_option("--batch", args->batch, "A fixed batch size in the graph (0: dynamic, named N)")
      ->type_name("N")
      ->capture_default_str();
  sub->add_option("--data", args->data,
                  "The dataset that fixes the input size instead of the run's data.test (the checkpoint does not "
                  "record it)")
      ->type_name("PATH");
  sub->footer("Exit status: 0 written; 1 a failure at run time (an unreadable checkpoint, a layer with no ONNX "
              "counterpart, a file that cannot be written); 2 a usage error.");
  actions[sub] = [&ctx, args] { return run_export(ctx, *args); };
}

}  // namespace squall::app
