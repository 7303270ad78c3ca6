// `squall train --config FILE [--set section.key=value ...]`: one training run.
#include <memory>
#include <string>
#include <vector>

#include "mpi/runtime.hpp"
#include "src/app/cli.hpp"
#include "src/core/error.hpp"
#include "src/train/config.hpp"
#include "src/train/trainer.hpp"

namespace squall::app {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
};

int run_train(Context& ctx, const TrainArgs& args) {
  if (ctx.runtime.size() > 1)
    throw UsageError("train: this build trains on one rank; multi-rank training (learners, model averaging, the "
                     "hierarchical allreduce) is not implemented yet");
  train::Config cfg;
  try {
    cfg = train::load_config(args.config, args.overrides);
  } catch (const Error& e) {
    throw UsageError(e.what());  // a bad config is the user's to fix: exit 2
  }
  train::run_training(cfg, args.config.empty() ? "(defaults)" : args.config);
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
  add_topology_options(*sub, ctx.global);
  actions[sub] = [&ctx, args] { return run_train(ctx, *args); };
}

}  // namespace squall::app
