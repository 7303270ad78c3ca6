#include "src/app/cli.hpp"

#include <charconv>
#include <iostream>
#include <sstream>

#include "mpi/runtime.hpp"
#include "squall/version.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::app {
namespace {

const CLI::App* selected_leaf(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands())
    if (sub->parsed()) return selected_leaf(*sub);
  return &app;
}

// Prints CLI11's message (help, version or error) on rank 0 and maps it to an exit code.
int report_parse_outcome(CLI::App& app, const CLI::ParseError& e, int rank) {
  std::ostringstream out, err;
  const int code = app.exit(e, out, err);
  if (rank == 0) {
    std::cout << out.str() << std::flush;
    std::cerr << err.str() << std::flush;
  }
  return code == 0 ? 0 : 2;
}

}  // namespace

void add_topology_options(CLI::App& sub, GlobalOptions& global) {
  const CLI::Validator non_negative(
      [](std::string& value) -> std::string {
        int k = -1;
        const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), k);
        if (ec != std::errc() || ptr != value.data() + value.size() || k < 0)
          return "must be an integer >= 0 (0 keeps the physical nodes), got '" + value + "'";
        return {};
      },
      "K>=0");
  sub.add_option("--ranks-per-node", global.ranks_per_node,
                 "Emulate nodes of K ranks on one machine (default: SQUALL_RANKS_PER_NODE, else "
                 "the physical nodes)")
      ->check(non_negative);
}

void add_stall_options(CLI::App& sub, GlobalOptions& global) {
  sub.add_option("--stall-warn", global.stall_warn_s,
                 "Seconds a collective may wait before rank 0 names the ranks that have not joined it")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--stall-abort", global.stall_abort_s,
                 "Seconds a collective may wait before the job ends with the names of the missing ranks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

int run(int argc, char** argv, mpi::Runtime& runtime) {
  CLI::App app{"squall: trains deep networks on supercomputers (CPU reference backend, CUDA, MPI)",
               "squall"};
  app.set_version_flag("--version", std::string("squall ") + k_version);
  app.require_subcommand(0, 1);  // "none given" is reported below, after unknown flags
  app.footer("Launch with `mpirun -np N squall ...`; a plain `squall ...` is a job of one rank.");

  Context ctx{runtime, {}};

  Actions actions;
  add_info_command(app, ctx, actions);
  add_train_command(app, ctx, actions);
  add_stub_commands(app, ctx, actions);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return report_parse_outcome(app, e, runtime.rank());
  }

  if (app.get_subcommands().empty()) {
    if (runtime.rank() == 0) std::cerr << app.help() << "squall: error: a subcommand is required\n";
    return 2;
  }
  const auto it = actions.find(selected_leaf(app));
  if (it == actions.end()) {
    if (runtime.rank() == 0) std::cerr << selected_leaf(app)->help();
    return 2;  // a command group (e.g. `squall data`) without its subcommand
  }
  try {
    return it->second();
  } catch (const UsageError& e) {
    // Usage errors are found by every rank alike (same flags, same environment).
    if (runtime.rank() == 0) std::cerr << "squall: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    log::error(e.what());
    if (runtime.size() > 1) mpi::abort_job(1);
    return 1;
  }
}

}  // namespace squall::app
