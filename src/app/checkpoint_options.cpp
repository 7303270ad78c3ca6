#include "src/app/checkpoint_options.hpp"

#include <cstdio>

namespace squall::app {
namespace {

// "2,1" -> [2, 1]; nothing for anything else (a missing or extra number, zero, a sign).
std::optional<nn::SpatialSplit> parse_spatial(const std::string& text) {
  long long rows = 0, cols = 0;
  int end = 0;
  if (std::sscanf(text.c_str(), "%lld,%lld%n", &rows, &cols, &end) != 2 || end != static_cast<int>(text.size()) ||
      text.find_first_of("+- ") != std::string::npos || rows < 1 || cols < 1 || rows * cols > 1'000'000)
    return std::nullopt;
  return nn::SpatialSplit{rows, cols};
}

}  // namespace

void CheckpointArgs::check() const { checkpoint::check_checkpoint_args(command, checkpoint, run_dir); }

checkpoint::CheckpointModel CheckpointArgs::read(const mpi::Communicator& world) const {
  return checkpoint::read_checkpoint_args(command, checkpoint, run_dir, world);
}

void add_checkpoint_options(CLI::App& sub, CheckpointArgs& args, const std::string& run_note) {
  args.command = sub.get_name();
  // Neither is required here and they do not exclude each other in CLI11's terms: check()
  // refuses neither and both at run time, with the command's own message.
  sub.add_option("--checkpoint", args.checkpoint, "The checkpoint: a step-NNNNNNNN folder or its model.h5")
      ->type_name("PATH");
  sub.add_option("--run", args.run_dir, "A run dir: its newest readable checkpoint" + run_note)->type_name("DIR");
}

void add_spatial_option(CLI::App& sub, std::string& text) {
  sub.add_option("--spatial", text,
                 "Split each sample over ROWS x COLS consecutive ranks, as parallel.spatial does in training "
                 "(default: the run's parallel.spatial; 1,1 for whole samples on every rank). The ranks must be a "
                 "multiple of ROWS x COLS")
      ->type_name("ROWS,COLS")
      ->check([](const std::string& v) {
        return parse_spatial(v) ? std::string()
                                : "--spatial " + v + ": not ROWS,COLS (two positive whole numbers, e.g. 2,1)";
      });
}

std::optional<nn::SpatialSplit> spatial_option(const std::string& text) {
  if (text.empty()) return std::nullopt;
  return parse_spatial(text);
}

}  // namespace squall::app
