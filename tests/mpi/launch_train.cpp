// `squall train` under mpiexec: several ranks x several learners train Fashion-MNIST
// together, the run outputs describe the job, the timeline holds every rank's phases, and a
// failing or stalled rank ends the job with a line that names it.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::read_json;
using squall::test::read_records;
using squall::test::fresh_dir;
namespace fs = std::filesystem;

namespace {

const std::string k_sma = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-sma.toml";

}  // namespace

TEST_CASE("4 ranks on 2 emulated nodes x 2 learners with sma reach test accuracy 0.88", "[launch][train][slow]") {
  const std::string dir = fresh_dir("launch-train-sma");
  const auto r = run_command(mpiexec(4) + " " + squall_bin() + " train --config " + k_sma +
                             " --ranks-per-node 2 --set parallel.replicas_per_device=2 --timeline --set run.dir=" + dir);
  INFO(r.out.substr(r.out.size() > 3000 ? r.out.size() - 3000 : 0) << r.err);
  REQUIRE(r.exit_code == 0);
  const json s = read_json(dir + "/summary.json");
  CHECK(s.at("world_size") == 4);
  CHECK(s.at("nodes") == 2);
  CHECK(s.at("replicas_per_device") == 2);
  CHECK(s.at("algorithm") == "sma");
  CHECK(s.at("global_batch") == 4 * 2 * 16);
  CHECK(s.at("final").at("test_accuracy").get<double>() >= 0.88);
  CHECK(s.at("time_breakdown_s").at("allreduce").get<double>() > 0);
  CHECK(s.at("model_checksum").get<std::string>().size() == 16);
  CHECK_THAT(r.out, Catch::Contains("4 rank(s) on 2 node(s) x 2 learner(s)"));

  // The timeline: every rank, both learners, every level of the allreduce.
  const json t = read_json(dir + "/timeline.json");
  std::set<int> pids;
  std::set<std::string> names;
  int negative = 0;
  for (const auto& e : t.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    pids.insert(e.at("pid").get<int>());
    names.insert(e.at("name").get<std::string>());
    if (e.at("dur").get<double>() < 0) ++negative;
  }
  CHECK(negative == 0);
  CHECK(pids == std::set<int>{0, 1, 2, 3});
  for (const char* n : {"load", "forward", "backward", "device_sum", "node reduce-scatter", "cross-node allreduce",
                        "node allgather", "update", "host_wait", "eval"})
    CHECK(names.count(n) == 1);
  fs::remove_all(dir);
}

TEST_CASE("ssgd and local-sgd over ranks and learners end with the same model on every rank", "[launch][train]") {
  for (const std::string algo : {"ssgd", "local-sgd"}) {
    const std::string dir = fresh_dir("launch-train-" + algo);
    // period and start_step apply to local-sgd only (an ssgd config that sets them is refused).
    const std::string local = algo == "local-sgd" ? " --set parallel.period=4 --set parallel.start_step=10" : "";
    // ssgd crosses the 2 nodes by halving-doubling (forced), local-sgd by auto's choice there, the ring.
    const std::string cross = algo == "ssgd" ? " --set parallel.cross_node=halving-doubling" : "";
    const auto r = run_command(mpiexec(3) + " " + squall_bin() + " train --config " + k_sma + " --ranks-per-node 2" +
                               " --set parallel.algorithm=" + algo + local + cross + " --set train.max_steps=60 --set schedule.warmup_steps=0" +
                               " --set data.test_samples=500 --set run.dir=" + dir);
    INFO(algo << "\n" << r.err);
    REQUIRE(r.exit_code == 0);  // the end-of-run check compares the ranks' central models
    const json s = read_json(dir + "/summary.json");
    CHECK(s.at("algorithm") == algo);
    CHECK(s.at("world_size") == 3);
    CHECK(s.at("nodes") == 2);
    CHECK(s.at("steps") == 60);
    CHECK(s.at("final").at("test_accuracy").get<double>() > 0.5);  // 60 steps: far above chance (0.1)
    // The breakdown is wall time: sums in flight at once (ssgd's gradient buckets) count once.
    const json& tb = s.at("time_breakdown_s");
    CHECK(tb.at("compute").get<double>() >= 0);
    CHECK(tb.at("allreduce").get<double>() + tb.at("compute").get<double>() <= s.at("wall_s").get<double>());
    const std::string ran = algo == "ssgd" ? "halving-doubling" : "ring";
    CHECK(s.at("parallel").at("cross_node") == ran);
    CHECK_THAT(r.out, Catch::Contains(algo == "ssgd" ? "allreduce: cross-node stage halving-doubling among 2 nodes (forced)"
                                                     : "allreduce: cross-node stage auto among 2 nodes"));
    fs::remove_all(dir);
  }
}

