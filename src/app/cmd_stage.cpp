// `squall stage --from DIR --to LOCALDIR [--split train] [--sampling global|local] [--json]`:
// copies the files this node's ranks will read (and a stats.h5 beside them) to node-local
// storage, verified, before a job trains from there. The node's ranks split the files
// (file i of the node's list goes to local rank i % local_size). Files already at the
// destination with the same size and CRC-32 are skipped, so staging again is cheap.
//
// --to may hold "{node}", replaced by the node index: emulated nodes on one machine
// (--ranks-per-node) then get separate folders, e.g. --to /tmp/stage/node{node}. On a real
// cluster --to is the node-local path (e.g. /mnt/nvme/$USER/train).
//
// A failure on any rank (missing --from, an unreadable file, a full disk, a copy that does
// not verify) makes every rank exit 1 after one line from rank 0 naming the rank and the
// file: the ranks agree on the outcome (mpi::run_agreed) instead of aborting the job.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "io/input/sampler.hpp"
#include "io/input/stage.hpp"
#include "mpi/topology.hpp"
#include "src/app/cli.hpp"
#include "src/core/clock.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "io/input/open_dataset.hpp"

namespace squall::app {
namespace {

using nlohmann::json;

struct StageArgs {
  std::string from, to, split = "train", sampling = "global";
  bool json = false;
};

// This rank's share of the staging. Throws squall::Error naming the file that failed.
json stage_my_files(const StageArgs& a, const mpi::Topology& topo, const std::vector<int>& node_sizes) {
  // The files listed, nothing read.
  const auto source = input::open_dataset(a.from, a.split, {.normalize = true, .cache_mb = 0});
  const input::Sampling mode = input::k_sampling_modes.parse(a.sampling, "--sampling", "");
  const input::Sampler sampler(mode, source->file_offsets(), node_sizes, 0);
  const std::vector<std::string> files = input::files_to_stage(*source, sampler, topo.node());
  const std::string dest = input::expand_node_placeholder(a.to, topo.node());
  std::error_code ec;
  std::filesystem::create_directories(dest, ec);  // the node's ranks race here; the check below decides
  if (!std::filesystem::is_directory(dest))
    throw Error("cannot create the destination folder '" + dest + "'" + (ec ? ": " + ec.message() : ""));

  json done = json::array();
  for (size_t i = static_cast<size_t>(topo.local_rank()); i < files.size(); i += static_cast<size_t>(topo.local_size())) {
    const input::StagedFile f = input::stage_file(files[i], dest, topo.rank());
    done.push_back({{"node", topo.node()}, {"rank", topo.rank()}, {"file", f.destination},
                    {"action", f.copied ? "copied" : "skipped"}, {"bytes", f.bytes}});
  }
  return done;
}

int run_stage(Context& ctx, const StageArgs& a) {
  const auto topo = mpi::Topology::create(mpi::resolve_ranks_per_node(ctx.global.ranks_per_node));
  const mpi::Communicator& world = topo.world();
  const std::vector<int> node_of_rank = world.allgather(topo.node());
  const std::vector<int> node_sizes = input::node_sizes_from(node_of_rank);

  world.barrier();
  const Stopwatch timer;
  const int64_t start_ms = static_cast<int64_t>(system_seconds() * 1000.0);
  json mine;
  int64_t ns = 0;  // this rank's share, without the wait for the others
  run_share_agreed(world, "stage", [&] {
    mine = stage_my_files(a, topo, node_sizes);
    ns = static_cast<int64_t>(timer.seconds() * 1e9);
  });
  const double seconds = static_cast<double>(world.allreduce_max(ns)) * 1e-9;
  // Each node's first rank records the staging beside the node's files (input::StageRecord), once
  // every rank has done its share.
  int64_t my_bytes = 0;
  for (const json& f : mine) my_bytes += f["bytes"].get<int64_t>();
  const int64_t node_files = topo.node_comm().allreduce_sum(static_cast<int64_t>(mine.size()));
  const int64_t node_bytes = topo.node_comm().allreduce_sum(my_bytes);
  if (topo.local_rank() == 0) {
    try {
      input::StageRecord record;
      record.start_ms = start_ms;
      record.stop_ms = static_cast<int64_t>(system_seconds() * 1000.0);
      record.source = a.from;
      record.files = node_files;
      record.bytes = node_bytes;
      input::write_stage_record(input::expand_node_placeholder(a.to, topo.node()), record);
    } catch (const std::exception& e) {
      log::warn(std::string("stage: cannot write the stage record: ") + e.what());
    }
  }
  const std::vector<std::string> reports = world.gather_strings(mine.dump(), 0);
  if (topo.rank() != 0) return 0;

  json files = json::array();
  int64_t copied = 0, skipped = 0, bytes = 0;
  for (const std::string& s : reports) {
    for (json& f : json::parse(s)) {
      if (f["action"] == "copied") {
        ++copied;
        bytes += f["bytes"].get<int64_t>();
      } else {
        ++skipped;
      }
      files.push_back(std::move(f));
    }
  }
  std::stable_sort(files.begin(), files.end(), [](const json& x, const json& y) {
    return std::pair(x["node"].get<int>(), x["file"].get<std::string>()) <
           std::pair(y["node"].get<int>(), y["file"].get<std::string>());
  });
  const double gbps = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
  const json doc{{"files_copied", copied}, {"files_skipped", skipped}, {"bytes", bytes}, {"seconds", seconds},
                 {"GBps", gbps}, {"nodes", topo.nodes()}, {"sampling", a.sampling}, {"files", files}};
  std::string out;
  for (const json& f : files)
    out += "  node " + std::to_string(f["node"].get<int>()) + "  " + f["action"].get<std::string>() + "  " +
           f["file"].get<std::string>() + " (" + std::to_string(f["bytes"].get<int64_t>()) + " bytes)\n";
  char line[256];
  std::snprintf(line, sizeof(line),
                "staged for %d node(s): %lld file(s) copied, %lld skipped (already there, same checksum), "
                "%.3f GB in %.2f s, %.2f GB/s\n",
                topo.nodes(), static_cast<long long>(copied), static_cast<long long>(skipped),
                static_cast<double>(bytes) / 1e9, seconds, gbps);
  print_result(a.json, doc, out + line);
  return 0;
}

}  // namespace

void add_stage_command(CLI::App& root, Context& ctx, Actions& actions) {
  CLI::App* sub = root.add_subcommand(
      "stage", "Copy the files each node will read to node-local storage, verified (run under mpirun)");
  add_topology_options(*sub, ctx.global);
  auto args = std::make_shared<StageArgs>();
  sub->add_option("--from", args->from, "Dataset folder (squall shards or DeepCAM files)")->required();
  sub->add_option("--to", args->to,
                  "Node-local destination folder; \"{node}\" is replaced by the node index "
                  "(e.g. /tmp/stage/node{node} when nodes are emulated on one machine)")
      ->required();
  sub->add_option("--split", args->split, "Which shards: train or test (default train)");
  sub->add_option("--sampling", args->sampling,
                  "global: every node reads every file; local: each node only its own range (default global)")
      ->check(CLI::IsMember(input::k_sampling_modes.names()));
  sub->add_flag("--json", args->json, "Print one JSON object (rank 0)");
  actions[sub] = [&ctx, args] { return run_stage(ctx, *args); };
}

}  // namespace squall::app
