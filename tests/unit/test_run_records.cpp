// Reading a run dir's records back (io/records/run_records.hpp): one clock across a resumed
// run's attempts, in the records' current form (run clock, `attempt`) and in the form run
// dirs were written in before it (elapsed_s restarting at each resume, untimed train records);
// the whole run's figures and the time to target from summary.json or the records.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/records/run_log.hpp"
#include "io/records/run_records.hpp"
#include "tests/support/temp_dir.hpp"

using namespace squall::records;
using nlohmann::json;

namespace {

RunRecords parse(const std::vector<json>& records, const std::string& extra = "") {
  std::ostringstream text;
  for (const json& r : records) text << r.dump() << "\n";
  text << extra;
  std::istringstream in(text.str());
  return parse_metrics(in);
}

json train(int64_t step, double loss) {
  return {{"kind", "train"}, {"step", step}, {"epoch", 1}, {"loss", loss}, {"lr", 0.1}, {"learners", 1},
          {"samples_per_s", 100.0}};
}

json eval(int64_t step, double elapsed, double accuracy) {
  return {{"kind", "eval"}, {"step", step}, {"epoch", 1}, {"test_loss", 1.0}, {"test_accuracy", accuracy},
          {"test_miou", 0.3}, {"eval_s", 0.1}, {"elapsed_s", elapsed}, {"train_s", elapsed}, {"epochs_done", 1.0}};
}

// In the current form: on the run clock, with the attempt.
json with_attempt(json r, int attempt, double elapsed) {
  r["attempt"] = attempt;
  r["elapsed_s"] = elapsed;
  return r;
}

// Old form: attempt 1 trains steps 10..40 (evals at 20 and 40 at 10 s and 20 s), its
// checkpoint is step 40; attempt 2 resumes there and its clock restarts (evals at 60 and 80 at
// 10 s and 20 s of its own).
std::vector<json> old_resumed() {
  return {train(10, 1.9), train(20, 1.8), eval(20, 10.0, 0.5), train(30, 1.7), train(40, 1.6), eval(40, 20.0, 0.6),
          {{"kind", "checkpoint"}, {"step", 40}, {"path", "c"}, {"seconds", 0.1}},
          {{"kind", "resume"}, {"step", 40}, {"checkpoint", "c"}},
          train(50, 1.5), train(60, 1.4), eval(60, 10.0, 0.7), train(70, 1.3), train(80, 1.2), eval(80, 20.0, 0.8)};
}

}  // namespace

TEST_CASE("run records: an old resumed run is one run on one clock", "[run_records]") {
  const RunRecords r = parse(old_resumed());
  CHECK(r.attempts == 2);
  REQUIRE(r.resumes.size() == 1);
  CHECK(r.resumes[0].step == 40);
  CHECK(r.resumes[0].elapsed_s == 20.0);  // the last time before the resume record
  REQUIRE(r.eval.size() == 4);
  const double eval_times[] = {10, 20, 30, 40};
  for (size_t i = 0; i < 4; ++i) CHECK(r.eval[i].elapsed_s == Approx(eval_times[i]));
  CHECK(r.eval[2].attempt == 2);
  // Train records have no time: interpolated, 0.5 s a step throughout.
  REQUIRE(r.train.size() == 8);
  for (const TrainPoint& t : r.train) {
    INFO(t.step);
    CHECK(t.elapsed_s == Approx(0.5 * static_cast<double>(t.step)));
  }
  CHECK(r.train.back().attempt == 2);
  CHECK_FALSE(r.per_pixel);
  CHECK_FALSE(r.target);
}

TEST_CASE("run records: records past the checkpoint of a crashed attempt are dropped at the resume", "[run_records]") {
  auto records = old_resumed();
  // The crash came after step 50 (eval at 25 s); the checkpoint was step 40.
  records.insert(records.begin() + 7, {train(50, 9.0), eval(50, 25.0, 0.1)});
  const RunRecords r = parse(records, "{\"kind\":\"train\",\"st");  // and a line cut by the crash
  REQUIRE(r.train.size() == 8);
  for (size_t i = 1; i < r.train.size(); ++i) CHECK(r.train[i].step > r.train[i - 1].step);
  CHECK(r.train[4].loss == 1.5);  // attempt 2's step 50, not the crashed one's
  REQUIRE(r.eval.size() == 4);
  CHECK(r.eval[2].elapsed_s == Approx(30.0));
}