TEST_CASE("the auto-tuner reports its decisions and ends on a learner count", "[launch][train]") {
  const std::string dir = fresh_dir("launch-train-autotune");
  const auto r = run_command(squall_bin() + " train --config " + k_sma + " --set parallel.autotune=true" +
                             " --set parallel.replicas_per_device=1 --set parallel.max_replicas_per_device=3" +
                             " --set train.max_steps=400 --set data.test_samples=500 --set run.dir=" + dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("autotune step"));
  const json s = read_json(dir + "/summary.json");
  const json& decisions = s.at("parallel").at("autotune");
  REQUIRE(decisions.size() >= 1);
  CHECK(decisions[0].at("learners") == 1);
  CHECK(decisions[0].at("samples_per_s").get<double>() > 0);
  const int final_learners = s.at("replicas_per_device").get<int>();
  CHECK(final_learners >= 1);
  CHECK(final_learners <= 3);
  // metrics.jsonl has one autotune record per decision that changed the learner count.
  std::ifstream m(dir + "/metrics.jsonl");
  int records = 0;
  for (std::string line; std::getline(m, line);)
    if (json::parse(line).at("kind") == "autotune") ++records;
  CHECK(records >= 1);
  fs::remove_all(dir);
}

TEST_CASE("the auto-tuner's learner changes reshape the rest of the run: steps per epoch and total steps",
          "[launch][train]") {
  // One epoch of 8000 samples in batches of 16: 500 batches. Every step takes one batch per
  // learner, so once the tuner adds learners the epoch has fewer steps, and the run must still
  // end after exactly one epoch's samples.
  const std::string dir = fresh_dir("launch-train-autotune-steps");
  const auto r = run_command(squall_bin() + " train --config " + k_sma + " --set parallel.autotune=true" +
                             " --set parallel.replicas_per_device=1 --set parallel.max_replicas_per_device=3" +
                             " --set train.epochs=1 --set data.train_samples=8000 --set data.test_samples=500" +
                             " --set schedule.warmup_steps=20 --set run.dir=" + dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream m(dir + "/metrics.jsonl");
  std::vector<json> changes, evals;
  for (std::string line; std::getline(m, line);) {
    const json j = json::parse(line);
    if (j.at("kind") == "autotune") changes.push_back(j);
    if (j.at("kind") == "eval") evals.push_back(j);
  }
  REQUIRE(changes.size() >= 1);
  int64_t step = 0, batches = 0, learners = 1;
  for (const json& c : changes) {
    batches += (c.at("step").get<int64_t>() - step) * learners;
    step = c.at("step").get<int64_t>();
    learners = c.at("learners").get<int64_t>();
    CHECK(c.at("steps_per_epoch") == 500 / learners);
    // The rest of the epoch's batches, in steps of `learners`.
    CHECK(c.at("total_steps") == step + (500 - batches) / learners);
  }
  const json s = read_json(dir + "/summary.json");
  CHECK(s.at("steps") == changes.back().at("total_steps"));
  CHECK(s.at("steps").get<int64_t>() < 500);  // more than one learner for part of the epoch
  REQUIRE(evals.size() == 1);
  CHECK(evals[0].at("epochs_done").get<double>() > 0.99);
  CHECK(evals[0].at("epochs_done").get<double>() <= 1.0);
  fs::remove_all(dir);
}

TEST_CASE("a 2-rank run's log redirected to a file holds plain lines: no carriage return, no escape sequence",
          "[launch][train]") {
  // Open MPI hands every rank a pseudo-terminal even when the job's output goes to a file: the
  // progress line must not be redrawn there (io/records/progress.hpp).
  const std::string dir = fresh_dir("launch-train-log");
  const std::string log = dir + ".log";
  const auto r = run_command(mpiexec(2) + " " + squall_bin() + " train --config " + k_sma +
                             " --set train.max_steps=40 --set schedule.warmup_steps=0 --set train.log_every_steps=10"
                             " --set data.test_samples=200"
                             " --set run.dir=" + dir + " > " + log + " 2>&1");
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(text);
  REQUIRE(r.exit_code == 0);
  CHECK(text.find('\r') == std::string::npos);
  CHECK(text.find('\033') == std::string::npos);
  // One plain progress line per train.log_every_steps steps.
  for (const char* step : {"step 10/40 ", "step 20/40 ", "step 30/40 ", "step 40/40 "})
    CHECK_THAT(text, Catch::Contains(step));
  CHECK_THAT(text, !Catch::Contains("step 15/40 "));
  // The run dir holds the resolved config, which `squall train --config` reads back.
  std::ifstream config(dir + "/config.toml");
  const std::string toml((std::istreambuf_iterator<char>(config)), std::istreambuf_iterator<char>());
  CHECK_THAT(toml, Catch::Contains("[model]") && Catch::Contains("max_steps = 40"));
  const auto again = run_command(squall_bin() + " train --config " + dir + "/config.toml --set run.dir=" + dir +
                                 "-again --set train.max_steps=1 --set data.test_samples=10");
  INFO(again.err);
  CHECK(again.exit_code == 0);
  fs::remove_all(dir + "-again");
  fs::remove_all(dir);
  fs::remove(log);
}

TEST_CASE("train.target stops a LeNet-5 run at the first evaluation >= 0.85 and records the time to target",
          "[launch][train][target]") {
  const std::string dir = fresh_dir("launch-train-target");
  const std::string job = mpiexec(2) + " " + squall_bin() + " train --config " + std::string(SQUALL_SOURCE_DIR) +
                          "/configs/fashion-mnist-lenet5.toml --set run.dir=" + dir +
                          " --set train.eval_every_steps=100 --set train.target.metric=accuracy"
                          " --set train.target.value=0.85 --set run.mllog=true --set data.test_samples=2000";
  const auto r = run_command(job);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<json> evals = read_records(dir + "/metrics.jsonl", "eval");
  const std::vector<json> targets = read_records(dir + "/metrics.jsonl", "target");
  REQUIRE(evals.size() >= 2);
  // The first evaluation that reaches it is the last one.
  for (size_t i = 0; i + 1 < evals.size(); ++i) CHECK(evals[i].at("test_accuracy").get<double>() < 0.85);
  const json& hit = evals.back();
  CHECK(hit.at("test_accuracy").get<double>() >= 0.85);
  REQUIRE(targets.size() == 1);
  CHECK(targets[0].at("step") == hit.at("step"));
  CHECK(targets[0].at("value") == hit.at("test_accuracy"));
  CHECK(targets[0].at("metric") == "accuracy");
  const json s = read_json(dir + "/summary.json");
  const json& t = s.at("target");
  CHECK(t.at("reached") == true);
  CHECK(t.at("step") == hit.at("step"));
  CHECK(t.at("metric_value") == hit.at("test_accuracy"));
  CHECK(t.at("time_to_target_s").get<double>() > 0);
  CHECK(t.at("time_to_target_s") == targets[0].at("elapsed_s"));
  CHECK(s.at("steps") == hit.at("step"));
  CHECK(s.at("steps").get<int64_t>() < 5 * 468);  // five epochs of 2 ranks' halves
  CHECK_THAT(r.out, Catch::Contains("target reached: test accuracy"));
  // It ends with a checkpoint at that step, and a resumed job has nothing to do.
  const std::string step = std::to_string(hit.at("step").get<int64_t>());
  CHECK(fs::exists(dir + "/checkpoints/step-" + std::string(8 - step.size(), '0') + step + "/model.h5"));
  const auto again = run_command(job + " --resume auto");
  INFO(again.out << again.err);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.out, Catch::Contains("the run is complete") && Catch::Contains("reached train.target"));
  // The MLPerf log ends in success.
  std::ifstream ml(dir + "/mlperf.log");
  std::string last, line;
  while (std::getline(ml, line)) last = line;
  CHECK_THAT(last, Catch::Contains("\"run_stop\"") && Catch::Contains("\"status\":\"success\""));
  // A raised target trains on from the checkpoint, to the next evaluation that reaches it.
  const auto higher = run_command(job + " --set train.target.value=0.86 --resume auto");
  INFO(higher.out << higher.err);
  REQUIRE(higher.exit_code == 0);
  const json s2 = read_json(dir + "/summary.json");
  CHECK(s2.at("attempt").at("first_step") == hit.at("step"));
  CHECK(s2.at("steps").get<int64_t>() > hit.at("step").get<int64_t>());
  CHECK(s2.at("target").at("reached") == true);
  CHECK(s2.at("target").at("metric_value").get<double>() >= 0.86);
  CHECK(s2.at("target").at("time_to_target_s").get<double>() > t.at("time_to_target_s").get<double>());
  // --overwrite starts the records afresh: one event file, one attempt in the MLPerf log.
  const auto fresh = run_command(job + " --set train.max_steps=100 --set schedule.warmup_steps=0 --overwrite");
  INFO(fresh.err);
  REQUIRE(fresh.exit_code == 0);
  int event_files = 0;
  for (const auto& e : fs::directory_iterator(dir + "/tensorboard")) event_files += e.path().filename().string().find("tfevents") != std::string::npos;
  CHECK(event_files == 1);
  std::ifstream ml3(dir + "/mlperf.log");
  int init_starts = 0;
  while (std::getline(ml3, line)) init_starts += line.find("\"init_start\"") != std::string::npos;
  CHECK(init_starts == 1);

  // A target out of reach: the run trains to its end and says so.
  const auto miss = run_command(mpiexec(2) + " " + squall_bin() + " train --config " + std::string(SQUALL_SOURCE_DIR) +
                                "/configs/fashion-mnist-lenet5.toml --set run.dir=" + dir + "-miss" +
                                " --set train.max_steps=60 --set schedule.warmup_steps=0 --set train.eval_every_steps=30"
                                " --set train.target.metric=accuracy --set train.target.value=0.99 --set run.mllog=true"
                                " --set data.test_samples=500");
  INFO(miss.err);
  REQUIRE(miss.exit_code == 0);
  const json sm = read_json(dir + "-miss/summary.json");
  CHECK(sm.at("steps") == 60);
  CHECK(sm.at("target").at("reached") == false);
  CHECK_FALSE(sm.at("target").contains("time_to_target_s"));
  std::ifstream ml2(dir + "-miss/mlperf.log");
  while (std::getline(ml2, line)) last = line;
  CHECK_THAT(last, Catch::Contains("\"run_stop\"") && Catch::Contains("\"status\":\"aborted\""));
  fs::remove_all(dir);
  fs::remove_all(dir + "-miss");
}

