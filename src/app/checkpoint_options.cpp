#include "src/app/checkpoint_options.hpp"

namespace squall::app {

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

}  // namespace squall::app
