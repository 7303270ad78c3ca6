// Reading metrics.jsonl and summary.json back (run_records.hpp).
#include "io/records/run_records.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "src/core/error.hpp"

namespace squall::records {
namespace {

using nlohmann::json;

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

double number(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : k_nan;
}

int64_t integer(const json& j, const char* key, int64_t otherwise) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : otherwise;
}

// (step, run clock) of every timed record, steps strictly increasing, from (0, 0).
std::vector<std::pair<double, double>> anchors(const RunRecords& r) {
  std::vector<std::pair<double, double>> timed;
  for (const TrainPoint& t : r.train)
    if (std::isfinite(t.elapsed_s)) timed.emplace_back(static_cast<double>(t.step), t.elapsed_s);
  for (const EvalPoint& e : r.eval)
    if (std::isfinite(e.elapsed_s)) timed.emplace_back(static_cast<double>(e.step), e.elapsed_s);
  for (const ResumePoint& p : r.resumes)
    if (std::isfinite(p.elapsed_s)) timed.emplace_back(static_cast<double>(p.step), p.elapsed_s);
  std::stable_sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<double, double>> out{{0.0, 0.0}};
  for (const auto& [step, t] : timed)
    if (step > out.back().first) out.emplace_back(step, std::max(t, out.back().second));
  return out;
}

bool of_kind(const json& v, FieldKind kind) {
  switch (kind) {
    case FieldKind::integer: return v.is_number_integer();
    case FieldKind::number: return v.is_number();
    case FieldKind::text: return v.is_string();
    case FieldKind::boolean: return v.is_boolean();
    case FieldKind::object: return v.is_object();
    case FieldKind::array: return v.is_array();
    case FieldKind::any: break;
  }
  return true;
}

// `doc`'s fields that the table lists, each of its kind; throws naming `where` and the field.
void check_fields(const json& doc, const RunFile& file, const std::string& where) {
  for (const RunField& f : file.fields) {
    const auto it = doc.find(std::string(f.name));
    if (it == doc.end() || (f.nullable && it->is_null()) || of_kind(*it, f.kind)) continue;
    throw Error(where + ": `" + std::string(f.name) + "` is " + it->dump() + ", not " +
                std::string(field_kind_text(f.kind)));
  }
}

}  // namespace

std::string_view field_kind_text(FieldKind kind) {
  switch (kind) {
    case FieldKind::integer: return "an integer";
    case FieldKind::number: return "a number";
    case FieldKind::text: return "a string";
    case FieldKind::boolean: return "true or false";
    case FieldKind::object: return "a JSON object";
    case FieldKind::array: return "a JSON array";
    case FieldKind::any: break;
  }
  return "a JSON value";
}

RunDir read_run_dir(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path.string() + " does not exist");
  const bool is_file = !fs::is_directory(path, ec);
  RunDir r;
  r.dir = is_file ? (path.has_parent_path() ? path.parent_path() : fs::path(".")) : path;
  const fs::path summary = is_file ? path : r.path_of(k_summary_file);
  const fs::path metrics = r.path_of(k_metrics_file);
  r.has_summary = fs::is_regular_file(summary, ec);
  r.has_metrics = fs::is_regular_file(metrics, ec);
  r.has_config = fs::is_regular_file(r.path_of(k_config_file), ec);
  if (!r.has_summary && !r.has_metrics)
    throw Error(path.string() + " is not a run dir: it holds neither " + std::string(k_summary_file.name) + " nor " +
                std::string(k_metrics_file.name) + " (written by `squall train`)");
  if (r.has_metrics) {
    std::ifstream in(metrics);
    if (!in) throw Error("cannot read " + metrics.string());
    r.records = parse_metrics(in);
  }
  if (r.has_summary) {
    std::ifstream in(summary);
    if (!in) throw Error("cannot read " + summary.string());
    try {
      r.summary = json::parse(in);
    } catch (const json::exception& e) {
      throw Error(summary.string() + " is not JSON: " + e.what());
    }
    if (!r.summary.is_object()) throw Error(summary.string() + " is not a JSON object");
    check_fields(r.summary, k_summary_file, summary.string());
  }
  r.progress = run_progress(r.summary, r.records);
  r.target = run_target(r.summary, r.records);
  return r;
}

