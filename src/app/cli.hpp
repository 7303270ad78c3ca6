#pragma once
// The command line: builds the CLI11 tree, parses it identically on every rank, runs the
// chosen subcommand and turns failures into exit codes:
//   0 success, 1 runtime failure, 2 usage error (bad flag or value, named in the message).
// A failure that only some ranks see cannot simply return (the others would wait forever
// in the next collective): with more than one rank it takes the job down with MPI_Abort
// after printing one line naming the rank and the reason.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

namespace squall::mpi {
class Communicator;
class Runtime;
}
namespace squall::config {
struct Config;
}

namespace squall::app {

// Options shared by the subcommands that run collectives (info, train, bench, stage).
struct GlobalOptions {
  int ranks_per_node = -1;  // -1: not given (fall back to SQUALL_RANKS_PER_NODE, then 0)
  double stall_warn_s = 60;     // a collective waited this long: rank 0 names the missing ranks
  double stall_abort_s = 1800;  // ... and after this long the job ends with that message
};

struct Context {
  mpi::Runtime& runtime;
  GlobalOptions global;
};

using Action = std::function<int()>;
using Actions = std::map<const CLI::App*, Action>;

// Adds --ranks-per-node to a subcommand.
void add_topology_options(CLI::App& sub, GlobalOptions& global);
// Adds --stall-warn SECONDS and --stall-abort SECONDS (collective watchdog) to a subcommand.
void add_stall_options(CLI::App& sub, GlobalOptions& global);

// A command's result on standard output, flushed: under --json (`as_json`) the JSON document,
// indented by `indent` (-1: on one line), else the text.
void print_result(bool as_json, const nlohmann::json& doc, const std::string& text, int indent = 2);

// Runs `work`, this rank's share of a command that splits its files over the ranks, under
// mpi::run_agreed: when it throws on any rank, every rank throws the same CollectiveError,
// "<command> failed on rank R: <that rank's message> (N ranks failed)" from the lowest rank
// that failed (the count when more than one did), which the top level prints once.
void run_share_agreed(const mpi::Communicator& world, const std::string& command, const std::function<void()>& work);

// config::load_config for a command's --config and --set: a config that does not load is the
// user's to fix, so its error becomes a UsageError (exit 2); UsageErrors and CollectiveErrors
// pass as they are.
config::Config load_command_config(const std::string& path, const std::vector<std::string>& overrides);

// Adds every subcommand and command group to the root, in the order `squall --help` lists them
// (commands.cpp).
void add_commands(CLI::App& root, Context& ctx, Actions& actions);

void add_info_command(CLI::App& root, Context& ctx, Actions& actions);
void add_train_command(CLI::App& root, Context& ctx, Actions& actions);
// `data fashion-mnist`, `data deepcam`, `data inspect`, `data stats` (cmd_data.cpp) under the `data` group.
void add_data_commands(CLI::App& data, Context& ctx, Actions& actions);
// `data climate` (cmd_climate.cpp): synthetic climate samples, under the `data` group.
void add_climate_command(CLI::App& data, Context& ctx, Actions& actions);
// `data label` (cmd_label.cpp) under the `data` group.
void add_label_command(CLI::App& data, Context& ctx, Actions& actions);
// `eval` (cmd_eval.cpp).
void add_eval_command(CLI::App& root, Context& ctx, Actions& actions);
// `squall predict` (cmd_predict.cpp).
void add_predict_command(CLI::App& root, Context& ctx, Actions& actions);
// `export` (cmd_export.cpp).
void add_export_command(CLI::App& root, Context& ctx, Actions& actions);
// `stage` (cmd_stage.cpp).
void add_stage_command(CLI::App& root, Context& ctx, Actions& actions);
// `report` (cmd_report.cpp).
void add_report_command(CLI::App& root, Context& ctx, Actions& actions);
// `bench loader` (cmd_bench_loader.cpp) under the `bench` group.
void add_bench_loader_command(CLI::App& bench, Context& ctx, Actions& actions);
// `bench allreduce` (cmd_bench_allreduce.cpp) under the `bench` group.
void add_bench_allreduce_command(CLI::App& bench, Context& ctx, Actions& actions);
// `bench centre` (cmd_bench_centre.cpp): the asynchronous centre, threads against MPI windows.
void add_bench_centre_command(CLI::App& bench, Context& ctx, Actions& actions);
// `model` (cmd_model.cpp): the performance model of src/perf/perf_model.hpp.
void add_model_command(CLI::App& root, Context& ctx, Actions& actions);

int run(int argc, char** argv, mpi::Runtime& runtime);

}  // namespace squall::app
