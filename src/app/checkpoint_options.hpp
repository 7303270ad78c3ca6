#pragma once
// The `--checkpoint PATH | --run DIR` pair of the commands that read a trained model (eval,
// predict, export): exactly one of the two names the checkpoint the command reads.
#include <string>

#include <CLI/CLI.hpp>

#include "io/checkpoint/named_weights.hpp"

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

}  // namespace squall::app
