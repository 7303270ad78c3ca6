// parallel.algorithm = outer under a real mpiexec (docs/training.md, "The outer optimizer"): QSR's
// rounds after a warm-up, the outer step that ends every run (at the last step, at
// train.target), and a stop signal inside an outer period, which must not take it.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
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

// LeNet-5 under outer on 2 ranks, each its own (emulated) node, 64 samples a learner, at a
// constant rate of 0.05 after `warmup` steps of warm-up; one thread per rank, and every rank's
// sums checked to start in one order.
std::string outer_job(const std::string& dir, const std::string& extra, int warmup = 0) {
  return "SQUALL_RANKS_PER_NODE=1 " + mpiexec(2) + " " + squall_bin() + " train --config " + k_configs +
         "fashion-mnist-lenet5.toml --set run.dir=" + dir +
         " --set data.train_samples=4096 --set data.test_samples=256 --set train.batch_size=64"
         " --set schedule.kind=constant --set optimizer.lr=0.05 --set schedule.warmup_steps=" +
         std::to_string(warmup) +
         " --set train.log_every_steps=10 --set run.threads=1 --set parallel.algorithm=outer"
         " --set parallel.check_sums=true" + extra;
}

json summary(const std::string& dir) { return read_json(fs::path(dir) / "summary.json"); }

std::string step_folder(int64_t step) {
  const std::string n = std::to_string(step);
  return "step-" + std::string(8 - n.size(), '0') + n;
}

