// `squall train`'s steady rate (docs/metrics.md, "Steady rate") in the records of real runs:
// summary.json's steady_samples_per_s leaves the first steps, the evaluations and the
// checkpoints out, agrees with the train records of metrics.jsonl, and is null where a run is
// too short to have one.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::fresh_dir;
using squall::test::mpiexec;
using squall::test::read_json;
using squall::test::read_records;
using squall::test::run_command;
using squall::test::squall_bin;
namespace fs = std::filesystem;

namespace {

const std::string k_lenet5 = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";

double sum_of(const std::vector<json>& records, const char* key) {
  double total = 0;
  for (const json& r : records) total += r.at(key).get<double>();
  return total;
}

}  // namespace

TEST_CASE("the steady rate leaves warm-up steps, evaluations and checkpoints out", "[launch][train][steady]") {
  const std::string dir = fresh_dir("launch-steady");
  // 2 ranks x batch 32, 60 steps: an evaluation of the whole test set (10000 samples) every
  // 10 steps and a checkpoint every 20 cost far more than the steps between them.
  const auto r = run_command(mpiexec(2) + " " + squall_bin() + " train --config " + k_lenet5 +
                             " --set train.batch_size=32 --set train.max_steps=60 --set schedule.warmup_steps=0" +
                             " --set train.eval_every_steps=10 --set train.log_every_steps=5" +
                             " --set checkpoint.every_steps=20 --set run.dir=" + dir);
  INFO(r.out.substr(r.out.size() > 3000 ? r.out.size() - 3000 : 0) << r.err);
  REQUIRE(r.exit_code == 0);
  const json s = read_json(dir + "/summary.json");
  const json& attempt = s.at("attempt");
  const json& steady = attempt.at("steady");
  REQUIRE(s.at("steady_samples_per_s").is_number());
  const double rate = s.at("steady_samples_per_s").get<double>();
  CHECK(attempt.at("steady_samples_per_s").get<double>() == rate);

  // What it measured: steps 11 to 60 (max(10, 5% of 60) left out), 64 samples each.
  CHECK(steady.at("skipped_steps") == 10);
  CHECK(steady.at("steps") == 50);
  CHECK(steady.at("samples") == 50 * 64);
  const double seconds = steady.at("seconds").get<double>();
  REQUIRE(seconds > 0);
  CHECK(rate == Approx(50.0 * 64 / seconds).epsilon(1e-12));

  // The loop's seconds hold every evaluation and the checkpoints of steps 20 and 40 (the last
  // one is written after the loop); the steady seconds hold none of them.
  const std::vector<json> evals = read_records(dir + "/metrics.jsonl", "eval");
  const std::vector<json> checkpoints = read_records(dir + "/metrics.jsonl", "checkpoint");
  REQUIRE(evals.size() == 6);
  const double eval_s = sum_of(evals, "eval_s");
  double checkpoint_s = 0;
  for (const json& c : checkpoints)
    if (c.at("step") != 60) checkpoint_s += c.at("seconds").get<double>();
  CHECK(seconds <= s.at("train_loop_s").get<double>() - eval_s - checkpoint_s);
  // So it is well above the loop's rate, which the evaluations dominate.
  CHECK(rate > 1.5 * s.at("samples_per_s").get<double>());

  // The train records: null while the first 10 steps are all there is, then the rate so far;
  // the last is the summary's.
  const std::vector<json> train = read_records(dir + "/metrics.jsonl", "train");
  REQUIRE(train.size() == 12);
  for (const json& w : train) {
    INFO("train record " << w.dump());
    if (w.at("step").get<int>() <= 10) CHECK(w.at("steady_samples_per_s").is_null());
    else CHECK(w.at("steady_samples_per_s").get<double>() > 0);
  }
  CHECK(train.back().at("step") == 60);
  CHECK(train.back().at("steady_samples_per_s").get<double>() == Approx(rate).epsilon(1e-12));
  CHECK_THAT(r.out, Catch::Contains("samples/s steady"));
  fs::remove_all(dir);
}

TEST_CASE("a run too short for a steady rate says null", "[launch][train][steady]") {
  const std::string dir = fresh_dir("launch-steady-short");
  const auto r = run_command(squall_bin() + " train --config " + k_lenet5 + " --set train.max_steps=3" +
                             " --set schedule.warmup_steps=0 --set data.test_samples=256 --set train.log_every_steps=1" +
                             " --set run.dir=" + dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json s = read_json(dir + "/summary.json");
  CHECK(s.at("steady_samples_per_s").is_null());
  CHECK(s.at("attempt").at("steady_samples_per_s").is_null());
  CHECK(s.at("attempt").at("steady").at("steps") == 0);
  CHECK(s.at("samples_per_s").get<double>() > 0);  // the loop's rate is still there
  for (const json& w : read_records(dir + "/metrics.jsonl", "train")) CHECK(w.at("steady_samples_per_s").is_null());
  CHECK_THAT(r.out, Catch::Contains("too few steps for a steady rate"));
  fs::remove_all(dir);
}
