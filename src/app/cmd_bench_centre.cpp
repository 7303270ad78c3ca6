// `squall bench centre [--floats LIST] [--rounds R] [--compute-ms MS] [--slow-factor F]
// [--transports threads,window] [--poll-us US] [--json]`: where the asynchronous centre of
// parallel.outer.async should live (issue 48, "measure and choose"; docs/design.md,
// "Asynchronous outer steps"). Run it with one rank per node: every rank is a node that
// computes (a busy loop outside MPI, as a leader whose learners train) and then pushes its
// progress to the centre and takes the newest one back, round after round, never waiting for
// another node. The last rank computes --slow-factor times longer. Two homes of the centre,
// sharded the same way over the ranks (one shard a rank) and applying the same rule (the
// staleness-weighted push of mpi/async_centre.hpp, outer rate 1, no momentum):
//   threads  mpi::AsyncCentre: a thread of each rank serves its shard over point-to-point
//            messages (what squall trains with).
//   window   one-sided MPI: each shard in an MPI window under a passive-target lock on every
//            rank; a push is MPI_Fetch_and_op on the shard's push counter (its staleness),
//            MPI_Accumulate of the weighted delta and MPI_Get of the shard, each flushed.
//            Nothing on the target calls MPI on its behalf: the MPI library's one-sided
//            component must move the data while the target computes.
// Reported per transport and size, the fast nodes and the slow one apart: a push's seconds
// (median, 90th percentile), a round's seconds (compute and push, median), and the
// staleness the pushes saw. Checked: every node ends with the same centre, and under window
// that centre is the start plus every push's weighted delta (each node knows the weights it
// applied), to float rounding; a failed check fails the run. A window that this MPI cannot
// open (its one-sided component refuses the job) is reported as unavailable, with MPI's
// reason, not as a failure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi/async_centre.hpp"
#include "mpi/topology.hpp"
#include "mpi/window_centre.hpp"
#include "src/app/cli.hpp"
#include "src/core/clock.hpp"
#include "src/core/error.hpp"

