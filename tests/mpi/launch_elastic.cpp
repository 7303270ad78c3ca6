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

#include "io/checkpoint/checkpoint_file.hpp"
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

// The learning rate of step `step` in a run's train records.
double lr_of_step(const fs::path& dir, int64_t step) {
  for (const json& j : squall::test::read_records(dir / "metrics.jsonl", "train"))
    if (j.at("step") == step) return j.at("lr").get<double>();
  FAIL("no train record of step " << step << " in " << dir);
  return 0;
}

}  // namespace

TEST_CASE("an ssgd checkpoint of 4 ranks inside an epoch resumes on 2, 3 and 6: the epoch goes on with the samples "
          "it had left, at the batch elastic.batch keeps",
          "[launch][checkpoint][elastic][slow]") {
  TempDir t("squall-elastic");
  const std::string crashed = t.file("crashed");
  const auto a = run_command("SQUALL_FAIL_AT=0:7 " + mpiexec(4) + " " + ssgd_job(crashed));
  INFO(output_tail(a));
  REQUIRE(a.exit_code != 0);
  REQUIRE(fs::exists(fs::path(crashed) / "checkpoints/step-00000005/model.h5"));
  const std::vector<std::pair<int64_t, double>> before = train_losses(crashed);
  REQUIRE(before.size() >= 6);
  const double loss_at_5 = before[4].second;
  // Step 6 starts at sample 1280 of the run on any shape: the schedule's step is the same, and
  // the learning rate differs by elastic.batch's factor alone.
  const double lr_at_6 = lr_of_step(crashed, 6);

  // The first job: 4 ranks x 64 = 256 samples a step. The rest of epoch 1 is its 768 samples
  // left, in whole steps of the new global batch; epoch 2 is the new shape's.
  struct Case {
    int ranks;
    const char* keep;
    int64_t batch;                // per learner, after the resume
    int64_t rest, per_epoch;      // steps in the rest of epoch 1, steps per epoch
    double lr_scale;
  };
  const Case cases[] = {
      // elastic.batch = global (the default): 256 a step where it divides (2 ranks x 128), the
      // nearest elsewhere (3 x 85 = 255; 2048 / 3 ranks = 682 samples each, 8 steps of 85), and
      // the learning rate by the linear rule for the difference.
      {2, "global", 128, 3, 8, 1.0},
      {3, "global", 85, 3, 8, 255.0 / 256.0},
      // elastic.batch = learner: 64 per learner stays, ssgd's learning rate follows the global batch.
      {3, "learner", 64, 4, 10, 0.75},
      {6, "learner", 64, 2, 5, 1.5},
  };
  for (const Case& c : cases) {
    INFO("resumed on " << c.ranks << " ranks, elastic.batch = " << c.keep);
    const std::string dir = t.file("on-" + std::to_string(c.ranks) + "-" + c.keep);
    fs::copy(crashed, dir, fs::copy_options::recursive);
    const auto r = run_command(mpiexec(c.ranks) + " " +
                               ssgd_job(dir, std::string(" --resume auto --set elastic.batch=") + c.keep));
    INFO(output_tail(r));
    REQUIRE(r.exit_code == 0);
    const int64_t global = c.batch * c.ranks;
    CHECK_THAT(r.out, Contains("resuming step 5 of a job of 4 rank(s)") &&
                          Contains("on " + std::to_string(c.ranks) + " rank(s)") &&
                          Contains("epoch 1 goes on at sample 1280 of its 2048") &&
                          Contains(std::string("elastic.batch = ") + c.keep));
    const json s = read_json(fs::path(dir) / "summary.json");
    const int64_t steps = 5 + c.rest + c.per_epoch;
    CHECK(s.at("steps") == steps);
    CHECK(s.at("world_size") == c.ranks);
    CHECK(s.at("global_batch") == global);
    // Every sample of both epochs once but a remainder under a step: 1280 before, the 768 left
    // of epoch 1 in whole steps, then epoch 2's whole steps on the new shape.
    CHECK(s.at("run").at("samples") == 1280 + c.rest * global + c.per_epoch * global);
    const json& change = s.at("attempt").at("shape_change");
    CHECK(change.at("step") == 5);
    CHECK(change.at("from").at("ranks") == 4);
    CHECK(change.at("to").at("ranks") == c.ranks);
    CHECK(change.at("from").at("learner_batch") == 64);
    CHECK(change.at("from").at("global_batch") == 256);
    CHECK(change.at("to").at("learner_batch") == c.batch);
    CHECK(change.at("to").at("global_batch") == global);
    CHECK(change.at("keep") == c.keep);
    CHECK(change.at("lr_scale").get<double>() == Approx(c.lr_scale));
    CHECK(change.at("epoch") == 1);
    CHECK(change.at("epoch_position") == 1280);
    CHECK(lr_of_step(dir, 6) == Approx(lr_at_6 * c.lr_scale).epsilon(1e-5));
    // The metrics' resume record says it too, and so does the MLPerf log.
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
  // A later resume on the resumed shape trains at the batch and rate it resumed with (the
  // checkpoint says them), not the config's: step 16's checkpoint of the 3-rank job, run on.
  const std::string again = t.file("on-3-global");
  const auto r = run_command(mpiexec(3) + " " + ssgd_job(again, " --resume auto --set train.epochs=3"));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, !Contains("resuming step 16 of a job of"));  // the same shape: no change to state
  const json s = read_json(fs::path(again) / "summary.json");
  CHECK(s.at("global_batch") == 255);
  CHECK(s.at("steps") == 16 + 8);
  CHECK(s.at("attempt").at("shape_change").is_null());
}

