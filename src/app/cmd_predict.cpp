// `squall predict --checkpoint PATH | --run DIR --data PATH... --out DIR [--format nc|h5]
// [--probabilities] [--png] [--any-grid] [--spatial ROWS,COLS] [--set section.key=value ...]`: a trained model applied to new files, one mask file
// per input (docs/inference.md). Under mpirun the files are split over the ranks, or over groups of
// ranks that split each sample ([--spatial ROWS,COLS], else the run's parallel.spatial).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mpi/topology.hpp"
#include "src/app/checkpoint_options.hpp"
#include "src/app/cli.hpp"
#include "src/eval/predict.hpp"

namespace squall::app {
namespace {

struct PredictArgs {
  CheckpointArgs from;
  eval::PredictOptions options;
  std::string spatial;  // --spatial as given
};

// "data-000640.h5 -> masks/data-000640-mask.h5: 1 time step; background 97.1%,
// tropical cyclone 1.2% (3 regions), atmospheric river 1.7% (2 regions)".
std::string file_line(const eval::PredictedFile& f) {
  const std::vector<std::string>& names = f.class_names;
  int64_t all = 0;
  for (int64_t p : f.pixels) all += p;
  std::string line = f.input + " -> " + f.output + ": " + std::to_string(f.samples) + " time step" +
                     (f.samples == 1 ? "" : "s") + ";";
  for (size_t c = 0; c < f.pixels.size(); ++c) {
    char pct[32];
    std::snprintf(pct, sizeof(pct), "%.1f%%", all > 0 ? 100.0 * static_cast<double>(f.pixels[c]) / static_cast<double>(all) : 0.0);
    line += (c ? ", " : " ") + (c < names.size() ? names[c] : "class " + std::to_string(c)) + " " + pct;
    if (c > 0) line += " (" + std::to_string(f.regions[c]) + (f.regions[c] == 1 ? " region)" : " regions)");
  }
  return line;
}

int run_predict(Context& ctx, const PredictArgs& args) {
  const mpi::Topology topo = mpi::Topology::create(mpi::resolve_ranks_per_node(ctx.global.ranks_per_node));
  const checkpoint::CheckpointModel ck = args.from.read(topo.world());
  eval::PredictOptions options = args.options;
  options.spatial = spatial_option(args.spatial);
  const eval::Predictions mine = eval::predict_files(ck, options, topo);
  std::string text;
  int64_t files = 0;
  for (const auto& f : mine.files) {
    for (const std::string& note : f.notes) text += "predict " + note + "\n";
    text += "predict " + file_line(f) + "\n";
    ++files;
  }
  const std::vector<std::string> all = topo.world().gather_strings(text);
  const int64_t total = topo.world().allreduce_sum(files);
  const int64_t samples = topo.world().allreduce_sum(mine.samples);
  const int64_t warnings = topo.world().allreduce_sum(mine.warnings);
  double seconds = mine.seconds;
  topo.world().allreduce_max(std::span<double>(&seconds, 1));
  if (topo.rank() == 0) {
    for (const std::string& t : all) std::cout << t;
    char rate[96];
    std::snprintf(rate, sizeof(rate), " in %.2f s (%.1f per second)", seconds,
                  seconds > 0 ? static_cast<double>(samples) / seconds : 0.0);
    std::cout << "predict " << ck.name() << ": " << total << " file" << (total == 1 ? "" : "s") << ", " << samples
              << " time step" << (samples == 1 ? "" : "s") << rate << ", masks in "
              << std::filesystem::path(args.options.out).string() << "; "
              << (warnings == 0 ? std::string("no warnings")
                                : std::to_string(warnings) + " warning" + (warnings == 1 ? "" : "s") + " (on stderr)")
              << "\n"
              << std::flush;
  }
  return 0;
}

}  // namespace

void add_predict_command(CLI::App& root, Context& ctx, Actions& actions) {
  CLI::App* sub = root.add_subcommand("predict", "Apply a checkpoint's model to new files and write their masks");
  auto args = std::make_shared<PredictArgs>();
  add_checkpoint_options(*sub, args->from);
  sub->add_option("--data", args->options.data, "Input files, or folders of them (labels not needed)")
      ->type_name("PATH")
      ->required()
      ->take_all();
  sub->add_option("--out", args->options.out,
                  "The folder for the masks (made when missing; may be the input folder, whose masks are not read)")
      ->type_name("DIR")
      ->required();
  sub->add_option("--format", args->options.format,
                  "Mask file format: nc (CF-conventions netCDF, the default) or h5")
      ->type_name("FORMAT");
  sub->add_flag("--probabilities", args->options.probabilities, "Also write the softmax of every class per pixel");
  sub->add_flag("--png", args->options.png, "Also write a picture per time step: its first channel and its mask (STEM-mask.png, or STEM-mask-NNNN.png for inputs of several steps)");
  sub->add_flag("--any-grid", args->options.any_grid,
                "Predict on files whose grid spacing differs from the training grid's (by more than 5%), with a "
                "warning each, instead of refusing them");
  add_spatial_option(*sub, args->spatial);
  sub->add_option("--set", args->options.overrides,
                  "Override a key of the run's config: --set section.key=value (repeatable; e.g. "
                  "data.netcdf_variables, run.backend)")
      ->take_all()
      ->allow_extra_args(false);
  sub->footer("Exit status: 0 done; 1 a failure at run time (an unreadable file); 2 a usage error (a flag, a missing "
              "checkpoint or input, a classifier's checkpoint, files that do not fit the model, a grid of another spacing than "
              "training's without --any-grid, a split the number of ranks is not a multiple of).");
  actions[sub] = [&ctx, args] { return run_predict(ctx, *args); };
}

}  // namespace squall::app