namespace squall::app {
namespace {

using nlohmann::json;

struct BenchCentreArgs {
  // LeNet-5's parameters (61,706) and the climate U-Net's of configs/climate-tiny.toml.
  std::vector<size_t> floats{61706, 1944483};
  std::vector<std::string> transports{"threads", "window"};
  int rounds = 40, warmup = 3;
  double compute_ms = 50, slow_factor = 3, poll_us = 100;
  bool json = false;
};

// A node's inner steps: arithmetic on a buffer of its own, outside MPI, for `seconds`.
void compute(std::vector<float>& work, double seconds) {
  const double until = steady_seconds() + seconds;
  float a = 1.0001f;
  while (steady_seconds() < until) {
    for (float& v : work) v = v * a + 1e-7f;
    a = 2.0f - a;
  }
}

// The progress a node hands in this round: small, different on every node and round.
void step_model(const std::vector<float>& base, std::vector<float>& model, int node, int round) {
  const auto shift = static_cast<size_t>(node * 7 + round);
  for (size_t i = 0; i < base.size(); ++i)
    model[i] = base[i] - 1e-3f * static_cast<float>(static_cast<int>((i * 31 + shift) % 13) - 6);
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto i = static_cast<size_t>(at);
  const double f = at - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

struct Times {
  std::vector<double> push, round, tau;
};

// Gathers every rank's seconds to rank 0 (which reports), the fast ranks' together and the slow
// one's apart; the other ranks' lists stay empty.
void gather(const mpi::Communicator& world, const std::vector<double>& mine, bool slow, std::vector<double>& fast_all,
            std::vector<double>& slow_all) {
  const std::vector<std::string> parts = world.gather_strings(
      std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(double)) + (slow ? "s" : "f"), 0);
  for (const std::string& p : parts) {
    const size_t count = (p.size() - 1) / sizeof(double);
    std::vector<double>& into = p.back() == 's' ? slow_all : fast_all;
    const size_t at = into.size();
    into.resize(at + count);
    std::memcpy(into.data() + at, p.data(), count * sizeof(double));
  }
}

int run_bench_centre(Context& ctx, const BenchCentreArgs& a) {
  const auto topo = mpi::Topology::create(mpi::resolve_ranks_per_node(ctx.global.ranks_per_node));
  const mpi::Communicator& world = topo.world();
  const int nodes = world.size(), node = world.rank();
  if (nodes < 2) throw UsageError("bench centre: run it on 2 or more ranks, one a node (mpirun -np N)");
  const bool slow = node == nodes - 1;
  const double share = 1.0 / nodes;
  std::vector<float> work(4096, 1.0f);
  json doc{{"nodes", nodes}, {"rounds", a.rounds}, {"compute_ms", a.compute_ms}, {"slow_factor", a.slow_factor},
           {"results", json::array()}};
  char head[256];
  std::snprintf(head, sizeof(head),
                "# %d nodes (one rank each), %d rounds of %g ms of compute, the last node %gx slower\n", nodes,
                a.rounds, a.compute_ms, a.slow_factor);
  std::string text =
      std::string(head) +
      "#  transport     floats   push ms fast (p90)   round ms fast   push ms slow   staleness mean/max\n";
  bool failed = false;
  for (const size_t n : a.floats) {
    std::vector<float> initial(n);
    for (size_t i = 0; i < n; ++i) initial[i] = static_cast<float>(static_cast<int>(i % 11) - 5) * 0.1f;
    for (const std::string& t : a.transports) {
      std::vector<float> base = initial, model(n), centre(n);
      std::unique_ptr<mpi::AsyncCentre> threads;
      std::unique_ptr<mpi::WindowCentre> window;
      if (t == "threads") {
        mpi::AsyncCentreOptions o;
        o.poll_s = a.poll_us * 1e-6;
        o.stall_abort_s = ctx.global.stall_abort_s;
        threads = std::make_unique<mpi::AsyncCentre>(world, initial.data(), n, share, o);
      } else {
        window = std::make_unique<mpi::WindowCentre>(world, initial.data(), n, share);
        if (!window->unavailable().empty()) {
          doc["results"].push_back({{"transport", t}, {"floats", n}, {"unavailable", window->unavailable()}});
          text += "#  " + t + "  " + std::to_string(n) + "  unavailable: " + window->unavailable() + "\n";
          continue;
        }
      }
      Times mine;
      world.barrier();
      for (int r = 0; r < a.warmup + a.rounds; ++r) {
        const double t0 = steady_seconds();
        compute(work, a.compute_ms * 1e-3 * (slow ? a.slow_factor : 1.0));
        step_model(base, model, node, r);
        const double t1 = steady_seconds();
        int64_t tau = 0;
        if (threads) tau = threads->push_pull(model.data(), 1.0f, base.data()).staleness;
        else tau = window->push_pull(model.data(), base.data());
        const double t2 = steady_seconds();
        if (r < a.warmup) continue;
        mine.push.push_back(t2 - t1);
        mine.round.push_back(t2 - t0);
        mine.tau.push_back(static_cast<double>(tau));
      }
      // Every node holds the same final centre; the window's is the start plus every delta.
      double worst = 0;
      if (threads) {
        threads->finish(nullptr, 1.0f, centre.data());
      } else {
        std::vector<double> applied;
        window->finish(centre, applied);
        for (size_t i = 0; i < n; ++i) {
          const double want = static_cast<double>(initial[i]) + applied[i];
          worst = std::max(worst, std::abs(static_cast<double>(centre[i]) - want) / std::max(0.1, std::abs(want)));
        }
      }
      std::vector<double> sum{0.0};
      for (size_t i = 0; i < n; ++i) sum[0] += static_cast<double>(centre[i]) * static_cast<double>(i % 97 + 1);
      std::vector<double> lo = sum, hi = sum, err{worst};
      for (double& v : lo) v = -v;
      world.allreduce_max(lo);
      world.allreduce_max(hi);
      world.allreduce_max(err);
      // The same centre everywhere (the same floats: the sum in one order on every rank), and
      // the window's within float rounding of the deltas it was sent: a relative 1e-5 (values
      // of 0.1 to 0.5 plus nodes x rounds float terms of 1e-3 or less, in any order; relative to
      // 0.1 where the value is smaller, as the start's zeros are).
      const bool same = -lo[0] == hi[0];
      const bool exact = err[0] <= 1e-5;
      if (!same || !exact) failed = true;
      Times fast_all, slow_all;
      gather(world, mine.push, slow, fast_all.push, slow_all.push);
      gather(world, mine.round, slow, fast_all.round, slow_all.round);
      gather(world, mine.tau, slow, fast_all.tau, slow_all.tau);
      std::vector<double> taus = fast_all.tau;
      taus.insert(taus.end(), slow_all.tau.begin(), slow_all.tau.end());
      double tau_mean = 0, tau_max = 0;
      for (const double v : taus) {
        tau_mean += v / static_cast<double>(std::max<size_t>(1, taus.size()));
        tau_max = std::max(tau_max, v);
      }
      json j{{"transport", t},
             {"floats", n},
             {"push_s_fast_median", quantile(fast_all.push, 0.5)},
             {"push_s_fast_p90", quantile(fast_all.push, 0.9)},
             {"round_s_fast_median", quantile(fast_all.round, 0.5)},
             {"push_s_slow_median", quantile(slow_all.push, 0.5)},
             {"round_s_slow_median", quantile(slow_all.round, 0.5)},
             {"staleness_mean", tau_mean},
             {"staleness_max", tau_max},
             {"same_centre_everywhere", same},
             {"relative_error", err[0]}};
      doc["results"].push_back(j);
      char line[256];
      std::snprintf(line, sizeof(line), "   %-9s %9zu   %8.2f (%8.2f)   %13.2f   %12.2f   %.2f / %.0f%s\n",
                    t.c_str(), n, 1e3 * quantile(fast_all.push, 0.5), 1e3 * quantile(fast_all.push, 0.9),
                    1e3 * quantile(fast_all.round, 0.5), 1e3 * quantile(slow_all.push, 0.5), tau_mean, tau_max,
                    same && exact ? "" : ("   CHECK FAILED (" + std::to_string(err[0]) + ")").c_str());
      text += line;
    }
  }
  if (node == 0) print_result(a.json, doc, text);
  if (failed) throw Error("bench centre: the nodes' final centres differ, or the window's is not its deltas' sum");
  return 0;
}

}  // namespace

void add_bench_centre_command(CLI::App& bench, Context& ctx, Actions& actions) {
  CLI::App* sub = bench.add_subcommand(
      "centre", "The asynchronous centre's pushes: a thread per shard against one-sided MPI windows (one rank a node)");
  auto args = std::make_shared<BenchCentreArgs>();
  sub->add_option("--floats", args->floats,
                  "Model sizes in floats, comma-separated (default 61706,1944483: LeNet-5, the climate U-Net)")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{1} << 29));
  sub->add_option("--transports", args->transports,
                  "Homes of the centre, comma-separated: threads, window (default both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"threads", "window"}));
  sub->add_option("--rounds", args->rounds, "Timed rounds per node (default 40)")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--warmup", args->warmup, "Untimed rounds first (default 3)")->check(CLI::Range(0, 1 << 20));
  sub->add_option("--compute-ms", args->compute_ms, "A fast node's compute per round, in ms (default 50)")
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--slow-factor", args->slow_factor, "How many times longer the last node computes (default 3)")
      ->check(CLI::Range(1.0, 1e3));
  sub->add_option("--poll-us", args->poll_us, "threads: how long a shard's thread sleeps between looks (default 100)")
      ->check(CLI::Range(0.0, 1e6));
  sub->add_flag("--json", args->json, "Print one JSON document (rank 0)");
  add_topology_options(*sub, ctx.global);
  add_stall_options(*sub, ctx.global);
  actions[sub] = [&ctx, args] { return run_bench_centre(ctx, *args); };
}

}  // namespace squall::app
