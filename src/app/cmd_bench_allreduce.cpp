// `squall bench allreduce [--sizes LIST] [--algos mpi,hier] [--cross-node LIST] [--iters N] [--warmup N]
// [--chunk BYTES] [--flat-chunk BYTES] [--device-chunk BYTES] [--inflight N] [--link-alpha-us US] [--link-gbit G]
// [--ranks-per-node K] [--stall-warn S] [--stall-abort S] [--json]`: allreduce bandwidth of the
// hierarchical allreduce against a plain MPI_Allreduce, in one run, interleaved per size and
// iteration, on the same float32 data. Reported the way nccl-tests does:
//   time_us     median over the timed iterations of the slowest rank's time
//   algbw_GBps  bytes / time
//   busbw_GBps  algbw * 2(n-1)/n, the bandwidth each rank's links see in a ring allreduce
// Every result is compared with MPI_Allreduce's on the same input (integer-valued floats, so
// any summation order gives the same bits); a difference fails the run.
//   algos: mpi            MPI_Allreduce on the world communicator
//          hier           HierAllreduce with its defaults (one MPI_Allreduce on a one-level job)
//          hier-pipeline  HierAllreduce running its pipeline even on a one-level job
//          nccl           (CUDA builds) ncclAllReduce over the job, on device buffers
//          device-hier    (CUDA builds) NCCL inside the node, MPI across nodes, on device buffers
//                         (mpi/device_allreduce.hpp)
// --cross-node auto|ring|halving-doubling picks the hierarchical allreduce's cross-node stage
// (mpi/cross_algorithm.hpp; auto on the link of --link-alpha-us and --link-gbit); a list runs
// hier and hier-pipeline once per value, side by side ("hier:ring", "hier:halving-doubling").
// Each hier result says which algorithms its sums' parts took across nodes (cross_node).
// Device algorithms sum the same data copied into GPU memory (the copies are not timed); a
// rank uses GPU (its rank on its host) mod (the GPUs it sees), as training does.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi/allreduce.hpp"
#include "mpi/cross_algorithm.hpp"
#include "mpi/device_allreduce.hpp"
#include "mpi/topology.hpp"
#include "mpi/wire.hpp"
#include "src/app/cli.hpp"
#include "src/core/clock.hpp"
#include "src/core/error.hpp"

namespace squall::app {
namespace {

using nlohmann::json;

struct BenchAllreduceArgs {
  std::vector<std::string> sizes;
  std::vector<std::string> algos{"mpi", "hier"};
  std::vector<std::string> cross_node{"auto"};
  double link_alpha_us = mpi::LinkCost{}.alpha_s * 1e6, link_gbit = mpi::LinkCost{}.bytes_per_s * 8e-9;
  int iters = 20, warmup = 5;
  std::string chunk = "256K", flat_chunk = "16M", device_chunk = "16M";
  int inflight = 16;
  bool json = false;
};

// "4096", "1K", "64M", "1G" (binary multiples), at most 1 TiB. Returns 0 when the text is not
// a size.
size_t parse_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 13 || text.size() > digits + 1) return 0;
  const size_t value = std::stoull(text.substr(0, digits));
  int shift = 0;
  if (text.size() == digits + 1) {
    switch (text.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: return 0;
    }
  }
  if (value > (size_t{1} << (40 - shift))) return 0;
  return value << shift;
}

const CLI::Validator k_size_validator(
    [](std::string& value) -> std::string {
      const size_t bytes = parse_size(value);
      if (bytes == 0) return "'" + value + "' is not a size (bytes > 0, with an optional K, M or G suffix)";
      if (bytes % sizeof(float) != 0) return "'" + value + "' is not a whole number of float32 values (4 bytes)";
      return {};
    },
    "SIZE");

// 4 B, 16 B, ..., 64 MiB.
std::vector<size_t> default_sizes() {
  std::vector<size_t> out;
  for (size_t b = 4; b <= (size_t{64} << 20); b *= 4) out.push_back(b);
  return out;
}

// Integer values small enough that every partial sum over the ranks is exact in float32.
void fill(std::vector<float>& v, int rank) {
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13) % 17) - 8);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Result {
  std::string algo;
  size_t bytes = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  double vs_mpi = -1;  // busbw / mpi's busbw at the same size; < 0 when not measured
  std::string cross;   // hier: the algorithms its parts took across nodes ("" when none crossed)
};

// One column of the benchmark: an algorithm of --algos, and for hier and hier-pipeline one
// value of --cross-node.
struct Variant {
  std::string name;  // in the results: the algo, or "algo:cross-node" when --cross-node lists several
  std::string algo;
  mpi::CrossAlgorithm cross = mpi::CrossAlgorithm::automatic;
};