TEST_CASE("1 rank x 40 learners of sma train 2 epochs to test accuracy 0.75", "[launch][train][sma][slow]") {
  // Crossbow's rule moved the centre by alpha x 40 = 4 times the gap and diverged at step 37.
  const std::string dir = fresh_dir("launch-train-sma40");
  // 2 epochs of 40 learners are 186 steps: the config's warm-up of 200 would outlast them.
  const auto r = run_command(squall_bin() + " train --config " + k_sma + " --set parallel.replicas_per_device=40" +
                             " --set parallel.max_replicas_per_device=40 --set train.epochs=2" +
                             " --set schedule.warmup_steps=150 --set run.dir=" + dir);
  INFO(r.out.substr(r.out.size() > 2000 ? r.out.size() - 2000 : 0) << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("sma: 40 learner(s)") && Catch::Contains("beta 1"));
  const json s = read_json(dir + "/summary.json");
  CHECK(s.at("replicas_per_device") == 40);
  CHECK(s.at("parallel").at("centre_rate") == 1.0);
  CHECK(s.at("final").at("test_accuracy").get<double>() >= 0.75);
  fs::remove_all(dir);
}

TEST_CASE("a central model that could never move is refused, naming the keys", "[launch][train][sma]") {
  const auto alpha = run_command(squall_bin() + " train --config " + k_sma + " --set parallel.alpha=0");
  CHECK(alpha.exit_code == 2);
  CHECK_THAT(alpha.err, Catch::Contains("parallel.alpha") && Catch::Contains("initial model"));
  const auto period = run_command(squall_bin() + " train --config " + k_sma +
                                  " --set parallel.period=1000 --set train.max_steps=500");
  CHECK(period.exit_code == 2);
  CHECK_THAT(period.err, Catch::Contains("parallel.period") && Catch::Contains("500 steps"));
  const auto rate = run_command(squall_bin() + " train --config " + k_sma + " --set parallel.centre_rate=3.8");
  CHECK(rate.exit_code == 2);
  CHECK_THAT(rate.err, Catch::Contains("parallel.centre_rate") && Catch::Contains("unstable"));
}

