// `squall eval --checkpoint PATH | --run DIR [--data PATH] [--spatial ROWS,COLS] [--set section.key=value ...]
// [--json]`: a saved model on a test set (docs/training.md, "Evaluating a checkpoint"). Under
// mpirun the test samples are split over the ranks (or over groups of ranks that split each
// sample: --spatial, else the run's parallel.spatial) and summed, as training's evaluation does.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi/topology.hpp"
#include "src/app/checkpoint_options.hpp"
#include "src/app/cli.hpp"
#include "io/records/run_log.hpp"
#include "src/eval/eval_run.hpp"

namespace squall::app {
namespace {

using nlohmann::json;

struct EvalArgs {
  CheckpointArgs from;
  std::string data;
  std::vector<std::string> overrides;
  std::string spatial;  // --spatial as given
  bool json = false;
};

std::string fixed(double v, const char* format = "%.4f") {
  if (std::isnan(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof(b), format, v);
  return b;
}

json result_json(const checkpoint::CheckpointModel& ck, const eval::EvalResult& r) {
  json j{{"checkpoint", ck.folder.string()},
         {"model", r.model},
         {"step", r.step},
         {"data", r.data_description},
         {"data_path", r.data_path},
         {"samples", static_cast<int64_t>(r.part.samples)},
         {"test_loss", r.part.loss()},
         {"test_accuracy", r.part.cm.accuracy()},
         {"test_miou", r.part.cm.mean_iou()}};
  if (r.per_pixel_labels) j["test_iou_per_class"] = records::iou_per_class_json(r.part.cm);
  // The counts themselves (row: the label, column: the prediction): integers, so that two
  // evaluations (whole samples and split ones, any number of ranks) compare exactly.
  const auto counts = r.part.cm.counts();
  const int64_t k = r.part.cm.classes();
  json confusion = json::array();
  for (int64_t i = 0; i < k; ++i)
    confusion.push_back(json(std::vector<int64_t>(counts.begin() + i * k, counts.begin() + (i + 1) * k)));
  j["test_confusion"] = confusion;
  j["eval_s"] = r.eval_s;
  j["world_size"] = r.world_size;
  j["spatial"] = json::array({r.spatial.rows, r.spatial.cols});
  return j;
}

std::string result_text(const checkpoint::CheckpointModel& ck, const eval::EvalResult& r) {
  std::string text = "eval " + ck.name() + " (" + r.model + ", step " + std::to_string(r.step) + ") on " +
                     r.data_description + ": " + std::to_string(static_cast<int64_t>(r.part.samples)) +
                     " samples, loss " + fixed(r.part.loss()) + ", accuracy " + fixed(r.part.cm.accuracy()) +
                     ", mIoU " + fixed(r.part.cm.mean_iou()) + " (" + fixed(r.eval_s, "%.1f") + " s" +
                     (r.world_size > 1 ? ", " + std::to_string(r.world_size) + " ranks" : std::string()) +
                     (r.spatial.split() ? ", parallel.spatial " + r.spatial.str() : std::string()) + ")\n";
  if (r.per_pixel_labels) {  // segmentation: the IoU of each class, as training prints it
    const std::vector<double> per_class = r.part.cm.iou_per_class();
    std::string iou = "IoU per class: ";
    for (size_t k = 0; k < per_class.size(); ++k)
      iou += (k ? ", " : "") + (k < r.class_names.size() ? r.class_names[k] : "class " + std::to_string(k)) + " " +
             fixed(per_class[k]);
    text += iou + "\n";
  }
  return text;
}

int run_eval(Context& ctx, const EvalArgs& args) {
  const mpi::Topology topo = mpi::Topology::create(mpi::resolve_ranks_per_node(ctx.global.ranks_per_node));
  const checkpoint::CheckpointModel ck = args.from.read(topo.world());
  eval::EvalOptions options;
  options.overrides = args.overrides;
  options.data = args.data;
  options.spatial = spatial_option(args.spatial);
  const eval::EvalResult r = eval::evaluate_checkpoint(ck, options, topo);
  if (topo.rank() == 0) print_result(args.json, result_json(ck, r), result_text(ck, r), -1);
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& root, Context& ctx, Actions& actions) {
  CLI::App* sub = root.add_subcommand("eval", "Evaluate a checkpoint on a test set");
  auto args = std::make_shared<EvalArgs>();
  add_checkpoint_options(*sub, args->from, " (an unreadable one is named and the next older used)");
  sub->add_option("--data", args->data, "Evaluate on this dataset instead of the run's data.test")->type_name("PATH");
  add_spatial_option(*sub, args->spatial);
  sub->add_option("--set", args->overrides,
                  "Override a key of the run's config: --set section.key=value (repeatable; e.g. "
                  "data.test_samples, train.eval_batch_size, run.backend)")
      ->take_all()
      ->allow_extra_args(false);
  sub->add_flag("--json", args->json, "Print one JSON object instead of the summary line");
  sub->footer("Exit status: 0 done; 1 a failure at run time (an unreadable checkpoint); 2 a usage error (a flag, a "
              "missing checkpoint, data that does not fit the model, a split the number of ranks is not a multiple of).");
  actions[sub] = [&ctx, args] { return run_eval(ctx, *args); };
}

}  // namespace squall::app
