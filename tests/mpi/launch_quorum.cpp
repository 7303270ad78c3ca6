// train.epoch_quorum under a real mpiexec (docs/training.md, "A slow node"): a node made 2x
// slower (SQUALL_PACE_SECONDS fits its rounds as a measured straggler's would be, on any machine)
// trains half of each round, and the samples it did not reach are trained at the front of its
// next epoch: counted sample by sample (SQUALL_TRACE_SAMPLES), through a crash and resume, under
// synchronous and asynchronous outer steps. The run goes on past its planned steps until the job
// has trained its epochs' samples.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::output_tail;
using squall::test::read_json;
using squall::test::read_records;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string k_configs = std::string(SQUALL_SOURCE_DIR) + "/configs/";
constexpr int64_t k_samples = 2048, k_batch = 64, k_steps_per_epoch = k_samples / 2 / k_batch;  // 16
// 3 epochs plan 48 steps of 128 samples; with node 1 training half of each round the job trains
// 96 samples a step, so the run takes one epoch more, 64 steps, to train those 6144.
constexpr int64_t k_planned_steps = 3 * k_steps_per_epoch, k_steps = 4 * k_steps_per_epoch;

// LeNet-5 under outer on 2 ranks as 2 (emulated) nodes, rounds of 4 steps, node 1 twice as slow
// as node 0 and a quorum of 0.5: node 1 trains 2 steps of each round.
std::string job(const std::string& dir, const std::string& trace, const std::string& extra) {
  return "SQUALL_RANKS_PER_NODE=1 SQUALL_PACE_SECONDS=0.1,0.2 SQUALL_TRACE_SAMPLES=" + trace + " " + mpiexec(2) + " " +
         squall_bin() + " train --config " + k_configs + "fashion-mnist-lenet5.toml --set run.dir=" + dir +
         " --set data.train_samples=" + std::to_string(k_samples) +
         " --set data.test_samples=256 --set train.batch_size=" + std::to_string(k_batch) +
         " --set train.epochs=3 --set schedule.kind=constant --set optimizer.lr=0.05 --set schedule.warmup_steps=0"
         " --set run.threads=1 --set parallel.algorithm=outer --set parallel.outer.period=4"
         " --set train.epoch_quorum=0.5 --set parallel.check_sums=true" +
         extra;
}

// Each rank's trained steps from its trace: step -> (epoch, samples), the last attempt's where a
// resumed run took a step again.
using Trace = std::map<int64_t, std::pair<int64_t, std::vector<int64_t>>>;
Trace read_trace(const fs::path& file) {
  Trace t;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    int64_t attempt = 0, epoch = 0, step = 0, i = 0;
    s >> attempt >> epoch >> step;
    std::vector<int64_t> samples;
    while (s >> i) samples.push_back(i);
    t[step] = {epoch, samples};
  }
  return t;
}

std::vector<int64_t> samples_of(const Trace& t, int64_t epoch) {
  std::vector<int64_t> out;
  for (const auto& [step, e] : t)
    if (e.first == epoch) out.insert(out.end(), e.second.begin(), e.second.end());
  return out;
}

