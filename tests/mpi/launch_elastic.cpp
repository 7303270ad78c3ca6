// Elastic resume under a real mpiexec (docs/training.md, "Elastic resume"): an ssgd checkpoint
// written by 4 ranks inside an epoch resumes on 2, 3 and 6; the epoch goes on at the sample of
// its order where the 4 ranks stood, so the job trains on exactly the samples the epoch had
// left, and the steps, the records and the summary follow the new shape. What cannot carry
// over (a part per rank, node-local shards) is refused, naming what to do.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::output_tail;
using squall::test::train_losses;
using squall::test::read_json;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string k_configs = std::string(SQUALL_SOURCE_DIR) + "/configs/";

// LeNet-5 under ssgd on 2048 samples, batches of 64, 2 epochs: on 4 ranks 8 steps an epoch, a
// checkpoint every 5 steps (the first inside epoch 1, after 5 x 64 x 4 = 1280 of its samples).
std::string ssgd_job(const std::string& dir, const std::string& extra = "") {
  return squall_bin() + " train --config " + k_configs + "fashion-mnist-lenet5.toml --set run.dir=" + dir +
         " --set data.train_samples=2048 --set data.test_samples=256 --set train.epochs=2"
         " --set train.batch_size=64 --set schedule.warmup_steps=0 --set checkpoint.every_steps=5"
         " --set train.log_every_steps=1 --set run.threads=1" + extra;
}

}  // namespace

TEST_CASE("an ssgd checkpoint of 4 ranks inside an epoch resumes on 2, 3 and 6: the epoch goes on with the samples "
          "it had left",
          "[launch][checkpoint][elastic][slow]") {
  TempDir t("squall-elastic");
  const std::string crashed = t.file("crashed");
  const auto a = run_command("SQUALL_FAIL_AT=0:7 " + mpiexec(4) + " " + ssgd_job(crashed));
  INFO(output_tail(a));
  REQUIRE(a.exit_code != 0);
  REQUIRE(fs::exists(fs::path(crashed) / "checkpoints/step-00000005/model.h5"));
  const std::vector<std::pair<int64_t, double>> before = train_losses(crashed);
  REQUIRE(before.size() >= 5);
  const double loss_at_5 = before[4].second;

  // ranks -> (steps in the rest of epoch 1, steps per epoch): the 768 samples epoch 1 had left
  // are 768 / (64 x ranks) whole steps on every shape here.
  struct Case {
    int ranks;
    int64_t rest, per_epoch;
  };
  for (const Case c : {Case{3, 4, 10}, Case{6, 2, 5}, Case{2, 6, 16}}) {
    INFO("resumed on " << c.ranks << " ranks");
    const std::string dir = t.file("on-" + std::to_string(c.ranks));
    fs::copy(crashed, dir, fs::copy_options::recursive);
    const auto r = run_command(mpiexec(c.ranks) + " " + ssgd_job(dir, " --resume auto"));
    INFO(output_tail(r));
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("resuming step 5 of a job of 4 rank(s)") &&
                          Contains("on " + std::to_string(c.ranks) + " rank(s)") &&
                          Contains("epoch 1 goes on at sample 1280 of its 2048"));
    const json s = read_json(fs::path(dir) / "summary.json");
    const int64_t steps = 5 + c.rest + c.per_epoch;
    CHECK(s.at("steps") == steps);
    CHECK(s.at("world_size") == c.ranks);
    // Every sample of both epochs once: 1280 before, the 768 left of epoch 1, then epoch 2's
    // whole steps on the new shape.
    CHECK(s.at("run").at("samples") == 1280 + 768 + c.per_epoch * 64 * c.ranks);
    const json& change = s.at("attempt").at("shape_change");
    CHECK(change.at("step") == 5);
    CHECK(change.at("from").at("ranks") == 4);
    CHECK(change.at("to").at("ranks") == c.ranks);
    CHECK(change.at("epoch") == 1);
    CHECK(change.at("epoch_position") == 1280);
    // The metrics' resume record says it too.
    bool recorded = false;
    std::ifstream m(fs::path(dir) / "metrics.jsonl");
    for (std::string line; std::getline(m, line);) {
      const json j = json::parse(line);
      if (j.at("kind") == "resume") recorded = j.contains("shape_change") && j.at("shape_change").at("to").at("ranks") == c.ranks;
    }
    CHECK(recorded);
    // squall report draws the run as one line on the run clock, the change of shape marked.
    const auto rep = run_command(squall_bin() + " report " + dir + " --out " + dir + "-report");
    INFO(rep.err);
    REQUIRE(rep.exit_code == 0);
    std::ifstream svg(dir + "-report/loss.svg");
    const std::string loss((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
    CHECK_THAT(loss, Contains("4 -&gt; " + std::to_string(c.ranks) + " ranks at step 5"));
    // The model went on from where it was: the first loss after the resume is near the last
    // one before.
    const std::vector<std::pair<int64_t, double>> after = train_losses(dir);
    REQUIRE(after.size() > 5);
    CHECK(after[5].first == 6);
    CHECK(std::isfinite(after[5].second));
    CHECK(std::abs(after[5].second - loss_at_5) < 0.25 * loss_at_5);
  }
}

TEST_CASE("an sma checkpoint with a part per rank resumes on 3 ranks and on 1: the ranks that remain keep their "
          "replicas, new ones start from the centre",
          "[launch][checkpoint][elastic][slow]") {
  TempDir t("squall-elastic-sma");
  const std::string crashed = t.file("crashed");
  // 2 ranks x 2 learners, batches of 16: 64 samples a step; a part per rank at step 5.
  auto job = [&](const std::string& dir, const std::string& extra = "") {
    return squall_bin() + " train --config " + k_configs + "fashion-mnist-sma.toml --set run.dir=" + dir +
           " --set data.train_samples=4096 --set data.test_samples=256 --set train.max_steps=12"
           " --set schedule.warmup_steps=0 --set checkpoint.every_steps=5 --set train.log_every_steps=1"
           " --set run.threads=1" + extra;
  };
  const auto a = run_command("SQUALL_FAIL_AT=0:8 " + mpiexec(2) + " " + job(crashed));
  INFO(output_tail(a));
  REQUIRE(fs::exists(fs::path(crashed) / "checkpoints/step-00000005/node-00000.h5"));
  const double loss_at_5 = train_losses(crashed).at(4).second;
  for (const int ranks : {3, 1}) {
    INFO("resumed on " << ranks << " ranks");
    const std::string dir = t.file("on-" + std::to_string(ranks));
    fs::copy(crashed, dir, fs::copy_options::recursive);
    const auto r = run_command(mpiexec(ranks) + " " + job(dir, " --resume auto"));
    INFO(output_tail(r));
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("resuming step 5 of a job of 2 rank(s)") &&
                          Contains(ranks > 2 ? "rank 2 starts its replicas from the central model"
                                             : "the replicas of rank 1 are dropped"));
    const json s = read_json(fs::path(dir) / "summary.json");
    CHECK(s.at("steps") == 12);
    CHECK(s.at("attempt").at("shape_change").at("to").at("ranks") == ranks);
    CHECK(s.at("attempt").at("shape_change").at("epoch_position") == 5 * 64);
    const std::vector<std::pair<int64_t, double>> after = train_losses(dir);
    REQUIRE(after.size() > 5);
    CHECK(after[5].first == 6);
    CHECK(std::abs(after[5].second - loss_at_5) < 0.25 * loss_at_5);
    CHECK(std::isfinite(s.at("final").at("train_loss").get<double>()));
  }
}