TEST_CASE("run records: the current records are on the run clock as written", "[run_records]") {
  std::vector<json> records;
  for (int64_t s : {10, 20, 30, 40}) records.push_back(with_attempt(train(s, 2.0 - s / 100.0), 1, s * 0.5));
  records.push_back(with_attempt(eval(40, 0, 0.6), 1, 20.1));
  records.push_back({{"kind", "resume"}, {"step", 40}, {"checkpoint", "c"}, {"attempt", 2}, {"elapsed_s", 20.1}});
  for (int64_t s : {50, 60}) records.push_back(with_attempt(train(s, 2.0 - s / 100.0), 2, 20.1 + (s - 40) * 0.5));
  records.push_back(with_attempt(eval(60, 0, 0.85), 2, 30.2));
  records.push_back({{"kind", "target"}, {"step", 60}, {"metric", "accuracy"}, {"value", 0.85}, {"target", 0.8},
                     {"elapsed_s", 30.2}});
  records.push_back({{"kind", "autotune"}, {"step", 60}, {"learners", 2}});
  const RunRecords r = parse(records);
  CHECK(r.attempts == 2);
  REQUIRE(r.train.size() == 6);
  CHECK(r.train[3].elapsed_s == 20.0);
  CHECK(r.train[4].elapsed_s == Approx(25.1));
  CHECK(r.train[4].attempt == 2);
  REQUIRE(r.eval.size() == 2);
  CHECK(r.eval[1].elapsed_s == 30.2);
  REQUIRE(r.target);
  CHECK(r.target->metric == "accuracy");
  CHECK(r.target->elapsed_s == 30.2);
  CHECK(r.target->target == 0.8);
  CHECK(elapsed_at_step(r, 55) == Approx(27.6));
}

TEST_CASE("run records: a run without timed records has no clock", "[run_records]") {
  const RunRecords r = parse({train(10, 1.0), train(20, 0.9)});
  CHECK(std::isnan(r.train[0].elapsed_s));
  CHECK(std::isnan(elapsed_at_step(r, 10)));
  const RunRecords seg = parse({[] {
    json e = eval(10, 5.0, 0.9);
    e["test_iou_per_class"] = {0.9, 0.1};
    return e;
  }()});
  CHECK(seg.per_pixel);
}

TEST_CASE("run records: the whole run from summary.json, or from old records and the last attempt's figures",
          "[run_records]") {
  const RunRecords old = parse(old_resumed());
  // Old: the top-level figures are the last attempt's (40 steps, 20 s of loop).
  const RunProgress p = run_progress(json{{"steps", 80}, {"train_loop_s", 20.0}}, old);
  CHECK(p.attempts == 2);
  CHECK(p.steps == 80);
  CHECK(p.attempt_first_step == 40);
  CHECK(p.attempt_steps == 40);
  CHECK(p.train_loop_s == Approx(40.0));
  CHECK(p.reconstructed);
  // Never resumed: as written.
  const RunProgress q = run_progress(json{{"steps", 40}, {"train_loop_s", 12.0}}, parse({train(40, 1.0)}));
  CHECK(q.attempts == 1);
  CHECK(q.attempt_steps == 40);
  CHECK(q.train_loop_s == 12.0);
  CHECK_FALSE(q.reconstructed);
  // Current: summary.json says.
  const json summary{{"steps", 80},
                     {"train_loop_s", 20.0},
                     {"attempt", {{"number", 3}, {"first_step", 60}, {"steps", 20}, {"train_loop_s", 20.0}}},
                     {"run", {{"attempts", 3}, {"steps", 80}, {"train_loop_s", 55.5}, {"samples", 5120}}}};
  const RunProgress n = run_progress(summary, old);
  CHECK(n.attempts == 3);
  CHECK(n.attempt_first_step == 60);
  CHECK(n.attempt_steps == 20);
  CHECK(n.train_loop_s == 55.5);
  CHECK_FALSE(n.reconstructed);
}