TEST_CASE("a rank that fails mid-training ends the job with a line naming it", "[launch][train]") {
  const std::string dir = fresh_dir("launch-train-fail");
  const auto r = run_command("SQUALL_FAIL_AT=1:5 " + mpiexec(2) + " " + squall_bin() + " train --config " + k_sma +
                             " --set train.max_steps=50 --set schedule.warmup_steps=0 --set run.dir=" + dir);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("rank 1") && Catch::Contains("step 5"));
  CHECK_FALSE(fs::exists(dir + "/summary.json"));
  fs::remove_all(dir);
}

TEST_CASE("a stalled rank is named, and the job ends instead of hanging", "[launch][train]") {
  const std::string dir = fresh_dir("launch-train-stall");
  const auto r = run_command("SQUALL_STALL_AT=2:3:60 " + mpiexec(3) + " " + squall_bin() + " train --config " + k_sma +
                             " --stall-warn 1 --stall-abort 4 --set train.max_steps=50 --set schedule.warmup_steps=0"
                             " --set run.dir=" + dir);
  CHECK(r.exit_code != 0);
  const std::string all = r.out + r.err;
  CHECK_THAT(all, Catch::Contains("stall"));
  CHECK_THAT(all, Catch::Contains("rank 2") || Catch::Contains("ranks 2"));
  CHECK_FALSE(fs::exists(dir + "/summary.json"));
  fs::remove_all(dir);
}

TEST_CASE("a rank that stops with a sum in flight is named by the newer sum it has not joined", "[launch][train]") {
  // ssgd on 2 emulated nodes (the pipeline): step 10's gradient bucket is collective 19, its
  // state 20. Rank 1 joins 19 and sleeps before 20, so 19, which every rank has joined, waits
  // for rank 1 to drive it; the watchdog names rank 1 by collective 20. Without the sum check:
  // rank 0 would wait in it for rank 1's record of sum 20, before joining 20 (docs/allreduce.md).
  const std::string dir = fresh_dir("launch-train-stall-in-flight");
  const auto r = run_command("SQUALL_CHECK_SUMS=0 SQUALL_STALL_AT=1:20:60 " + mpiexec(2) + " " + squall_bin() + " train --config " +
                             std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml --ranks-per-node 1" +
                             " --stall-warn 1 --stall-abort 3 --set parallel.algorithm=ssgd" +
                             " --set parallel.replicas_per_device=1 --set train.max_steps=50" +
                             " --set schedule.warmup_steps=0 --set data.train_samples=4096 --set run.dir=" + dir);
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("stall: collective 19 (gradients step 10 bucket 1) waited") &&
                        Catch::Contains("every rank has joined it, but it has not completed; rank 1 (host ") &&
                        Catch::Contains("has not joined collective 20, which rank 0 has; ending the job"));
  fs::remove_all(dir);
}