TEST_CASE("sma and local-sgd checkpoints with a part per rank resume on 3 ranks and on 1: the ranks that remain "
          "keep their replicas, new ones start from the centre",
          "[launch][checkpoint][elastic][slow]") {
  // 2 ranks x 2 learners, batches of 16: 64 samples a step; a part per rank at step 5.
  const bool local = GENERATE(false, true);
  INFO((local ? "local-sgd" : "sma"));
  TempDir t(local ? "squall-elastic-local" : "squall-elastic-sma");
  const std::string crashed = t.file("crashed");
  auto job = [&](const std::string& dir, const std::string& extra = "") {
    const std::string algorithm =
        local ? "fashion-mnist-lenet5.toml --set parallel.algorithm=local-sgd --set parallel.replicas_per_device=2"
                " --set parallel.period=2 --set train.batch_size=16"
              : "fashion-mnist-sma.toml";
    return squall_bin() + " train --config " + k_configs + algorithm + " --set run.dir=" + dir +
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
    // elastic.batch = global: 64 a step over 3 x 2 learners is 10.67, so 11 each (66); over
    // 1 x 2 it is 32 each.
    CHECK(s.at("global_batch") == (ranks == 3 ? 66 : 64));
    CHECK(s.at("batch_per_learner") == (ranks == 3 ? 11 : 32));
    const std::vector<std::pair<int64_t, double>> after = train_losses(dir);
    REQUIRE(after.size() > 5);
    CHECK(after[5].first == 6);
    CHECK(std::abs(after[5].second - loss_at_5) < 0.25 * loss_at_5);
    CHECK(std::isfinite(s.at("final").at("train_loss").get<double>()));
  }
}

