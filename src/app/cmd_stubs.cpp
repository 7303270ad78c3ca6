// Subcommands named in the design whose work later issues add. Each says so and exits 1:
// no fake output that a script could mistake for a result.
#include <string>

#include "src/app/cli.hpp"
#include "src/core/log.hpp"
#include "src/core/error.hpp"

namespace squall::app {
namespace {

void add_stub(CLI::App& parent, const std::string& name, const std::string& what, Actions& actions) {
  CLI::App* sub = parent.add_subcommand(name, what + " (not implemented yet)");
  sub->allow_extras();  // take any arguments: the answer is the same
  const std::string full = parent.get_parent() ? parent.get_name() + " " + name : name;
  actions[sub] = [full] {
    if (process_rank() <= 0) log::error("`squall " + full + "` is not implemented yet");
    return 1;
  };
}

}  // namespace

void add_stub_commands(CLI::App& root, Context& ctx, Actions& actions) {
  add_eval_command(root, ctx, actions);
  add_stage_command(root, ctx, actions);
  add_stub(root, "report", "Summarise run directories and scaling studies", actions);
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
}

}  // namespace squall::app