TEST_CASE("run records: time to target from summary.json, else from the target record", "[run_records]") {
  const RunRecords none = parse({train(10, 1.0)});
  CHECK_FALSE(run_target(json::object(), none));
  const json reached{{"target",
                      {{"metric", "miou"}, {"value", 0.5}, {"reached", true}, {"step", 300}, {"epoch", 3},
                       {"time_to_target_s", 123.5}, {"metric_value", 0.51}}}};
  const auto t = run_target(reached, none);
  REQUIRE(t);
  CHECK(t->metric == "miou");
  CHECK(t->reached);
  CHECK(t->target == 0.5);
  CHECK(t->step == 300);
  CHECK(t->time_s == 123.5);
  CHECK(t->metric_value == 0.51);
  const auto missed = run_target(json{{"target", {{"metric", "accuracy"}, {"value", 0.99}, {"reached", false}}}}, none);
  REQUIRE(missed);
  CHECK_FALSE(missed->reached);
  CHECK(std::isnan(missed->time_s));
  // No summary yet (the run is still going): the record.
  const RunRecords rec = parse({{{"kind", "target"}, {"step", 60}, {"metric", "accuracy"}, {"value", 0.86},
                                 {"target", 0.85}, {"elapsed_s", 30.0}}});
  const auto from_record = run_target(json::object(), rec);
  REQUIRE(from_record);
  CHECK(from_record->reached);
  CHECK(from_record->time_s == 30.0);
  CHECK(from_record->step == 60);
  CHECK(from_record->metric_value == 0.86);
}

TEST_CASE("run records: each train record's learning rate, NaN where the record has none", "[run_records]") {
  json a = train(10, 2.0), b = train(20, 1.9), c = train(30, 1.8);
  a["lr"] = 0.0125;
  b["lr"] = 0.025;
  c.erase("lr");
  const RunRecords r = parse({a, b, c});
  REQUIRE(r.train.size() == 3);
  CHECK(r.train[0].lr == 0.0125);
  CHECK(r.train[1].lr == 0.025);
  CHECK(std::isnan(r.train[2].lr));
}