TEST_CASE("a resume on another number of ranks is refused where the state cannot carry over: a model per node, "
          "node-local shards",
          "[launch][checkpoint][elastic]") {
  TempDir t("squall-elastic-refused");
  {  // sma with parallel.periods' node level on 2 emulated nodes: the nodes' models are per node
    const std::string dir = t.file("periods");
    const std::string job = squall_bin() + " train --config " + k_configs + "fashion-mnist-sma.toml --set run.dir=" +
                            dir + " --set data.train_samples=4096 --set data.test_samples=256 --set train.max_steps=12"
                            " --set schedule.warmup_steps=0 --set checkpoint.every_steps=5 --set run.threads=1"
                            " --set parallel.periods=[1,2]";
    const auto a = run_command("SQUALL_RANKS_PER_NODE=1 SQUALL_FAIL_AT=0:8 " + mpiexec(2) + " " + job);
    INFO(output_tail(a));
    REQUIRE(fs::exists(fs::path(dir) / "checkpoints/step-00000005/model.h5"));
    const auto r = run_command("SQUALL_RANKS_PER_NODE=1 " + mpiexec(3) + " " + job + " --resume auto");
    INFO(output_tail(r));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("step-00000005") && Contains("model per node") && Contains("resume with 2 rank(s)"));
  }
  {  // ssgd with data.sampling = local: each node reads its own staged shard
    const std::string dir = t.file("local");
    const auto a = run_command("SQUALL_FAIL_AT=0:7 " + mpiexec(2) + " " + ssgd_job(dir, " --set data.sampling=local"));
    INFO(output_tail(a));
    REQUIRE(fs::exists(fs::path(dir) / "checkpoints/step-00000005/model.h5"));
    const auto r = run_command(mpiexec(3) + " " + ssgd_job(dir, " --set data.sampling=local --resume auto"));
    INFO(output_tail(r));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("data.sampling = local") && Contains("resume with 2 rank(s)"));
  }
}