std::vector<Variant> variants(const BenchAllreduceArgs& a) {
  std::vector<mpi::CrossAlgorithm> cross;
  for (const std::string& c : a.cross_node) cross.push_back(mpi::k_cross_algorithms.parse(c, "--cross-node", ""));
  std::vector<Variant> out;
  for (const std::string& algo : a.algos) {
    if (algo != "hier" && algo != "hier-pipeline") {
      out.push_back({algo, algo});
      continue;
    }
    for (const mpi::CrossAlgorithm c : cross)
      out.push_back({cross.size() > 1 ? algo + ":" + mpi::k_cross_algorithms.name(c) : algo, algo, c});
  }
  return out;
}

std::string text_table(const std::vector<Result>& results) {
  size_t width = 13;
  for (const Result& r : results) width = std::max(width, r.algo.size());
  std::string out = "#        bytes  " + (std::string("algo") + std::string(width - 4, ' ')) +
                    "  time_us  algbw_GBps  busbw_GBps  busbw_vs_mpi  cross_node\n";
  char line[512];
  for (const Result& r : results) {
    char ratio[32] = "-";
    if (r.vs_mpi >= 0) std::snprintf(ratio, sizeof(ratio), "%.2f", r.vs_mpi);
    std::snprintf(line, sizeof(line), "%14zu  %-*s %9.1f  %10.3f  %10.3f  %12s  %s\n", r.bytes,
                  static_cast<int>(width), r.algo.c_str(), r.time_us, r.algbw, r.busbw, ratio,
                  r.cross.empty() ? "-" : r.cross.c_str());
    out += line;
  }
  return out;
}

// The algorithms `hier` took across nodes since `before` (its parts per algorithm then).
std::string crossed_since(const mpi::HierAllreduce& hier, const std::array<int64_t, 2>& before) {
  std::string out;
  const mpi::CrossAlgorithm algos[2] = {mpi::CrossAlgorithm::ring, mpi::CrossAlgorithm::halving_doubling};
  for (size_t i = 0; i < 2; ++i) {
    if (hier.cross_parts(algos[i]) == before[i]) continue;
    if (!out.empty()) out += '+';
    out += mpi::k_cross_algorithms.name(algos[i]);
  }
  return out;
}

std::array<int64_t, 2> cross_counts(const mpi::HierAllreduce* hier) {
  if (!hier) return {0, 0};
  return {hier->cross_parts(mpi::CrossAlgorithm::ring), hier->cross_parts(mpi::CrossAlgorithm::halving_doubling)};
}

