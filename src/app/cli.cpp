#include "src/app/cli.hpp"

#include <charconv>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mpi/agreement.hpp"
#include "mpi/runtime.hpp"
#include "squall/version.hpp"
#include "src/config/config.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/core/suggest.hpp"

namespace squall::app {
namespace {

const CLI::App* selected_leaf(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands())
    if (sub->parsed()) return selected_leaf(*sub);
  return &app;
}

// What parsing the command line came to on this rank: go on, stop with status 0 (--help,
// --version), or a usage error (status 2).
enum ParseOutcome : int { k_parsed = 0, k_done = 1, k_bad = 2 };

// CLI11's message (help, version or error) and its outcome. The message is printed later, by
// the rank that speaks for the job.
ParseOutcome parse_outcome(CLI::App& app, const CLI::ParseError& e, std::string& out, std::string& err) {
  // An option of one value given more than once: CLI11 says "--x: At Most 1 required but
  // received 2", which reads as if a value were missing.
  const std::string what = e.what();
  const std::string at_most = ": At Most 1 required but received ";
  if (const size_t at = what.find(at_most); dynamic_cast<const CLI::ArgumentMismatch*>(&e) && at != std::string::npos) {
    const std::string option = what.substr(0, at), times = what.substr(at + at_most.size());
    out.clear();
    err = "squall: error: " + option + " was given " + times + " times; it takes one value: give it once\n";
    return k_bad;
  }
  std::ostringstream o, r;
  const int code = app.exit(e, o, r);
  out = o.str();
  err = r.str();
  return code == 0 ? k_done : k_bad;
}

// A word where a command must stand that names none (`squall trian`, `squall data labl`): the
// message naming it, the nearest command and the list; "" when the words before the first
// flag name commands only. CLI11 would report such a word as an argument it did not expect,
// which does not tell a user that a command was mistyped. A flag ends the scan: what follows
// it may be its value, which CLI11 judges.
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  std::string path;  // the commands named so far: "data"
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return "";
    const auto subs = at->get_subcommands(std::function<bool(const CLI::App*)>{});
    const bool takes_words = !at->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty();
    if (subs.empty() || takes_words) return "";  // a command's own arguments
    std::vector<std::string> names;
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : subs) {
      names.push_back(sub->get_name());
      if (sub->check_name(word)) next = sub;
    }
    if (next == nullptr) {
      const std::string prefix = path.empty() ? "" : path + " ";  // "data "
      const std::string group = app.get_name() + (path.empty() ? "" : " " + path);  // "squall data"
      const std::string near = nearest(word, names);
      return "unknown command '" + prefix + word + "'" +
             (near.empty() ? std::string() : "; did you mean '" + prefix + near + "'?") + "\n" + group +
             " commands: " + join_names(names, ", ") + " (" + group + " --help says more)";
    }
    path += (path.empty() ? "" : " ") + next->get_name();
    at = next;
  }
  return "";
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

void print_result(bool as_json, const nlohmann::json& doc, const std::string& text, int indent) {
  if (as_json)
    std::cout << doc.dump(indent) << "\n" << std::flush;
  else
    std::cout << text << std::flush;
}

config::Config load_command_config(const std::string& path, const std::vector<std::string>& overrides) {
  try {
    return config::load_config(path, overrides);
  } catch (const UsageError&) {
    throw;
  } catch (const CollectiveError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

void run_share_agreed(const mpi::Communicator& world, const std::string& command, const std::function<void()>& work) {
  // Each rank holds other files, so the message names the rank even when every rank failed.
  mpi::run_agreed(world, work, [&](int first, int failed, int, const std::string& message) {
    return command + " failed on rank " + std::to_string(first) + ": " + message +
           (failed > 1 ? " (" + std::to_string(failed) + " ranks failed)" : std::string());
  });
}

int run(int argc, char** argv, mpi::Runtime& runtime) {
  CLI::App app{"squall: trains deep networks on supercomputers (CPU reference backend, CUDA, MPI)",
               "squall"};
  app.set_version_flag("--version", std::string("squall ") + k_version);
  app.require_subcommand(0, 1);  // "none given" is reported below, after unknown flags
  app.footer("Launch with `mpirun -np N squall ...`; a plain `squall ...` is a job of one rank.");

  Context ctx{runtime, {}};

  Actions actions;
  add_commands(app, ctx, actions);

  // Every rank parses; they agree before any subcommand runs, so that a flag that fails on
  // some ranks only (a config file missing on one node) ends every rank, with one message.
  ParseOutcome outcome = k_parsed;
  std::string out, err;
  if (const std::string unknown = unknown_command(app, argc, argv); !unknown.empty()) {
    outcome = k_bad;
    err = "squall: error: " + unknown + "\n";
  } else {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      outcome = parse_outcome(app, e, out, err);
    }
  }
  if (runtime.size() > 1) {
    const auto agreed = static_cast<ParseOutcome>(runtime.max_over_ranks(outcome));
    if (agreed != k_parsed) {
      const int speaker = runtime.first_rank_with(outcome == agreed);
      if (runtime.rank() == speaker) {
        std::cout << out << std::flush;
        if (!err.empty() && speaker != 0) err = "squall: rank " + std::to_string(speaker) + " of " +
                                                std::to_string(runtime.size()) + ": " + err;
        std::cerr << err << std::flush;
      }
      return agreed == k_done ? 0 : 2;
    }
  } else if (outcome != k_parsed) {
    std::cout << out << std::flush;
    std::cerr << err << std::flush;
    return outcome == k_done ? 0 : 2;
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
  } catch (const CollectiveError& e) {
    // Every rank threw it alike (src/core/error.hpp): one message, every rank exits.
    if (runtime.rank() == 0) std::cerr << "squall: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const UsageError& e) {
    if (runtime.size() == 1) {
      std::cerr << "squall: error: " << e.what() << "\n";
      return k_exit_usage;
    }
    // Under MPI this rank cannot know whether the others saw it too: it ends the job rather
    // than leave them waiting in a collective.
    log::error(e.what());
    mpi::abort_job(k_exit_usage);
  } catch (const std::exception& e) {
    log::error(e.what());
    if (runtime.size() > 1) mpi::abort_job(k_exit_failure);
    return k_exit_failure;
  }
}

}  // namespace squall::app