// Every sample of the job's epoch 1 exactly once: node 0 trains its share in epoch 1, node 1
// half of its share in epoch 1 and the other half, carried, first in epoch 2.
void check_every_sample_once(const Trace& fast, const Trace& slow) {
  const std::vector<int64_t> fast1 = samples_of(fast, 1), slow1 = samples_of(slow, 1), slow2 = samples_of(slow, 2);
  CHECK(std::ssize(fast1) == k_samples / 2);
  CHECK(std::ssize(slow1) == k_samples / 4);
  REQUIRE(std::ssize(slow2) == k_samples / 4);
  std::vector<int64_t> all = fast1;
  all.insert(all.end(), slow1.begin(), slow1.end());
  all.insert(all.end(), slow2.begin(), slow2.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(k_samples);
  for (int64_t i = 0; i < k_samples; ++i) expected[static_cast<size_t>(i)] = i;
  CHECK(all == expected);
  // Node 1 trains the first 2 steps of every round, 8 an epoch.
  int64_t slow_steps = 0;
  for (const auto& [step, e] : slow) {
    CHECK((step - 1) % 4 < 2);
    ++slow_steps;
  }
  CHECK(slow_steps == k_steps / 2);
  CHECK(std::ssize(fast) == k_steps);
}

void check_records(const std::string& dir) {
  const json pace = read_json(fs::path(dir) / "summary.json").at("parallel").at("pace");
  CHECK(pace.at("epoch_quorum") == 0.5);
  CHECK(pace.at("node_trained_steps") == json::array({k_steps, k_steps / 2}));
  CHECK(pace.at("node_idle_steps") == json::array({0, k_steps / 2}));
  CHECK(pace.at("planned_steps") == k_planned_steps);
  CHECK(pace.at("steps") == k_steps);
  CHECK(pace.at("samples_trained") == k_planned_steps * 2 * k_batch);
  // Both nodes' measured seconds per trained step (the forced paces fit the rounds, not these).
  REQUIRE(pace.at("node_step_seconds").size() == 2);
  for (const json& t : pace.at("node_step_seconds")) CHECK(t.get<double>() > 0);
  // Node 1 falls half an epoch of its share behind every epoch: 8 steps of 64 samples.
  CHECK(pace.at("carried_samples").get<int64_t>() == 4 * 8 * k_batch);
  const std::vector<json> epochs = read_records(fs::path(dir) / "metrics.jsonl", "pace");
  REQUIRE(epochs.size() >= 4);
  CHECK(epochs.back().at("epoch") == 4);
  CHECK(epochs.back().at("carried_samples").get<int64_t>() == 4 * 8 * k_batch);
  // The learning rate's schedule and the evaluations follow the samples trained: the last
  // evaluation is after step 64, at 3 epochs of samples.
  const std::vector<json> evals = read_records(fs::path(dir) / "metrics.jsonl", "eval");
  REQUIRE(!evals.empty());
  CHECK(evals.back().at("step") == k_steps);
  CHECK(evals.back().at("epochs_done").get<double>() == Approx(3.0));
}

}  // namespace

TEST_CASE("with a quorum of 0.5 a node at half speed trains half of each round and carries the rest",
          "[launch][outer][quorum]") {
  for (const std::string kind : {"sync", "async"}) {
    DYNAMIC_SECTION(kind) {
      TempDir t("squall-quorum");
      const std::string dir = t.file("run"), trace = t.file("trace");
      fs::create_directories(trace);
      const auto r = run_command(job(dir, trace, kind == "async" ? " --set parallel.outer.async=true" : ""));
      INFO(output_tail(r));
      REQUIRE(r.exit_code == 0);
      CHECK((r.out + r.err).find("samples the slower nodes did not reach are carried") != std::string::npos);
      CHECK((r.out + r.err).find("it goes on into epoch 4 until it has trained them all") != std::string::npos);
      check_every_sample_once(read_trace(fs::path(trace) / "rank-0.txt"), read_trace(fs::path(trace) / "rank-1.txt"));
      check_records(dir);
    }
  }
}

TEST_CASE("a paced run killed after a checkpoint resumes with the samples its slow node carried, inside its plan and past it",
          "[launch][outer][quorum]") {
  TempDir t("squall-quorum-resume");
  const std::string dir = t.file("run"), trace = t.file("trace");
  fs::create_directories(trace);
  // Checkpoints every 6 steps: step 18 is inside epoch 2, after node 1 started on its carried
  // samples; rank 1 is killed as it starts step 21.
  const std::string extra = " --set checkpoint.every_steps=6";
  const auto a = run_command("SQUALL_FAIL_AT=1:21:kill " + job(dir, trace, extra));
  INFO(output_tail(a));
  REQUIRE(a.exit_code != 0);
  // The resumed run is killed again at step 57, past the 48 planned steps: its checkpoint of
  // step 54 is inside epoch 4, which the run added to train its samples.
  const auto b = run_command("SQUALL_FAIL_AT=1:57:kill " + job(dir, trace, extra + " --resume auto"));
  INFO(output_tail(b));
  REQUIRE(b.exit_code != 0);
  REQUIRE(fs::exists(fs::path(dir) / "checkpoints" / "step-00000054"));
  // A resume there goes on to the step at which the samples are trained, not "already complete".
  const auto c = run_command(job(dir, trace, extra + " --resume auto"));
  INFO(output_tail(c));
  REQUIRE(c.exit_code == 0);
  CHECK((c.out + c.err).find("the run is complete") == std::string::npos);
  CHECK((c.out + c.err).find("resuming from") != std::string::npos);
  check_every_sample_once(read_trace(fs::path(trace) / "rank-0.txt"), read_trace(fs::path(trace) / "rank-1.txt"));
  check_records(dir);
}