int run_bench_allreduce(Context& ctx, const BenchAllreduceArgs& a) {
  const auto topo = mpi::Topology::create(mpi::resolve_ranks_per_node(ctx.global.ranks_per_node));
  const auto& world = topo.world();
  const int n = topo.world_size();

  std::vector<size_t> sizes;
  for (const std::string& s : a.sizes) sizes.push_back(parse_size(s));
  if (sizes.empty()) sizes = default_sizes();

  mpi::AllreduceOptions options;
  options.chunk_bytes = parse_size(a.chunk);
  options.flat_chunk_bytes = parse_size(a.flat_chunk);
  options.device_chunk_bytes = parse_size(a.device_chunk);
  options.max_inflight = a.inflight;
  options.stall_warn_s = ctx.global.stall_warn_s;
  options.stall_abort_s = ctx.global.stall_abort_s;
  options.cross_link = {a.link_alpha_us * 1e-6, a.link_gbit * 1e9 / 8};

  // One reducer per variant that needs one, made in the same order on every rank.
  const std::vector<Variant> algos = variants(a);
  std::vector<std::unique_ptr<mpi::HierAllreduce>> reducers;
  std::vector<std::unique_ptr<mpi::DeviceAllreduce>> device_reducers;
  for (const Variant& v : algos) {
    device_reducers.emplace_back();
    if (v.algo == "mpi") {
      reducers.emplace_back();
    } else if (v.algo == "hier" || v.algo == "hier-pipeline") {
      mpi::AllreduceOptions o = options;
      o.flat_single_level = v.algo == "hier";
      o.cross_node = v.cross;
      reducers.push_back(std::make_unique<mpi::HierAllreduce>(topo, o));
    } else {
      reducers.emplace_back();
      const mpi::AllreduceKind kind = mpi::k_allreduce_kinds.parse(v.algo, "--algos", "");
      device_reducers.back() = mpi::make_device_allreduce(kind, topo, topo.host_rank(), options);
    }
  }

  std::vector<Result> results;
  for (const size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    const std::string what = "bench allreduce " + std::to_string(bytes) + " B";
    std::vector<float> input(count), reference(count), work(count);
    fill(input, topo.rank());
    reference = input;
    mpi::plain_allreduce_sum(world, reference.data(), count, mpi::DType::f32);

    // times[algo * iters + i]: this rank's seconds; then the slowest rank's.
    std::vector<double> times(algos.size() * static_cast<size_t>(a.iters));
    std::vector<std::array<int64_t, 2>> crossed_before;
    for (const auto& r : reducers) crossed_before.push_back(cross_counts(r.get()));
    int64_t wrong = 0;  // first differing element + 1 on this rank, 0 when all agree
    std::string wrong_algo;
    for (int it = 0; it < a.warmup + a.iters; ++it) {
      for (size_t k = 0; k < algos.size(); ++k) {
        std::memcpy(work.data(), input.data(), bytes);
        mpi::DeviceAllreduce* device = device_reducers[k].get();
        float* dev = device ? device->device_buffer(count) : nullptr;
        if (device) device->upload(dev, input.data(), count);
        world.barrier();
        const Stopwatch t;
        if (device)
          device->sum(dev, count, what);
        else if (reducers[k])
          reducers[k]->sum(work.data(), count, what);
        else
          mpi::plain_allreduce_sum(world, work.data(), count, mpi::DType::f32);
        const double dt = t.seconds();
        if (device) device->download(work.data(), dev, count);
        if (it >= a.warmup) times[k * static_cast<size_t>(a.iters) + static_cast<size_t>(it - a.warmup)] = dt;
        if (wrong == 0 && std::memcmp(work.data(), reference.data(), bytes) != 0) {
          size_t i = 0;
          while (work[i] == reference[i]) ++i;
          wrong = static_cast<int64_t>(i) + 1;
          wrong_algo = algos[k].name + " (element " + std::to_string(i) + ": " + std::to_string(work[i]) +
                       ", MPI_Allreduce gave " + std::to_string(reference[i]) + ")";
        }
      }
    }
    if (world.allreduce_max(wrong) > 0) {
      if (wrong > 0)
        throw Error("bench allreduce: the result of " + wrong_algo + " differs from MPI_Allreduce at " +
                    std::to_string(bytes) + " bytes");
      throw Error("bench allreduce: another rank's result differs from MPI_Allreduce at " + std::to_string(bytes) +
                  " bytes");
    }
    world.allreduce_max(times);

    double mpi_busbw = -1;
    for (size_t k = 0; k < algos.size(); ++k) {
      const auto first = times.begin() + static_cast<std::ptrdiff_t>(k * static_cast<size_t>(a.iters));
      Result r;
      r.algo = algos[k].name;
      if (reducers[k]) r.cross = crossed_since(*reducers[k], crossed_before[k]);
      r.bytes = bytes;
      const double t = median(std::vector<double>(first, first + a.iters));
      r.time_us = t * 1e6;
      r.algbw = static_cast<double>(bytes) / t / 1e9;
      r.busbw = r.algbw * 2.0 * (n - 1) / n;
      if (r.algo == "mpi") mpi_busbw = r.busbw;
      results.push_back(r);
    }
    for (auto it = results.end() - static_cast<std::ptrdiff_t>(algos.size()); it != results.end(); ++it)
      if (it->algo != "mpi" && mpi_busbw > 0) it->vs_mpi = it->busbw / mpi_busbw;
  }

  if (topo.rank() != 0) return 0;
  const mpi::HierAllreduce* hier = nullptr;
  for (const auto& r : reducers)
    if (r && !hier) hier = r.get();
  json doc{{"ranks", n},
           {"nodes", topo.nodes()},
           {"ranks_per_node", topo.ranks_per_node()},
           {"dtype", "f32"},
           {"iters", a.iters},
           {"warmup", a.warmup},
           {"chunk_bytes", options.chunk_bytes},
           {"flat_chunk_bytes", options.flat_chunk_bytes},
           {"device_chunk_bytes", options.device_chunk_bytes},
           {"max_inflight", options.max_inflight},
           {"cross_node", a.cross_node},
           {"link", {{"alpha_us", a.link_alpha_us}, {"gbit", a.link_gbit}}},
           {"results", json::array()}};
  std::string head = "# squall bench allreduce: " + std::to_string(n) + " rank(s) on " +
                     std::to_string(topo.nodes()) + " node(s)";
  if (topo.emulated()) head += " (emulated, " + std::to_string(topo.ranks_per_node()) + " ranks per node)";
  head += "; float32; median of " + std::to_string(a.iters) + " iterations after " + std::to_string(a.warmup) +
          " warm-up\n";
  if (hier)
    head += "# hier: " + std::string(hier->mode()) +
            (hier->parts() > 0 ? ", " + std::to_string(hier->parts()) + " part(s) per chunk" : "") + ", chunk " +
            std::to_string(options.chunk_bytes) + " B, " + std::to_string(options.max_inflight) +
            " in flight, flat chunk " + std::to_string(options.flat_chunk_bytes) + " B\n";
  for (size_t k = 0; k < algos.size(); ++k) {
    const std::string& name = algos[k].name;
    if (reducers[k]) doc["modes"][name] = reducers[k]->mode();
    if (device_reducers[k]) {
      doc["modes"][name] = device_reducers[k]->mode();
      head += "# " + name + ": " + device_reducers[k]->mode() + ", on device buffers\n";
    }
    if (reducers[k] && reducers[k]->mode() == "pipeline" && topo.nodes() > 1) {
      const std::string rule = mpi::cross_rule(reducers[k]->options(), topo.nodes());
      doc["cross_rules"][name] = rule;
      head += "# " + name + " across nodes: " + rule + "\n";
    }
  }
  for (const Result& r : results) {
    json j{{"algo", r.algo},   {"bytes", r.bytes},       {"ranks", n},
           {"time_us", r.time_us}, {"algbw_GBps", r.algbw}, {"busbw_GBps", r.busbw}};
    if (r.vs_mpi >= 0) j["busbw_vs_mpi"] = r.vs_mpi;
    if (!r.cross.empty()) j["cross_node"] = r.cross;
    doc["results"].push_back(j);
  }
  print_result(a.json, doc, head + text_table(results));
  return 0;
}

}  // namespace