TEST_CASE("bad parallel settings are refused with the key named", "[launch][train]") {
  const auto r = run_command(squall_bin() + " train --config " + k_sma + " --set parallel.algorithm=easgd");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("parallel.algorithm"));
  const auto big = run_command(squall_bin() + " train --config " + k_sma +
                               " --set train.batch_size=40000 --set parallel.replicas_per_device=2");
  CHECK(big.exit_code != 0);
  CHECK_THAT(big.err, Catch::Contains("batch_size"));
}

TEST_CASE("run.cpu_streams: async streams with random delays train to the model inline streams do",
          "[launch][train][backend]") {
  // Two learners: their streams, the group's, events and host waits all take part. Any wait
  // the group leaves out shows as another model (or a crash) under async with jitter.
  const std::string lenet = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";
  std::map<std::string, std::string> checksum;
  for (const std::string mode : {"inline", "async"}) {
    const std::string dir = fresh_dir("cpu-streams-" + mode);
    const auto r = run_command("SQUALL_CPU_STREAM_JITTER=100 " + squall_bin() + " train --config " + lenet +
                               " --set train.max_steps=30 --set schedule.warmup_steps=0" +
                               " --set parallel.replicas_per_device=2" +
                               " --set data.test_samples=500 --set run.cpu_streams=" + mode + " --set run.dir=" + dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json s = read_json(dir + "/summary.json");
    CHECK(s["steps"] == 30);
    // The summary says which streams the backend ran, and the jitter of async ones (tests
    // across nodes check from it that the async path was taken).
    CHECK(s["cpu_streams"] == mode);
    if (mode == "async") {
      CHECK(s["cpu_stream_jitter_us"] == 100);
    } else {
      CHECK_FALSE(s.contains("cpu_stream_jitter_us"));
    }
    // One rank: the host waits for the device once a step, where it reads the losses (the
    // loader's batches are pinned under async streams, so their copies do not wait).
    CHECK(s["parallel"]["host_waits_per_step"] == 1.0);
    checksum[mode] = s["model_checksum"].get<std::string>();
    fs::remove_all(dir);
  }
  CHECK(checksum["async"] == checksum["inline"]);
  const auto bad = run_command(squall_bin() + " train --config " + lenet + " --set run.cpu_streams=deferred");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("run.cpu_streams"));
}

TEST_CASE("run.cpu_streams: 2 ranks x 2 learners of ssgd, sma and local-sgd train to the same model on async "
          "streams with random delays as on inline ones",
          "[launch][train][backend][slow]") {
  // Across ranks every ordering of the step takes part: ssgd's gradient buckets handed to the
  // allreduce as the backward passes finish them (small buckets: several in flight), sma's
  // model sum during the passes, local-sgd's warm-up and its averages. A wait the group
  // leaves out shows as another model (or a crash) under async streams with jitter.
  const std::string lenet = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";
  const std::map<std::string, std::string> algorithms{
      {"ssgd", " --set parallel.algorithm=ssgd --set parallel.bucket_mb=0.02"},
      {"sma", " --set parallel.algorithm=sma"},
      {"local-sgd", " --set parallel.algorithm=local-sgd --set parallel.start_step=8 --set parallel.period=3"}};
  for (const auto& [algorithm, sets] : algorithms) {
    std::map<std::string, std::string> checksum;
    for (const std::string mode : {"inline", "async"}) {
      INFO(algorithm << " on " << mode << " streams");
      const std::string dir = fresh_dir("cpu-streams-2x2-" + algorithm + "-" + mode);
      const auto r = run_command("SQUALL_CPU_STREAM_JITTER=50 " + mpiexec(2) + " " + squall_bin() + " train --config " +
                                 lenet + sets + " --set train.max_steps=20 --set schedule.warmup_steps=0" +
                                 " --set parallel.replicas_per_device=2" +
                                 " --set data.test_samples=256 --set run.threads=1 --set run.cpu_streams=" + mode +
                                 " --set run.dir=" + dir);
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      const json s = read_json(dir + "/summary.json");
      CHECK(s["steps"] == 20);
      CHECK(s["world_size"] == 2);
      CHECK(s["cpu_streams"] == mode);
      if (algorithm == "ssgd") CHECK(s["parallel"]["buckets"].get<int>() > 1);
      checksum[mode] = s["model_checksum"].get<std::string>();
      fs::remove_all(dir);
    }
    INFO(algorithm);
    CHECK(checksum["async"] == checksum["inline"]);
  }
}

