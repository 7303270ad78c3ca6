// Every subcommand (each in its own cmd_*.cpp) and the `data` and `bench` groups, added to the
// root in the order `squall --help` lists them.
#include "src/app/cli.hpp"

namespace squall::app {

void add_commands(CLI::App& root, Context& ctx, Actions& actions) {
  add_info_command(root, ctx, actions);
  add_train_command(root, ctx, actions);
  add_eval_command(root, ctx, actions);
  add_predict_command(root, ctx, actions);
  add_export_command(root, ctx, actions);
  add_stage_command(root, ctx, actions);
  add_report_command(root, ctx, actions);
  add_model_command(root, ctx, actions);

  CLI::App* data = root.add_subcommand("data", "Datasets: converters, generators and checks");
  data->require_subcommand(1);
  add_data_commands(*data, ctx, actions);
  add_climate_command(*data, ctx, actions);
  add_label_command(*data, ctx, actions);

  CLI::App* bench = root.add_subcommand("bench", "Benchmarks of squall's building blocks");
  bench->require_subcommand(1);
  add_bench_allreduce_command(*bench, ctx, actions);
  add_bench_loader_command(*bench, ctx, actions);
  add_bench_centre_command(*bench, ctx, actions);
}

}  // namespace squall::app