RunRecords parse_metrics(std::istream& in) {
  RunRecords r;
  double offset = 0;    // old records: the run clock at this attempt's start
  double last_t = 0;    // the run clock of the last timed record
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j.at("step").is_number()) continue;
    const std::string kind = j.value("kind", "");
    const int64_t step = j.at("step").get<int64_t>();
    // Records that carry their attempt are on the run clock; older ones on their attempt's.
    const bool run_clock = j.contains("attempt");
    const int attempt = static_cast<int>(integer(j, "attempt", r.attempts));
    auto clock = [&](double t) { return std::isfinite(t) ? (run_clock ? t : offset + t) : t; };
    if (kind == "train" && j.contains("loss")) {
      const double t = clock(number(j, "elapsed_s"));
      r.train.push_back({step, number(j, "loss"), t, attempt, number(j, "lr")});
      if (std::isfinite(t)) last_t = t;
    } else if (kind == "eval") {
      if (j.contains("test_iou_per_class")) r.per_pixel = true;
      const double t = clock(number(j, "elapsed_s"));
      r.eval.push_back({step, t, number(j, "test_accuracy"), number(j, "test_miou"), attempt});
      if (std::isfinite(t)) last_t = t;
    } else if (kind == "resume") {
      // What a crashed attempt wrote past its checkpoint was computed again (a resumed run
      // removes those lines; should any remain, they are dropped here): one run, steps increasing.
      std::erase_if(r.train, [&](const TrainPoint& p) { return p.step > step; });
      std::erase_if(r.eval, [&](const EvalPoint& p) { return p.step > step; });
      if (r.target && r.target->step > step) r.target.reset();
      last_t = 0;
      for (const TrainPoint& p : r.train)
        if (std::isfinite(p.elapsed_s)) last_t = std::max(last_t, p.elapsed_s);
      for (const EvalPoint& p : r.eval)
        if (std::isfinite(p.elapsed_s)) last_t = std::max(last_t, p.elapsed_s);
      const double written = number(j, "elapsed_s");
      offset = std::isfinite(written) ? written : last_t;
      r.attempts = run_clock ? std::max(attempt, r.attempts + 1) : r.attempts + 1;
      ResumePoint resume{step, r.attempts, offset};
      if (const auto change = j.find("shape_change"); change != j.end() && change->is_object()) {
        resume.from_ranks = change->value("from", json::object()).value("ranks", int64_t{0});
        resume.ranks = change->value("to", json::object()).value("ranks", int64_t{0});
      }
      r.resumes.push_back(resume);
      last_t = offset;
    } else if (kind == "target" && !r.target) {
      // Only trainers that write the run clock write target records, with or without `attempt`.
      r.target = TargetPoint{step, j.value("metric", ""), number(j, "value"), number(j, "target"),
                             number(j, "elapsed_s")};
    }
  }
  // Old train records have no time: between the timed records around them.
  bool untimed = false;
  for (const TrainPoint& t : r.train) untimed |= !std::isfinite(t.elapsed_s);
  if (untimed) {
    std::vector<double> filled;
    for (const TrainPoint& t : r.train) filled.push_back(elapsed_at_step(r, static_cast<double>(t.step)));
    for (size_t i = 0; i < r.train.size(); ++i)
      if (!std::isfinite(r.train[i].elapsed_s)) r.train[i].elapsed_s = filled[i];
  }
  return r;
}

double elapsed_at_step(const RunRecords& records, double step) {
  const auto timed = anchors(records);
  if (timed.size() < 2) return k_nan;
  size_t k = 1;
  while (k + 1 < timed.size() && timed[k].first < step) ++k;
  const auto [s0, t0] = timed[k - 1];
  const auto [s1, t1] = timed[k];
  return t0 + (step - s0) * (t1 - t0) / (s1 - s0);
}

RunProgress run_progress(const json& summary, const RunRecords& records) {
  RunProgress p;
  p.steps = integer(summary, "steps", 0);
  const auto run = summary.find("run");
  const auto attempt = summary.find("attempt");
  if (run != summary.end() && run->is_object()) {
    p.attempts = static_cast<int>(integer(*run, "attempts", records.attempts));
    p.train_loop_s = number(*run, "train_loop_s");
    p.steps = integer(*run, "steps", p.steps);
  } else {
    // Written before the run's own figures: the top-level ones are the last attempt's, and the
    // run clock at its resume is what came before.
    p.attempts = records.attempts;
    const double loop = number(summary, "train_loop_s");
    const double before = records.resumes.empty() ? 0.0 : records.resumes.back().elapsed_s;
    p.train_loop_s = loop + before;
    p.reconstructed = !records.resumes.empty();
  }
  if (attempt != summary.end() && attempt->is_object()) {
    p.attempt_first_step = integer(*attempt, "first_step", 0);
    p.attempt_steps = integer(*attempt, "steps", p.steps - p.attempt_first_step);
  } else {
    p.attempt_first_step = records.resumes.empty() ? 0 : records.resumes.back().step;
    p.attempt_steps = std::max<int64_t>(0, p.steps - p.attempt_first_step);
  }
  return p;
}

std::optional<TargetResult> run_target(const json& summary, const RunRecords& records) {
  const auto t = summary.find("target");
  if (t != summary.end() && t->is_object()) {
    TargetResult r;
    r.metric = t->value("metric", "");
    r.target = number(*t, "value");
    r.reached = t->value("reached", false);
    r.step = r.reached ? integer(*t, "step", -1) : -1;
    r.time_s = r.reached ? number(*t, "time_to_target_s") : k_nan;
    r.metric_value = number(*t, "metric_value");
    return r;
  }
  if (!records.target) return std::nullopt;
  const TargetPoint& p = *records.target;
  return TargetResult{p.metric, p.target, true, p.step, p.elapsed_s, p.value};
}

}  // namespace squall::records