// Whether every rank's replica in checkpoint `step` of `dir` is the checkpoint's central model:
// an outer step (not streamed) restarted them all from it.
bool replicas_at_centre(const std::string& dir, int64_t step, int ranks) {
  const fs::path folder = fs::path(dir) / "checkpoints" / step_folder(step);
  const squall::checkpoint::CheckpointData shared = squall::checkpoint::read_checkpoint_file((folder / "model.h5").string());
  const std::vector<float>& centre = shared.arrays.at("central/params");
  for (int r = 0; r < ranks; ++r) {  // one rank per node: node-0000r.h5 holds rank r
    char node[32], rank[32];
    std::snprintf(node, sizeof(node), "node-%05d.h5", r);
    std::snprintf(rank, sizeof(rank), "rank-%05d", r);
    const auto parts = squall::checkpoint::read_checkpoint_groups((folder / node).string(), {rank});
    if (parts.size() != 1 || parts[0].arrays.at("learner_0/params") != centre) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("outer with QSR after a warm-up synchronises: rounds of H in the warm-up, QSR's after it",
          "[launch][train][outer]") {
  // 10 warm-up steps at 0.005 to 0.05: from the first step's rate a QSR round would last
  // floor((0.21 / 0.005)^2) = 1764 steps, longer than the run. Rounds of H = 4 start at steps 0,
  // 4 and 8 (in the warm-up); from step 12 (0.05) they last floor((0.21 / 0.05)^2) = 17. Outer
  // steps after steps 4, 8, 12, 29, and the last (40).
  TempDir t("squall-outer-qsr");
  const std::string dir = t.file("qsr");
  const auto r = run_command(
      outer_job(dir, " --set train.max_steps=40 --set parallel.outer.period=4 --set parallel.outer.qsr=0.21", 10));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("QSR: max(4, floor((0.21 / lr)^2)) as the learning rate decays, after the warm-up"));
  const json s = summary(dir);
  CHECK(s.at("parallel").at("outer").at("outer_steps") == 5);
  CHECK(s.at("final").at("test_accuracy").get<double>() > 0.3);  // it learned: chance is 0.1
}

TEST_CASE("outer: every run ends with an outer step, streamed or not, and a run that ends on one takes no other",
          "[launch][train][outer]") {
  // period 8 at a constant rate: 12 steps end 4 steps after the outer step of step 8, which the
  // final outer step joins; 8 steps end with that outer step.
  TempDir t("squall-outer-final");
  for (const bool streamed : {false, true}) {
    INFO((streamed ? "streamed" : "not streamed"));
    const std::string settings = std::string(" --set parallel.outer.period=8") +
                                 (streamed ? " --set parallel.outer.streaming=true" : "");
    const std::string twelve = t.file(std::string("twelve-") + (streamed ? "s" : "n"));
    const std::string eight = t.file(std::string("eight-") + (streamed ? "s" : "n"));
    const auto a = run_command(outer_job(twelve, settings + " --set train.max_steps=12"));
    INFO(output_tail(a));
    REQUIRE(a.exit_code == 0);
    const auto b = run_command(outer_job(eight, settings + " --set train.max_steps=8"));
    INFO(output_tail(b));
    REQUIRE(b.exit_code == 0);
    CHECK(summary(twelve).at("parallel").at("outer").at("outer_steps") == 2);
    CHECK(summary(eight).at("parallel").at("outer").at("outer_steps") == 1);
    // Steps 9 to 12 are in the 12-step run's model.
    CHECK(summary(twelve).at("model_checksum") != summary(eight).at("model_checksum"));
    // Its final checkpoint is that of an outer step after step 12: every node restarts from the
    // centre (streamed too: no inner step follows the last one).
    CHECK(replicas_at_centre(twelve, 12, 2));
  }
}

TEST_CASE("outer: a run stopped at train.target ends with an outer step, and its final model is evaluated",
          "[launch][train][outer][target]") {
  // Evaluations every 5 steps, outer steps every 8: the target is reached at an evaluation that
  // is not on an outer step (its step is not a multiple of 8, or the test says which).
  TempDir t("squall-outer-target");
  const std::string dir = t.file("target");
  const auto r = run_command(outer_job(dir, " --set train.max_steps=300 --set parallel.outer.period=8"
                                            " --set train.eval_every_steps=5 --set train.target.metric=accuracy"
                                            " --set train.target.value=0.5"));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  const json s = summary(dir);
  REQUIRE(s.at("target").at("reached") == true);
  const int64_t step = s.at("target").at("step").get<int64_t>();
  CHECK(s.at("steps") == step);
  const std::vector<json> evals = read_records(fs::path(dir) / "metrics.jsonl", "eval");
  REQUIRE(!evals.empty());
  if (step % 8 != 0) {
    // The evaluation that reached the target, then the final model's: the summary's is the latter.
    REQUIRE(evals.size() >= 2);
    CHECK(evals[evals.size() - 2].at("step") == step);
    CHECK_FALSE(evals[evals.size() - 2].contains("final_model"));
    CHECK(evals.back().at("step") == step);
    CHECK(evals.back().at("final_model") == true);
    CHECK(s.at("final").at("test_loss") == evals.back().at("test_loss"));
    CHECK(s.at("parallel").at("outer").at("outer_steps") == step / 8 + 1);
  } else {
    CHECK(s.at("parallel").at("outer").at("outer_steps") == step / 8);
  }
  CHECK(replicas_at_centre(dir, step, 2));
}

TEST_CASE("outer: a run stopped by a signal inside an outer period resumes bit for bit: the stop takes no outer step",
          "[launch][checkpoint][signal][outer]") {
  TempDir t("squall-outer-signal");
  const std::string whole = t.file("whole"), dir = t.file("usr1");
  const std::string job = " --set train.max_steps=600 --set parallel.outer.period=7 --set checkpoint.every_steps=50";
  const auto a = run_command(outer_job(whole, job));
  INFO(output_tail(a));
  REQUIRE(a.exit_code == 0);
  // SIGUSR1 to mpiexec once the checkpoint of step 50 is there: the run stops after some later step.
  const std::string script = outer_job(dir, job) + " > " + t.file("log") + " 2>&1 & mp=$!; i=0; while [ ! -d " + dir +
                             "/checkpoints/step-00000050 ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; "
                             "kill -USR1 $mp; wait $mp; echo rc=$?";
  std::ofstream(t.file("script.sh")) << script << "\n";
  const auto r = run_command("timeout 240 sh " + t.file("script.sh"));
  INFO(r.out << r.err);
  REQUIRE_THAT(r.out, Contains("rc=75"));
  const auto resumed = run_command(outer_job(dir, job + " --resume auto"));
  INFO(output_tail(resumed));
  REQUIRE(resumed.exit_code == 0);
  CHECK(summary(dir).at("model_checksum") == summary(whole).at("model_checksum"));
  CHECK(summary(dir).at("parallel").at("outer").at("outer_steps") ==
        summary(whole).at("parallel").at("outer").at("outer_steps"));
}