TEST_CASE("a model per node carries over node by node: sma's node centres and outer's node models on more nodes, "
          "and a layout that mixes outer's nodes is refused",
          "[launch][checkpoint][elastic][slow]") {
  TempDir t("squall-elastic-nodes");
  // 2 ranks, each its own (emulated) node, a checkpoint at step 5 with a part per rank.
  auto job = [&](const std::string& dir, const std::string& extra) {
    return squall_bin() + " train --config " + k_configs + "fashion-mnist-sma.toml --set run.dir=" + dir +
           " --set data.train_samples=4096 --set data.test_samples=256 --set train.max_steps=12"
           " --set schedule.warmup_steps=0 --set checkpoint.every_steps=5 --set run.threads=1"
           " --set train.log_every_steps=1 --set parallel.check_sums=true" + extra;
  };
  struct Case {
    const char* name;
    std::string settings;
  };
  for (const Case& c : {Case{"sma-periods", " --set parallel.periods=[1,4]"},
                        Case{"outer", " --set parallel.algorithm=outer --set parallel.outer.period=3"}}) {
    INFO(c.name);
    const std::string crashed = t.file(std::string(c.name) + "-crashed");
    const auto a = run_command("SQUALL_RANKS_PER_NODE=1 SQUALL_FAIL_AT=0:8 " + mpiexec(2) + " " + job(crashed, c.settings));
    INFO(output_tail(a));
    REQUIRE(fs::exists(fs::path(crashed) / "checkpoints/step-00000005/node-00001.h5"));
    const double loss_at_5 = train_losses(crashed).at(4).second;
    // On 3 nodes of 1 rank: nodes 1 and 2 keep theirs, node 3 starts from the centre; the sums
    // of the nodes and of the job start in the same order on every rank (check_sums).
    const std::string more = t.file(std::string(c.name) + "-on-3");
    fs::copy(crashed, more, fs::copy_options::recursive);
    const auto r = run_command("SQUALL_RANKS_PER_NODE=1 " + mpiexec(3) + " " + job(more, c.settings + " --resume auto"));
    INFO(output_tail(r));
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("resuming step 5 of a job of 2 rank(s) on 2 node(s) on 3 rank(s) on 3 node(s)") &&
                          Contains("rank 2 starts its replicas from the central model"));
    CHECK_THAT(r.out, !Contains("node centres start from the job's"));
    const json s = read_json(fs::path(more) / "summary.json");
    CHECK(s.at("steps") == 12);
    CHECK(s.at("nodes") == 3);
    const std::vector<std::pair<int64_t, double>> after = train_losses(more);
    REQUIRE(after.size() > 5);
    CHECK(std::abs(after[5].second - loss_at_5) < 0.25 * loss_at_5);
    CHECK(std::isfinite(s.at("final").at("train_loss").get<double>()));
    // On 2 ranks of 1 node: the node would hold the ranks of both the checkpoint's nodes. sma's
    // node centre starts from the job's centre; outer's node would hold two models: refused.
    const std::string merged = t.file(std::string(c.name) + "-one-node");
    fs::copy(crashed, merged, fs::copy_options::recursive);
    // (A checkpoint at step 7 holds the node centres after the node's steps 6 and 7, before
    // the job's synchronisation of step 8.)
    const auto m = run_command("SQUALL_RANKS_PER_NODE=2 " + mpiexec(2) + " " +
                               job(merged, c.settings + " --resume auto --set checkpoint.every_steps=7"));
    INFO(output_tail(m));
    if (std::string(c.name) == "outer") {
      CHECK(m.exit_code == 2);
      CHECK_THAT(m.err, Contains("step-00000005") && Contains("model per node (outer)") &&
                            Contains("resume with the same ranks per node") && Contains("(1 per node)"));
    } else {
      CHECK(m.exit_code == 0);
      CHECK_THAT(m.out, Contains("node centres start from the job's"));
      CHECK(read_json(fs::path(merged) / "summary.json").at("steps") == 12);
      // The one node's centre is one model on both its ranks.
      const std::string node_file = (fs::path(merged) / "checkpoints/step-00000007/node-00000.h5").string();
      const std::vector<squall::checkpoint::CheckpointData> parts =
          squall::checkpoint::read_checkpoint_groups(node_file, {"rank-00000", "rank-00001"});
      REQUIRE(parts.size() == 2);
      CHECK((parts[0].arrays.at("node_central/z") == parts[1].arrays.at("node_central/z")));
    }
  }
}