TEST_CASE("run.backend: cuda trains on a GPU or exits 1 saying why: auto falls back to the CPU", "[launch][train][backend]") {
  const std::string lenet = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";
  const std::string quick = " --set train.max_steps=5 --set schedule.warmup_steps=0 --set data.test_samples=256"
                            " --set train.log_every_steps=5";
  {
    const std::string dir = fresh_dir("launch-train-cuda");
    const auto r = run_command(squall_bin() + " train --config " + lenet + quick + " --set run.backend=cuda --set run.dir=" + dir);
    INFO(r.out << r.err);
    if (r.exit_code == 0) {  // a machine with a GPU: it trained there
      CHECK(read_json(dir + "/summary.json").at("backend") == "cuda");
    } else {
      CHECK(r.exit_code == 1);  // not a usage error: the same command is right on a GPU node
      CHECK_THAT(r.err, Catch::Contains("run.backend = cuda, but no GPU can be used: "));
      CHECK_THAT(r.err, Catch::Contains("run.backend = cpu or auto"));
      CHECK_FALSE(fs::exists(dir + "/summary.json"));
    }
  }
  {
    const std::string dir = fresh_dir("launch-train-auto");
    const auto r = run_command(squall_bin() + " train --config " + lenet + quick + " --set run.backend=auto --set run.dir=" + dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const json s = read_json(dir + "/summary.json");
    CHECK((s.at("backend") == "cpu" || s.at("backend") == "cuda"));
    CHECK(!s.at("device").get<std::string>().empty());
  }
  {
    const auto r = run_command(squall_bin() + " train --config " + lenet + quick +
                               " --set run.backend=cuda --set parallel.cuda_graphs=true --set model.dropout=0.5 --set run.dir=" +
                               fresh_dir("launch-train-graphs"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("parallel.cuda_graphs") && Catch::Contains("dropout"));
  }
}

TEST_CASE("parallel.device_allreduce: sums on the GPU across ranks, or a clear refusal", "[launch][train][backend][gpu]") {
  const std::string lenet = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";
  const std::string quick = " --set train.max_steps=6 --set schedule.warmup_steps=0 --set data.test_samples=256"
                            " --set train.log_every_steps=6";
  {  // the CPU backend has no GPU memory to sum: a usage error naming both keys, on every rank
    const auto r = run_command(mpiexec(2) + " " + squall_bin() + " train --config " + lenet + quick +
                               " --set parallel.device_allreduce=nccl --set run.dir=" + fresh_dir("launch-train-devar-cpu"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("parallel.device_allreduce = nccl") && Catch::Contains("run.backend = cuda"));
  }
  {  // CUDA: device-hier on 2 emulated nodes of one rank (both may share one GPU)
    const std::string dir = fresh_dir("launch-train-devar-cuda");
    const auto r = run_command(mpiexec(2) + " " + squall_bin() + " train --config " + lenet + quick +
                               " --ranks-per-node 1 --set run.backend=cuda --set parallel.device_allreduce=device-hier"
                               " --set run.dir=" + dir);
    INFO(r.out << r.err);
    if (r.exit_code == 0) {
      const json s = read_json(dir + "/summary.json");
      CHECK(s.at("backend") == "cuda");
      CHECK_THAT(s.at("parallel").at("device_allreduce").get<std::string>(), Catch::StartsWith("device-hier"));
    } else {
      CHECK(r.exit_code == 1);
      CHECK_THAT(r.err, Catch::Contains("no GPU can be used"));
    }
  }
}

TEST_CASE("train.precision: fp16 with loss scaling records skipped steps: a bad precision is refused",
          "[launch][train][precision]") {
  const std::string lenet = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";
  const std::string quick = " --set train.max_steps=40 --set schedule.warmup_steps=0 --set data.test_samples=256"
                            " --set train.log_every_steps=10";
  {  // 2 ranks, ssgd: an initial scale of 2^30 overflows f16 until it has halved about a dozen times
    const std::string dir = fresh_dir("launch-train-fp16");
    const auto r = run_command(mpiexec(2) + " " + squall_bin() + " train --config " + lenet + quick +
                               " --set train.precision=fp16 --set train.cpu_precision=reference"
                               " --set train.loss_scale=1073741824 --set run.dir=" + dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const json s = read_json(dir + "/summary.json");
    CHECK(s.at("precision") == "fp16");
    const int64_t skipped = s.at("skipped_steps").get<int64_t>();
    CHECK(skipped >= 5);
    CHECK(skipped < 40);
    std::ifstream m(dir + "/metrics.jsonl");
    int records = 0;
    double last_scale = 0;
    int64_t last_skipped = 0;
    for (std::string line; std::getline(m, line);) {
      const json j = json::parse(line);
      if (j.at("kind") != "train") continue;
      ++records;
      last_scale = j.at("loss_scale").get<double>();
      last_skipped = j.at("skipped_steps").get<int64_t>();
    }
    CHECK(records == 4);
    CHECK(last_skipped == skipped);
    // Every skip halved the scale; fewer than 2000 clean steps never doubled it.
    CHECK(last_scale == std::ldexp(1.0, 30 - static_cast<int>(skipped)));
    CHECK(std::isfinite(s.at("final").at("train_loss").get<double>()));
  }
  {  // bf16 needs no loss scale: no skipped steps
    const std::string dir = fresh_dir("launch-train-bf16");
    const auto r = run_command(squall_bin() + " train --config " + lenet + quick +
                               " --set train.precision=bf16 --set train.cpu_precision=reference --set run.dir=" + dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.err, Catch::Contains("train.cpu_precision = reference"));
    const json s = read_json(dir + "/summary.json");
    CHECK(s.at("precision") == "bf16");
    CHECK(s.at("skipped_steps") == 0);
  }
  {  // Without train.cpu_precision = reference: oneDNN's bf16 primitives where the CPU has bf16
     // arithmetic, refused where it has none (naming the ISA and the key); fp16 always refused.
    const auto info = run_command(squall_bin() + " info --json");
    REQUIRE(info.exit_code == 0);
    const json build = json::parse(info.out).at("build");
    const bool has_bf16 = build.at("cpu_bf16").get<bool>();
    const std::string isa = build.at("cpu_isa").get<std::string>();
    for (const std::string type : {"bf16", "fp16"}) {
      const std::string dir = fresh_dir("launch-train-native-" + type);
      const auto r = run_command(squall_bin() + " train --config " + lenet + quick + " --set train.precision=" + type +
                                 " --set run.dir=" + dir);
      INFO(r.out << r.err);
      if (type == "bf16" && has_bf16) {
        CHECK(r.exit_code == 0);
        CHECK_THAT(r.out, Catch::Contains("oneDNN's bf16 primitives"));
        continue;
      }
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err, Catch::Contains("train.precision = " + type) && Catch::Contains(isa) &&
                            Catch::Contains("train.cpu_precision = \"reference\""));
      CHECK_FALSE(fs::exists(dir + "/summary.json"));
    }
  }
  {  // bf16 gradient sums across 2 ranks; refused where the sums are of models
    const std::string dir = fresh_dir("launch-train-bf16-comm");
    const auto r = run_command(mpiexec(2) + " " + squall_bin() + " train --config " + lenet + quick +
                               " --set parallel.comm_precision=bf16 --set run.dir=" + dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const json s = read_json(dir + "/summary.json");
    CHECK(s.at("parallel").at("comm_precision") == "bf16");
    CHECK(std::isfinite(s.at("final").at("train_loss").get<double>()));
    const auto refused = run_command(squall_bin() + " train --config " + lenet + quick +
                                     " --set parallel.comm_precision=bf16 --set parallel.algorithm=sma --set run.dir=" +
                                     fresh_dir("launch-train-bf16-sma"));
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.err, Catch::Contains("parallel.comm_precision") && Catch::Contains("sma"));
  }
  {
    const auto r = run_command(squall_bin() + " train --config " + lenet + quick +
                               " --set train.precision=fp8 --set run.dir=" + fresh_dir("launch-train-fp8"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("train.precision") && Catch::Contains("fp8"));
  }
}

TEST_CASE("model.layout: nhwc and blocked train as nchw does, auto is blocked on the CPU, a bad layout is refused",
          "[launch][train][layout]") {
  const std::string lenet = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";
  const std::string quick = " --set train.max_steps=30 --set schedule.warmup_steps=0 --set data.test_samples=256"
                            " --set train.log_every_steps=10";
  std::map<std::string, json> summaries;
  for (const std::string layout : {"auto", "nchw", "nhwc", "blocked"}) {
    const std::string dir = fresh_dir("layout-" + layout);
    const auto r = run_command(squall_bin() + " train --config " + lenet + quick + " --set model.layout=" + layout +
                               " --set run.dir=" + dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    summaries[layout] = read_json(dir + "/summary.json");
  }
  CHECK(summaries["nchw"].at("layout") == "nchw");
  CHECK(summaries["nhwc"].at("layout") == "nhwc");
  // LeNet-5's 16-channel tensors are blocked, its 1- and 6-channel ones are not (x86: oneDNN
  // blocks by 8 or 16).
  const std::string blocked = summaries["blocked"].at("layout").get<std::string>();
  CHECK(summaries["auto"].at("layout") == blocked);
  CHECK_THAT(blocked, Catch::StartsWith("nchw8c (") || Catch::StartsWith("nchw16c ("));
  // The same model and steps: only the order of the float sums differs.
  const double a = summaries["nchw"].at("final").at("train_loss").get<double>();
  for (const std::string other : {"nhwc", "blocked"}) {
    INFO(other);
    const double b = summaries[other].at("final").at("train_loss").get<double>();
    CHECK(std::abs(a - b) < 0.02 * std::abs(a));
  }
  const auto bad = run_command(squall_bin() + " train --config " + lenet + quick +
                               " --set model.layout=nchwc --set run.dir=" + fresh_dir("launch-train-layout-bad"));
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("model.layout") && Catch::Contains("nchwc"));
}

TEST_CASE("climate segmentation end to end: generated fields, TECA-style labels, a unet, per-class IoU in the records",
          "[launch][train][climate]") {
  const std::string raw = fresh_dir("launch-train-climate-raw"), labelled = fresh_dir("launch-train-climate-labelled"), dir = fresh_dir("launch-train-climate-run");
  auto gen = run_command(squall_bin() + " data climate --out " + raw + " --samples 6 --height 48 --width 72 --seed 3");
  INFO(gen.out << gen.err);
  REQUIRE(gen.exit_code == 0);
  auto label = run_command(squall_bin() + " data label --in " + raw + " --out " + labelled);
  INFO(label.out << label.err);
  REQUIRE(label.exit_code == 0);
  const std::string lenet = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";
  const auto r = run_command(squall_bin() + " train --config " + lenet + " --set model.name=unet --set model.width=4" +
                             " --set model.depth=2 --set train.batch_size=2 --set train.max_steps=6" +
                             " --set schedule.warmup_steps=0" +
                             " --set train.log_every_steps=3 --set data.train=" + labelled + " --set data.test=" +
                             labelled + " --set data.test_samples=4 --set schedule.warmup_steps=0 --set run.dir=" + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  int evals = 0;
  std::ifstream m(dir + "/metrics.jsonl");
  for (std::string line; std::getline(m, line);) {
    const json j = json::parse(line);
    if (j.at("kind") != "eval") continue;
    ++evals;
    REQUIRE(j.contains("test_iou_per_class"));
    CHECK(j.at("test_iou_per_class").size() == 3);  // background, tropical cyclone, atmospheric river
    const double miou = j.at("test_miou").get<double>();
    CHECK(miou >= 0.0);
    CHECK(miou <= 1.0);
  }
  CHECK(evals >= 1);
  const json s = read_json(dir + "/summary.json");
  CHECK(s.at("final").at("test_iou_per_class").size() == 3);
  CHECK(s.at("final").contains("test_miou"));
  CHECK_THAT(r.out + r.err, Catch::Contains("test mean IoU") && Catch::Contains("atmospheric river"));
  // The picture of the last evaluation: a PNG of the first evaluation batch (2 samples), each
  // a strip of three 72 x 48 panels with 4-pixel gaps (tests/unit/test_png.cpp checks the pixels).
  std::ifstream png(dir + "/predictions/epoch-" + std::to_string(s.at("epochs").get<int64_t>()) + ".png",
                    std::ios::binary);
  REQUIRE(png.good());
  std::vector<unsigned char> head(24);
  png.read(reinterpret_cast<char*>(head.data()), 24);
  CHECK(std::string(head.begin() + 1, head.begin() + 4) == "PNG");
  CHECK(std::string(head.begin() + 12, head.begin() + 16) == "IHDR");
  auto be32 = [&](size_t at) { return (head[at] << 24) | (head[at + 1] << 16) | (head[at + 2] << 8) | head[at + 3]; };
  CHECK(be32(16) == 3 * 72 + 2 * 4);
  CHECK(be32(20) == 2 * 48 + 4);
}

TEST_CASE("configs/deepcam.toml: DeepLabv3+ on ResNet-50 builds at 768 x 1152 x 16 and takes a step on one sample",
          "[launch][train][climate][deepcam]") {
  const std::string raw = fresh_dir("launch-train-deepcam-raw"), labelled = fresh_dir("launch-train-deepcam-labelled"), dir = fresh_dir("launch-train-deepcam-run");
  auto gen = run_command(squall_bin() + " data climate --out " + raw + " --samples 1 --height 768 --width 1152 --seed 4");
  INFO(gen.out << gen.err);
  REQUIRE(gen.exit_code == 0);
  auto label = run_command(squall_bin() + " data label --in " + raw + " --out " + labelled);
  INFO(label.out << label.err);
  REQUIRE(label.exit_code == 0);
  // fp32 here: on the CPU bf16 is the slower reference computation, and the step is the point.
  const auto r = run_command(squall_bin() + " train --config " + std::string(SQUALL_SOURCE_DIR) +
                             "/configs/deepcam.toml --set data.train=" + labelled + " --set data.test=" + labelled +
                             " --set data.test_samples=1 --set train.batch_size=1 --set train.max_steps=1" +
                             // one step: no warm-up, and no milestone (at step 800) to come
                             " --set schedule.warmup_steps=0 --set schedule.kind=constant --set schedule.milestones=[]" +
                             " --set train.precision=fp32 --set data.workers=1 --set run.dir=" + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const json s = read_json(dir + "/summary.json");
  CHECK(s.at("model") == "deeplabv3plus-resnet50");
  CHECK(s.at("parameters") == 40388067);  // the same network written in PyTorch has as many
  CHECK(s.at("optimizer") == "lamb");
  CHECK(s.at("steps") == 1);
  CHECK(std::isfinite(s.at("final").at("train_loss").get<double>()));
  CHECK(s.at("final").at("test_iou_per_class").size() == 3);
}
