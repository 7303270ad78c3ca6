// `squall info [--json]`: who runs where. One line per rank (rank, host, node, local rank,
// devices) and, from rank 0, what this binary was built with.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "io/formats/h5_info.hpp"
#include "mpi/device_allreduce.hpp"
#include "mpi/runtime.hpp"
#include "mpi/topology.hpp"
#include "squall/version.hpp"
#include "src/app/cli.hpp"
#include "src/core/cuda_probe.hpp"
#include "src/cpu/cpu_info.hpp"

namespace squall::app {
namespace {

using nlohmann::json;

json build_json(const CudaProbe& cuda) {
  return json{
      {"version", k_version},
      {"build_type", k_build_type},
      {"compiler", k_compiler},
      {"backends", cuda.built ? json::array({"cpu", "cuda"}) : json::array({"cpu"})},
      {"cuda", cuda.built},
      {"cuda_version", cuda.built ? json(cuda.runtime_version) : json(nullptr)},
      {"cuda_driver", cuda.driver_version.empty() ? json(nullptr) : json(cuda.driver_version)},
      {"cudnn_version", cuda.built ? json(cuda.cudnn_version) : json(nullptr)},
      {"nccl_version", mpi::nccl_version().empty() ? json(nullptr) : json(mpi::nccl_version())},
      {"mpi_library", mpi::library_version()},
      {"mpi_version", mpi::standard_version()},
      {"hdf5_version", formats::hdf5_version()},
      {"hdf5_parallel", formats::hdf5_parallel()},
      {"cpu_dnn", cpu::dnn_library()},
      {"cpu_isa", cpu::dnn_isa()},
      {"cpu_bf16", cpu::dnn_has_bf16()},
      {"cpu_bf16_path", cpu::dnn_bf16_path()},
      {"cpu_isa_cap", cpu::dnn_isa_cap().empty() ? json(nullptr) : json(cpu::dnn_isa_cap())},
  };
}

std::string device_text(const json& devices) {
  if (devices.empty()) return "none (cpu backend)";
  std::string s;
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? ", " : "") + devices[i].get<std::string>();
  return s;
}

std::string text_of(const json& doc) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "squall %s: %d rank(s) on %d node(s)%s\n",
                doc["build"]["version"].get<std::string>().c_str(), doc["world_size"].get<int>(),
                doc["nodes"].get<int>(),
                doc["ranks_per_node"].get<int>() > 0
                    ? (" (emulated, " + std::to_string(doc["ranks_per_node"].get<int>()) + " ranks per node)").c_str()
                    : "");
  out += line;
  for (const json& r : doc["ranks"]) {
    std::snprintf(line, sizeof(line), "  rank %-4d host %-20s node %-4d local_rank %-3d cpus %-3d devices %s\n",
                  r["rank"].get<int>(), r["host"].get<std::string>().c_str(), r["node"].get<int>(),
                  r["local_rank"].get<int>(), r["cpus"].get<int>(), device_text(r["devices"]).c_str());
    out += line;
  }
  const json& b = doc["build"];
  out += "build: " + b["build_type"].get<std::string>() + ", " + b["compiler"].get<std::string>() + "\n";
  out += "  cpu backend: " + b["cpu_dnn"].get<std::string>() + ", ISA " + b["cpu_isa"].get<std::string>() +
         (b["cpu_isa_cap"].is_null() ? "" : " (capped by ONEDNN_MAX_CPU_ISA=" + b["cpu_isa_cap"].get<std::string>() + ")") +
         (b["cpu_bf16"].get<bool>() ? " (bf16 in hardware)" : " (no bf16 arithmetic: train.precision = bf16 needs "
                                                              "train.cpu_precision = reference)") + "\n";
  out += "  cpu bf16 path: " + b["cpu_bf16_path"].get<std::string>() +
         (b["cpu_bf16_path"].get<std::string>() == "native"
              ? " (convolutions on oneDNN's bf16 primitives; train.cpu_precision = reference for the emulation)"
              : " (f32 arithmetic rounded to bf16 after every operation)") + "\n";
  if (b["cuda"].get<bool>()) {
    out += "  cuda backend: CUDA " + b["cuda_version"].get<std::string>() + ", cuDNN " +
           b["cudnn_version"].get<std::string>() + ", NCCL " + b["nccl_version"].get<std::string>() +
           ", driver " + (b["cuda_driver"].is_null() ? "none" : b["cuda_driver"].get<std::string>()) + "\n";
  } else {
    out += "  cuda backend: not built\n";
  }
  out += "  mpi: " + b["mpi_library"].get<std::string>() + " (MPI " + b["mpi_version"].get<std::string>() + ")\n";
  out += "  hdf5: " + b["hdf5_version"].get<std::string>() +
         (b["hdf5_parallel"].get<bool>() ? " (parallel)" : " (serial)") + "\n";
  return out;
}

int run_info(Context& ctx, bool as_json) {
  const auto topo = mpi::Topology::create(mpi::resolve_ranks_per_node(ctx.global.ranks_per_node));
  const CudaProbe cuda = probe_cuda();

  json mine{{"rank", topo.rank()},         {"host", topo.host()},
            {"node", topo.node()},         {"local_rank", topo.local_rank()},
            {"local_size", topo.local_size()}, {"cpus", cpu::hardware_threads()},
            {"devices", cuda.devices}};
  if (!cuda.status.empty() && cuda.built) mine["device_status"] = cuda.status;
  const auto all = topo.world().gather_strings(mine.dump(), 0);
  if (topo.rank() != 0) return 0;

  json doc{{"world_size", topo.world_size()},
           {"nodes", topo.nodes()},
           {"ranks_per_node", topo.ranks_per_node()},
           {"ranks", json::array()},
           {"build", build_json(cuda)}};
  for (const std::string& s : all) doc["ranks"].push_back(json::parse(s));
  print_result(as_json, doc, text_of(doc));
  return 0;
}

}  // namespace

void add_info_command(CLI::App& root, Context& ctx, Actions& actions) {
  CLI::App* sub = root.add_subcommand("info", "Show the ranks, nodes and devices of this job, and the build");
  add_topology_options(*sub, ctx.global);
  auto as_json = std::make_shared<bool>(false);
  sub->add_flag("--json", *as_json, "Print one JSON document (rank 0)");
  actions[sub] = [&ctx, as_json] { return run_info(ctx, *as_json); };
}

}  // namespace squall::app