TEST_CASE("a resume on another number of ranks is refused where the data cannot carry over: node-local shards",
          "[launch][checkpoint][elastic]") {
  TempDir t("squall-elastic-refused");
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

TEST_CASE("milestones in epochs stay where they were in samples after a resume on another number of ranks",
          "[launch][checkpoint][elastic]") {
  // 4 ranks x 64: 8 steps an epoch; the learning rate drops x 0.1 after epoch 1. Resumed from
  // step 5 on 2 ranks keeping 64 per learner (elastic.batch = learner): 128 a step, 16 steps an
  // epoch, the rate x 0.5. The rest of epoch 1 is steps 6 to 11; step 12 opens epoch 2, after
  // 2048 samples: the milestone is behind it, as it is at the 4-rank run's step 9.
  TempDir t("squall-elastic-milestones");
  const std::string crashed = t.file("crashed");
  const std::string multistep = " --set schedule.kind=multistep --set schedule.milestones=[1]"
                                " --set schedule.milestone_unit=epochs --set schedule.gamma=0.1";
  const auto a = run_command("SQUALL_FAIL_AT=0:7 " + mpiexec(4) + " " + ssgd_job(crashed, multistep));
  INFO(output_tail(a));
  REQUIRE(fs::exists(fs::path(crashed) / "checkpoints/step-00000005/model.h5"));
  const double peak = lr_of_step(crashed, 5);
  const auto r = run_command(mpiexec(2) + " " + ssgd_job(crashed, multistep + " --resume auto --set elastic.batch=learner"));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  const json s = read_json(fs::path(crashed) / "summary.json");
  REQUIRE(s.at("steps") == 5 + 6 + 16);
  CHECK(s.at("attempt").at("shape_change").at("lr_scale").get<double>() == Approx(0.5));
  CHECK(lr_of_step(crashed, 11) == Approx(peak * 0.5));        // epoch 1's last step
  CHECK(lr_of_step(crashed, 12) == Approx(peak * 0.5 * 0.1));  // epoch 2's first
  CHECK(lr_of_step(crashed, 27) == Approx(peak * 0.5 * 0.1));
}

TEST_CASE("outer resumed on other nodes: the synchronous start stays where it was in samples, and the inner "
          "steps' rate follows a node's batch",
          "[launch][checkpoint][elastic][outer]") {
  // 4 ranks on 2 nodes x 64 samples: 256 a step, 8 steps an epoch, 16 in the run; an outer step
  // after every step of the first half (parallel.outer.start_fraction = 0.5: 2048 samples), then
  // every 4. A checkpoint at step 3, resumed on 2 ranks, one per node, keeping 64 per learner:
  // 128 a step. The start is then after 2048 samples, step 3 + 1280 / 128 = 13 of the resumed
  // run (not half of its 29 steps, nor of the 32 a 2-rank run would take). A node's batch halves
  // (128 -> 64): the inner rate x 0.5 (a learner's batch stays: the learner's rule would keep it).
  TempDir t("squall-elastic-outer-start");
  const std::string dir = t.file("run");
  auto job = [&](const std::string& extra) {
    return squall_bin() + " train --config " + k_configs + "fashion-mnist-lenet5.toml --set run.dir=" + dir +
           " --set data.train_samples=2048 --set data.test_samples=256 --set train.epochs=2"
           " --set train.batch_size=64 --set schedule.warmup_steps=0 --set schedule.kind=constant"
           " --set checkpoint.every_steps=3 --set train.log_every_steps=1 --set run.threads=1"
           " --set parallel.algorithm=outer --set parallel.outer.period=4 --set parallel.outer.start_fraction=0.5"
           " --set parallel.check_sums=true" + extra;
  };
  const auto a = run_command("SQUALL_RANKS_PER_NODE=2 SQUALL_FAIL_AT=0:5 " + mpiexec(4) + " " + job(""));
  INFO(output_tail(a));
  REQUIRE(fs::exists(fs::path(dir) / "checkpoints/step-00000003/node-00001.h5"));
  const double lr_at_3 = lr_of_step(dir, 3);
  const auto r = run_command("SQUALL_RANKS_PER_NODE=1 " + mpiexec(2) + " " +
                             job(" --resume auto --set elastic.batch=learner"));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  const json s = read_json(fs::path(dir) / "summary.json");
  REQUIRE(s.at("steps") == 3 + 10 + 16);
  const json& change = s.at("attempt").at("shape_change");
  CHECK(change.at("lr_scale").get<double>() == Approx(0.5));
  CHECK(lr_of_step(dir, 4) == Approx(lr_at_3 * 0.5));
  const json& outer = s.at("parallel").at("outer");
  CHECK(outer.at("start_step") == 13);
  // Outer steps after steps 1 to 13, then 17, 21, 25 and 29 (the last step).
  CHECK(outer.at("outer_steps") == 13 + 4);
}

TEST_CASE("local-sgd resumed on other ranks: its synchronous start stays where it was in samples",
          "[launch][checkpoint][elastic]") {
  // 4 ranks x 64 samples: 256 a step, 8 steps an epoch, 16 in the run; ssgd for the first 8
  // steps (parallel.start_step = 8: 2048 samples), then an average every 4. A checkpoint at step
  // 3, resumed on 2 ranks keeping 64 per learner: 128 a step. The start is then after 2048
  // samples, step 3 + 1280 / 128 = 13 of the resumed run, not its step 8.
  TempDir t("squall-elastic-local-start");
  const std::string dir = t.file("run");
  auto job = [&](const std::string& extra) {
    return squall_bin() + " train --config " + k_configs + "fashion-mnist-lenet5.toml --set run.dir=" + dir +
           " --set data.train_samples=2048 --set data.test_samples=256 --set train.epochs=2"
           " --set train.batch_size=64 --set schedule.warmup_steps=0 --set schedule.kind=constant"
           " --set checkpoint.every_steps=3 --set run.threads=1 --set parallel.algorithm=local-sgd"
           " --set parallel.period=4 --set parallel.start_step=8 --set parallel.check_sums=true" + extra;
  };
  const auto a = run_command("SQUALL_FAIL_AT=0:5 " + mpiexec(4) + " " + job(""));
  INFO(output_tail(a));
  REQUIRE(fs::exists(fs::path(dir) / "checkpoints/step-00000003/model.h5"));
  const auto r = run_command(mpiexec(2) + " " + job(" --resume auto --set elastic.batch=learner"));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  const json s = read_json(fs::path(dir) / "summary.json");
  REQUIRE(s.at("steps") == 3 + 10 + 16);
  CHECK(s.at("parallel").at("start_step") == 13);
}

TEST_CASE("data.sampling = local: a resume with the same ranks on another node layout is refused, naming it",
          "[launch][checkpoint][elastic]") {
  // 2 ranks on 2 (emulated) nodes read one half of the data each; on 1 node of 2 ranks the
  // halves would be cut otherwise, and the rest of epoch 1 would read some samples twice.
  TempDir t("squall-elastic-local-layout");
  const std::string dir = t.file("local");
  const std::string local = " --set data.sampling=local";
  const auto a = run_command("SQUALL_RANKS_PER_NODE=1 SQUALL_FAIL_AT=0:7 " + mpiexec(2) + " " + ssgd_job(dir, local));
  INFO(output_tail(a));
  REQUIRE(fs::exists(fs::path(dir) / "checkpoints/step-00000005/model.h5"));
  const auto r = run_command("SQUALL_RANKS_PER_NODE=2 " + mpiexec(2) + " " + ssgd_job(dir, local + " --resume auto"));
  INFO(output_tail(r));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("step-00000005") && Contains("2 node(s) of 1, 1 rank(s)") &&
                        Contains("1 node(s) of 2 rank(s)") && Contains("data.sampling = local") &&
                        Contains("--ranks-per-node") && Contains("data.sampling = global"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "summary.json"));
  // On its own layout it resumes.
  const auto same = run_command("SQUALL_RANKS_PER_NODE=1 " + mpiexec(2) + " " + ssgd_job(dir, local + " --resume auto"));
  INFO(output_tail(same));
  CHECK(same.exit_code == 0);
}