void add_bench_allreduce_command(CLI::App& bench, Context& ctx, Actions& actions) {
  CLI::App* sub = bench.add_subcommand("allreduce", "Allreduce bandwidth: plain MPI against the hierarchical one");
  auto args = std::make_shared<BenchAllreduceArgs>();
  sub->add_option("--sizes", args->sizes,
                  "Buffer sizes in bytes, comma-separated, K/M/G suffixes (default 4 B to 64M by x4)")
      ->delimiter(',')
      ->check(k_size_validator);
  // The device algorithms exist in CUDA builds only; --help lists what this build has.
  std::vector<std::string> algos{"mpi", "hier", "hier-pipeline"};
  for (const std::string& d : mpi::device_allreduce_names()) algos.push_back(d);
  std::string algo_list;
  for (const std::string& d : algos) algo_list += (algo_list.empty() ? "" : ", ") + d;
  sub->add_option("--algos", args->algos, "Algorithms, comma-separated: " + algo_list + " (default mpi,hier)")
      ->delimiter(',')
      ->check(CLI::IsMember(algos));
  sub->add_option("--cross-node", args->cross_node,
                  "Cross-node stage of hier and hier-pipeline, comma-separated: auto, ring, halving-doubling; "
                  "several run side by side (default auto)")
      ->delimiter(',')
      ->check(CLI::IsMember(mpi::k_cross_algorithms.names()));
  sub->add_option("--link-alpha-us", args->link_alpha_us,
                  "Seconds per message (in us) of the link between nodes that --cross-node auto assumes (default 20)")
      ->check(CLI::Range(0.0, 1e7));
  sub->add_option("--link-gbit", args->link_gbit,
                  "Bandwidth (Gbit/s per direction) of that link (default 10)")
      ->check(CLI::Range(1e-6, 1e6));
  sub->add_option("--iters", args->iters, "Timed iterations per size and algorithm (default 20)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--warmup", args->warmup, "Untimed iterations first (default 5)")->check(CLI::Range(0, 1 << 20));
  sub->add_option("--chunk", args->chunk, "Largest pipeline chunk of the hierarchical allreduce (default 256K)")
      ->check(k_size_validator);
  sub->add_option("--flat-chunk", args->flat_chunk, "Unit of the hierarchical allreduce's flat sum (default 16M)")
      ->check(k_size_validator);
  sub->add_option("--device-chunk", args->device_chunk,
                  "Pipeline chunk of the device hierarchy on GPU buffers (default 16M)")
      ->check(k_size_validator);
  sub->add_option("--inflight", args->inflight, "Chunks in flight at once (default 16)")->check(CLI::Range(1, 1024));
  sub->add_flag("--json", args->json, "Print one JSON document (rank 0)");
  add_topology_options(*sub, ctx.global);
  add_stall_options(*sub, ctx.global);
  actions[sub] = [&ctx, args] { return run_bench_allreduce(ctx, *args); };
}

}  // namespace squall::app
