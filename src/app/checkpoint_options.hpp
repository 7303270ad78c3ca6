#pragma once
// The `--checkpoint PATH | --run DIR` pair of the commands that read a trained model (eval,
// predict, export): exactly one of the two names the checkpoint the command reads.
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "io/checkpoint/named_weights.hpp"
#include "src/nn/spatial.hpp"

namespace squall::app {

struct CheckpointArgs {
  std::string command;     // the subcommand, named in the messages ("eval")
  std::string checkpoint;  // --checkpoint: a step-NNNNNNNN folder or its model.h5
  std::string run_dir;     // --run: a run dir, whose newest readable checkpoint is read

  // Throws CollectiveError (exit 2) naming the command unless exactly one of the two is given.
  void check() const;
  // Collective: check(), then the checkpoint read (an unreadable one of a run dir is named in
  // a warning and the next older read).
  checkpoint::CheckpointModel read(const mpi::Communicator& world) const;
};

// Adds --checkpoint and --run to `sub`, filling `args` (whose command becomes the subcommand's
// name); `run_note` ends the help of --run.
void add_checkpoint_options(CLI::App& sub, CheckpointArgs& args, const std::string& run_note = "");

// --spatial ROWS,COLS of eval and predict (docs/inference.md, "One sample across ranks"): the
// split to run with instead of the run's parallel.spatial. `text` holds it as given; CLI11
// refuses (exit 2) a value that is not two positive whole numbers.
void add_spatial_option(CLI::App& sub, std::string& text);
// The split `text` names; nothing when the flag was not given.
std::optional<nn::SpatialSplit> spatial_option(const std::string& text);

}  // namespace squall::app
