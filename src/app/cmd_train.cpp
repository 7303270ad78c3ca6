// `squall train --config FILE [--set section.key=value ...] [--resume auto|PATH] [--overwrite]`:
// one training run (docs/training.md).
#include <memory>
#include <string>
#include <vector>

#include "mpi/agreement.hpp"
#include "mpi/comm.hpp"
#include "mpi/runtime.hpp"
#include "mpi/topology.hpp"
#include "src/app/cli.hpp"
#include "src/core/error.hpp"
#include "src/config/config.hpp"
#include "src/train/run_dir.hpp"
#include "src/train/trainer.hpp"

namespace squall::app {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool timeline = false;
  std::string resume;
  bool overwrite = false;
};

// Every rank loads the config; they must all succeed and all hold the same one (a file that
// differs between nodes would make the ranks train different jobs, and hang in the first sum
// whose size differs).
config::Config load_agreed_config(const TrainArgs& args) {
  const mpi::Communicator world = mpi::Communicator::world();
  config::Config cfg;
  mpi::run_agreed(world, [&] {
    cfg = load_command_config(args.config, args.overrides);
  });
  if (world.size() == 1) return cfg;
  const std::string mine = config::to_toml(cfg);
  const std::string root = world.broadcast_string(mine);
  mpi::run_agreed(world, [&] {
    if (mine == root) return;
    config::Config rank0;
    try {
      rank0 = config::parse_config(root, "rank 0's config");
    } catch (const Error& e) {
      throw UsageError(std::string("the config differs from rank 0's: ") + e.what());
    }
    std::string list;
    for (const auto& d : train::config_differences(rank0, cfg)) list += (list.empty() ? "" : "; ") + d;
    throw UsageError((args.config.empty() ? std::string("the config") : args.config) +
                     " differs from rank 0's (rank 0 -> this rank): " + list);
  });
  return cfg;
}

int run_train(Context& ctx, const TrainArgs& args) {
  const config::Config cfg = load_agreed_config(args);
  train::RunOptions options;
  options.ranks_per_node = mpi::resolve_ranks_per_node(ctx.global.ranks_per_node);
  options.stall_warn_s = ctx.global.stall_warn_s;
  options.stall_abort_s = ctx.global.stall_abort_s;
  options.timeline = args.timeline;
  options.resume = args.resume;
  options.overwrite = args.overwrite;
  const train::TrainResult r = train::run_training(cfg, args.config.empty() ? "(defaults)" : args.config, options);
  return r.stopped ? k_exit_requeue : 0;
}

}  // namespace

void add_train_command(CLI::App& root, Context& ctx, Actions& actions) {
  CLI::App* sub = root.add_subcommand("train", "Train a model from a TOML config");
  auto args = std::make_shared<TrainArgs>();
  sub->add_option("-c,--config", args->config, "TOML run config (see configs/)")->check(CLI::ExistingFile);
  sub->add_option("--set", args->overrides, "Override a config key: --set section.key=value (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  sub->add_flag("--timeline", args->timeline,
                 "Write <run dir>/timeline.json: a Chrome trace of every rank's phases (open it in Perfetto)");
  sub->add_option("--resume", args->resume,
                  "Continue from a checkpoint: auto (the newest usable one in <run dir>/checkpoints; a fresh start "
                  "when there is none) or the path of one (a step-N folder or its model.h5)")
      ->type_name("auto|PATH");
  sub->add_flag("--overwrite", args->overwrite,
                "Replace the outputs of an earlier run in run.dir (metrics, summary, checkpoints) instead of refusing");
  sub->footer("Exit status: 0 done; 1 a failure at run time; 2 a usage error; " + std::to_string(k_exit_requeue) +
              " stopped by SIGTERM or SIGUSR1 after writing a checkpoint (requeue with --resume auto).");
  add_topology_options(*sub, ctx.global);
  add_stall_options(*sub, ctx.global);
  actions[sub] = [&ctx, args] { return run_train(ctx, *args); };
}

}  // namespace squall::app
