// parallel.outer.async under a real mpiexec (docs/training.md, "Asynchronous outer steps"):
// bounded at staleness 0 it trains as synchronous outer; a run killed after a checkpoint
// resumes from the centre and the nodes' states.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
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
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string k_configs = std::string(SQUALL_SOURCE_DIR) + "/configs/";

// LeNet-5 under outer on 4 ranks in 2 (emulated) nodes of 2, 64 samples a learner, at a
// constant rate of 0.05; one thread per rank, and every rank's sums (the node's hand-over of the
// centre among them) checked to start in one order.
std::string job(const std::string& dir, const std::string& extra) {
  return "SQUALL_RANKS_PER_NODE=2 " + mpiexec(4) + " " + squall_bin() + " train --config " + k_configs +
         "fashion-mnist-lenet5.toml --set run.dir=" + dir +
         " --set data.train_samples=4096 --set data.test_samples=256 --set train.batch_size=64"
         " --set schedule.kind=constant --set optimizer.lr=0.05 --set schedule.warmup_steps=0"
         " --set train.log_every_steps=1 --set run.threads=1 --set parallel.algorithm=outer"
         " --set parallel.outer.period=4 --set parallel.check_sums=true" + extra;
}

std::vector<double> train_losses(const std::string& dir) {
  std::vector<double> out;
  for (const json& r : read_records(fs::path(dir) / "metrics.jsonl", "train")) out.push_back(r.at("loss").get<double>());
  return out;
}

}  // namespace

TEST_CASE("asynchronous outer bounded at staleness 0 trains as synchronous outer", "[launch][outer][async]") {
  TempDir t("squall-outer-async");
  const std::string sync = t.file("sync"), async = t.file("async");
  const auto a = run_command(job(sync, " --set train.max_steps=40"));
  INFO(output_tail(a));
  REQUIRE(a.exit_code == 0);
  const auto b = run_command(job(async, " --set train.max_steps=40 --set parallel.outer.async=true "
                                        "--set parallel.outer.max_staleness=0"));
  INFO(output_tail(b));
  REQUIRE(b.exit_code == 0);
  const std::vector<double> la = train_losses(sync), lb = train_losses(async);
  REQUIRE(la.size() == 40);
  REQUIRE(lb.size() == la.size());
  // The centre adds the nodes' progress one push at a time, in the order they reach it, the
  // synchronous step their mean from the allreduce: the same arithmetic in another order, so
  // rounding apart. Each round starts from a centre a last bit off, which the training's own
  // sensitivity at this rate (losses jumping from 1.0 to 2.9 and back between steps 27 and 28)
  // amplifies: measured within 2e-6 over the first 24 steps and 4e-4 by step 40.
  for (size_t i = 0; i < la.size(); ++i) {
    INFO("step " << i + 1 << ": synchronous " << la[i] << ", asynchronous " << lb[i]);
    CHECK(std::fabs(lb[i] - la[i]) <= (i < 24 ? 1e-5 : 2e-3) * std::fabs(la[i]));
  }
  const json s = read_json(fs::path(async) / "summary.json").at("parallel").at("outer_async");
  // 40 steps in rounds of 4, and the settling pushes of the evaluations after steps 16 and 32
  // (the last round ends at the last step: the final push has nothing to add).
  CHECK(s.at("pushes") == 12);
  CHECK(s.at("staleness_max") == 0);
  CHECK(s.at("max_staleness") == 0);
  // Node 0's shard thread served 12 pushes of each node: it used some CPU time, and less than
  // the run's wall time.
  CHECK(s.at("serve_cpu_s").get<double>() > 0);
  // The leader's own thread's CPU seconds in its waits for the answers: of one thread, so no
  // more than the waits' wall seconds (give or take the microseconds between the two clocks'
  // readings, a dozen pushes' worth).
  CHECK(s.at("wait_cpu_s").get<double>() >= 0);
  CHECK(s.at("wait_cpu_s").get<double>() <= s.at("wait_s").get<double>() + 0.01);
  CHECK_FALSE(read_json(fs::path(sync) / "summary.json").at("parallel").contains("outer_async"));
}

TEST_CASE("an asynchronous outer run killed after a checkpoint resumes from the centre and the nodes' states",
          "[launch][outer][async][checkpoint]") {
  TempDir t("squall-outer-async-kill");
  const std::string dir = t.file("run");
  const std::string extra =
      " --set train.epochs=25 --set train.max_steps=400 --set checkpoint.every_steps=40 --set parallel.outer.async=true"
      " --set parallel.outer.lr=0.7";  // a centre of its own: not the mean of the nodes
  // Killed (SIGKILL to mpiexec, no checkpoint of its own) once the checkpoint of step 80 is there.
  const std::string script = job(dir, extra) + " > " + t.file("log") + " 2>&1 & mp=$!; i=0; while [ ! -d " + dir +
                             "/checkpoints/step-00000080 ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; "
                             "kill -KILL $mp; wait $mp; echo rc=$?";
  std::ofstream(t.file("script.sh")) << script << "\n";
  const auto killed = run_command("timeout 240 sh " + t.file("script.sh"));
  INFO(killed.out << killed.err);
  REQUIRE_THAT(killed.out, Contains("rc=137"));
  const std::vector<double> killed_losses = train_losses(dir);
  REQUIRE(killed_losses.size() >= 80);
  const auto resumed = run_command(job(dir, extra + " --resume auto"));
  INFO(output_tail(resumed));
  REQUIRE(resumed.exit_code == 0);
  // The resumed attempt starts from a checkpoint at step 80 or later. A batch's loss varies
  // by a fifth from one step to the next here, so means: the first 4 steps after the resume
  // (the nodes' restored models, before their first push) and the 8 steps from the 5th (after
  // it, from the restored centre: a centre started again from the initial weights would put
  // the nodes back near a loss of 2.3) against the 8 steps before the checkpoint.
  const std::vector<json> resumes = read_records(fs::path(dir) / "metrics.jsonl", "resume");
  REQUIRE(resumes.size() == 1);
  const int64_t from = resumes[0].at("step").get<int64_t>();
  CHECK(from >= 80);
  const std::vector<json> train = read_records(fs::path(dir) / "metrics.jsonl", "train");
  double before = 0, first = 0, later = 0;
  int n_before = 0, n_first = 0, n_later = 0;
  bool resumed_part = false;
  for (const json& r : train) {
    const int64_t step = r.at("step").get<int64_t>();
    const double loss = r.at("loss").get<double>();
    if (step == from + 1) resumed_part = true;
    if (!resumed_part && step > from - 8 && step <= from) before += loss, ++n_before;
    if (resumed_part && step > from && step <= from + 4) first += loss, ++n_first;
    if (resumed_part && step > from + 4 && step <= from + 12) later += loss, ++n_later;
  }
  REQUIRE(n_before == 8);
  REQUIRE(n_first == 4);
  REQUIRE(n_later == 8);
  before /= n_before;
  first /= n_first;
  later /= n_later;
  INFO("resumed after step " << from << ": mean loss " << before << " before, " << first << " over the first 4 steps "
                             << "after, " << later << " over the 8 after the first pushes");
  CHECK(std::fabs(first - before) <= 0.25 * before);
  CHECK(later <= 1.25 * before);
  const json s = read_json(fs::path(dir) / "summary.json");
  CHECK(s.at("steps") == 400);
  CHECK(s.at("parallel").at("outer_async").at("pushes").get<int64_t>() > 0);
  CHECK(s.at("final").at("test_accuracy").get<double>() > 0.5);
}