namespace {

void write_text(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

// A run dir as RunLog writes it: config.toml, metrics.jsonl and summary.json.
void write_run(const std::filesystem::path& dir) {
  RunLogOptions o;
  o.dir = dir;
  o.config_toml = "[run]\nseed = 1\n";
  o.root = true;
  o.tensorboard = false;
  squall::nn::ConfusionMatrix cm(2);
  {
    RunLog log(o);
    TrainWindow w;
    w.step = 4;
    w.loss = 0.5;
    w.lr = 0.1;
    log.train_window(w);
    RunSummary s;
    s.steps = 4;
    s.ranks = 2;
    s.samples_per_s = 100;
    s.cm = &cm;
    s.target_metric = "accuracy";
    s.target_value = 0.9;
    s.cpu_streams = "inline";
    s.cpu_stream_jitter_us = 0;
    log.finished(s);
  }
}

}  // namespace

TEST_CASE("read_run_dir: what a run dir holds, the files named by the table the writer uses", "[run_records]") {
  squall::test::TempDir tmp("squall-run-dir");
  write_run(tmp.path);
  const RunDir r = read_run_dir(tmp.path);
  CHECK(r.dir == tmp.path);
  CHECK(r.has_metrics);
  CHECK(r.has_summary);
  CHECK(r.has_config);
  REQUIRE(r.records.train.size() == 1);
  CHECK(r.records.train[0].step == 4);
  CHECK(r.records.train[0].lr == 0.1);
  CHECK(r.summary.at("world_size") == 2);
  CHECK(r.progress.steps == 4);
  REQUIRE(r.target.has_value());
  CHECK_FALSE(r.target->reached);
  CHECK(r.path_of(k_config_file) == tmp.path / "config.toml");
  // The writer writes the table's fields and no other: every one it always writes, and those
  // that apply (a target, the CPU's streams) when they do.
  std::set<std::string> listed, always;
  for (const RunField& f : k_summary_file.fields) {
    listed.insert(std::string(f.name));
    if (f.always) always.insert(std::string(f.name));
  }
  std::set<std::string> written;
  for (const auto& [key, value] : r.summary.items()) written.insert(key);
  CHECK(written == listed);
  for (const std::string& key : always) CHECK(written.count(key) == 1);
  const json record = json::parse(std::ifstream(tmp.path / "metrics.jsonl"));  // the one train record
  for (const auto& [key, value] : record.items())
    if (key == "kind" || key == "step" || key == "attempt" || key == "elapsed_s") written.insert("metrics." + key);
  for (const RunField& f : k_metrics_file.fields) CHECK(written.count("metrics." + std::string(f.name)) == 1);
  // A summary.json given as the file: its folder is the run dir.
  const RunDir by_file = read_run_dir(tmp.path / "summary.json");
  CHECK(by_file.dir == tmp.path);
  CHECK(by_file.records.train.size() == 1);
  CHECK(by_file.summary == r.summary);
}

TEST_CASE("read_run_dir: a missing file is absent from what it reads, a dir without records is refused",
          "[run_records]") {
  squall::test::TempDir tmp("squall-run-dir-missing");
  write_run(tmp.path);
  std::filesystem::remove(tmp.path / "summary.json");
  std::filesystem::remove(tmp.path / "config.toml");
  const RunDir unfinished = read_run_dir(tmp.path);
  CHECK(unfinished.has_metrics);
  CHECK_FALSE(unfinished.has_summary);
  CHECK_FALSE(unfinished.has_config);
  CHECK(unfinished.summary == json::object());
  CHECK(unfinished.records.train.size() == 1);
  CHECK_FALSE(unfinished.target.has_value());
  std::filesystem::remove(tmp.path / "metrics.jsonl");
  CHECK_THROWS_WITH(read_run_dir(tmp.path), Catch::Contains(tmp.path.string()) &&
                                                Catch::Contains("is not a run dir") &&
                                                Catch::Contains("summary.json") && Catch::Contains("metrics.jsonl"));
  CHECK_THROWS_WITH(read_run_dir(tmp.path / "elsewhere"),
                    Catch::Contains((tmp.path / "elsewhere").string()) && Catch::Contains("does not exist"));
}

TEST_CASE("read_run_dir: a malformed file is an error naming it", "[run_records]") {
  squall::test::TempDir tmp("squall-run-dir-malformed");
  write_run(tmp.path);
  const std::filesystem::path summary = tmp.path / "summary.json";
  const json good = json::parse(std::ifstream(summary));
  write_text(summary, "{\"world_size\": 2,");  // cut short
  CHECK_THROWS_WITH(read_run_dir(tmp.path), Catch::Contains(summary.string()) && Catch::Contains("is not JSON"));
  write_text(summary, "[1, 2]");
  CHECK_THROWS_WITH(read_run_dir(tmp.path),
                    Catch::Contains(summary.string()) && Catch::Contains("is not a JSON object"));
  json wrong = good;
  wrong["world_size"] = "two";
  write_text(summary, wrong.dump());
  CHECK_THROWS_WITH(read_run_dir(tmp.path), Catch::Contains(summary.string()) && Catch::Contains("`world_size`") &&
                                                Catch::Contains("\"two\"") && Catch::Contains("an integer"));
  wrong = good;
  wrong["steady_samples_per_s"] = nullptr;  // null where the table allows it: not measured
  wrong["samples_per_s"] = nullptr;         // ... and where it does not
  write_text(summary, wrong.dump());
  CHECK_THROWS_WITH(read_run_dir(tmp.path), Catch::Contains("`samples_per_s` is null, not a number"));
  // metrics.jsonl's cut last line (a crash) is skipped, not an error.
  write_text(summary, good.dump());
  std::ofstream(tmp.path / "metrics.jsonl", std::ios::app) << "{\"kind\": \"tra";
  CHECK(read_run_dir(tmp.path).records.train.size() == 1);
}
