// `squall train --config FILE [--set section.key=value ...]`: one training run.
#include <memory>
#include <string>
#include <vector>

#include "mpi/runtime.hpp"
#include "mpi/topology.hpp"
#include "src/app/cli.hpp"
#include "src/core/error.hpp"
#include "src/train/config.hpp"
#include "src/train/trainer.hpp"

namespace squall::app {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool timeline = false;
};

int run_train(Context& ctx, const TrainArgs& args) {  train::Config cfg;
  try {
    cfg = train::load_config(args.config, args.overrides);
  } catch (const Error& e) {
    throw UsageError(e.what());  // a bad config is the user's to fix: exit 2
  }
  train::RunOptions options;
  options.ranks_per_node = mpi::resolve_ranks_per_node(ctx.global.ranks_per_node);
  options.stall_warn_s = ctx.global.stall_warn_s;
  options.stall_abort_s = ctx.global.stall_abort_s;
  options.timeline = args.timeline;
  train::run_training(cfg, args.config.empty() ? "(defaults)" : args.config, options);
  return 0;
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
  add_topology_options(*sub, ctx.global);
  add_stall_options(*sub, ctx.global);
  actions[sub] = [&ctx, args] { return run_train(ctx, *args); };
}

}  // namespace squall::app
