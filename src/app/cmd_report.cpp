// `squall report RUN_DIR... [--out DIR] [--json]`: a table of runs (one row per run dir,
// sorted by GPU or rank count) with throughput, scaling efficiency against the smallest size,
// the time breakdown, the final metric, the whole run's time and the time to target, as
// report.md (also printed) or JSON, and SVG plots drawn by io/pictures/svg (docs/training.md,
// "Reports"). A resumed run is one run on one clock; runs of different dirs are never joined.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/pictures/svg.hpp"
#include "mpi/runtime.hpp"
#include "src/app/cli.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/config/config_enums.hpp"
#include "io/records/run_records.hpp"

namespace squall::app {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

struct ReportArgs {
  std::vector<std::string> run_dirs;
  std::string out = "report";
  bool json = false;
};

struct Run {
  std::string path, name;
  bool complete = false;
  std::string why_incomplete;
  int nodes = 0, ranks = 0, gpus = 0, learners = 0;
  bool cuda = false;
  int64_t global_batch = 0;
  double samples_per_s = k_nan, efficiency = k_nan;  // the last attempt's (what summary.json measured)
  double compute = k_nan, allreduce = k_nan, io_wait = k_nan;
  std::string metric_name = "test_accuracy";
  double metric = k_nan;
  // What makes runs one study whose sizes a scaling line may join: "model", "algorithm", ...
  std::vector<std::pair<std::string, std::string>> study;
  std::string algorithm, periods;  // "sma", "[1, 4]" (summary.json's parallel.periods; "" before it existed)
  std::string outer;               // "outer H 8, lr 0.7, momentum 0.9" (parallel.outer), "" for another algorithm
  std::string spatial;             // "[2, 1]" (summary.json's parallel.spatial), "" for whole samples
  double halo_exposed = k_nan, halo_hidden = k_nan;  // rank 0's halo seconds under a split
  records::RunRecords records;   // on the run clock: one curve across attempts
  records::RunProgress progress;
  std::optional<records::TargetResult> target;

  int count() const { return cuda ? gpus : ranks; }  // what the x axes and the sort use
};

// What efficiency is measured against: the runs of the smallest size (GPU or rank count) that
// measured a throughput, and their mean throughput per GPU or rank. Efficiency compares runs
// of different sizes only: with a single size there is none (and no `ideal` line).
struct Reference {
  std::vector<const Run*> runs;  // the smallest size's, in table order
  int count = 0;                 // that size
  double per_unit = k_nan;       // their mean samples/s per GPU or rank
  bool several_sizes = false;    // some run measured at another size
  bool usable() const { return !runs.empty(); }
};

double number(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : k_nan;
}

std::string dir_name(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string name = p.filename().string();
  return name.empty() || name == "." ? fs::absolute(p).lexically_normal().filename().string() : name;
}

// The summary's value of `key` as text, for the study key ("" when absent).
std::string text_of(const json& s, const char* key) {
  const auto it = s.find(key);
  if (it == s.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

Run read_run(const std::string& path) {
  Run run;
  run.path = path;
  run.name = dir_name(path);
  const fs::path dir(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw CollectiveError(path + " is not a run dir: no such directory", k_exit_usage);
  records::RunDir rd;
  try {
    rd = records::read_run_dir(dir);
  } catch (const Error& e) {
    throw CollectiveError(e.what(), k_exit_usage);
  }
  run.records = std::move(rd.records);
  if (run.records.per_pixel) run.metric_name = "test_miou";
  const json& s = rd.summary;
  run.progress = rd.progress;
  run.target = rd.target;
  if (!rd.has_summary) {
    run.why_incomplete = "no " + std::string(records::k_summary_file.name);
    return run;
  }
  if (!s.contains("world_size") || !s.contains("samples_per_s")) {
    run.why_incomplete = std::string(records::k_summary_file.name) + " unreadable";
    return run;
  }
  run.complete = true;
  run.ranks = s.at("world_size").get<int>();
  run.nodes = s.value("nodes", 1);
  const int devices_per_rank = s.value("devices_per_rank", 1);
  run.cuda = s.value("backend", "") == "cuda";
  run.gpus = run.cuda ? run.ranks * devices_per_rank : 0;
  run.learners = run.ranks * s.value("replicas_per_device", 1);
  run.global_batch = s.value("global_batch", int64_t{0});
  run.samples_per_s = number(s, "samples_per_s");
  if (s.contains("time_breakdown_s")) {
    const json& t = s.at("time_breakdown_s");
    run.compute = number(t, "compute");
    run.allreduce = number(t, "allreduce");
    run.io_wait = number(t, "io_wait");
  }
  if (s.contains("final")) {
    const json& f = s.at("final");
    if (f.contains("test_miou") && !f.contains("test_accuracy")) run.metric_name = "test_miou";
    run.metric = number(f, run.metric_name.c_str());
  }
  for (const char* key : {"model", "algorithm", "precision", "batch_per_learner", "backend"})
    run.study.emplace_back(key, text_of(s, key));
  // Averaging by level trains another model: runs of other periods are other studies.
  run.algorithm = text_of(s, "algorithm");
  if (const auto p = s.find("parallel"); p != s.end() && p->is_object()) {
    const auto periods = p->find("periods");
    if (periods != p->end() && periods->is_array() && periods->size() == 2)
      run.periods = "[" + periods->at(0).dump() + ", " + periods->at(1).dump() + "]";
  }
  // So does another outer period, learning rate or momentum.
  if (const auto p = s.find("parallel"); p != s.end() && p->is_object())
    if (const auto o = p->find("outer"); o != p->end() && o->is_object()) {
      run.outer = "outer H " + text_of(*o, "period") + ", lr " + text_of(*o, "lr") + ", momentum " +
                  text_of(*o, "momentum");
      if (const auto q = o->find("qsr"); q != o->end() && q->is_number() && q->get<double>() > 0)
        run.outer += ", QSR " + text_of(*o, "qsr");
      if (const auto st = o->find("streaming"); st != o->end() && st->is_boolean() && st->get<bool>())
        run.outer += ", streamed";
    }
  // A split sample: its groups are the job's learners, and another split is another study.
  if (const auto p = s.find("parallel"); p != s.end() && p->is_object())
    if (const auto sp = p->find("spatial"); sp != p->end() && sp->is_object()) {
      run.spatial = "[" + text_of(*sp, "rows") + ", " + text_of(*sp, "cols") + "]";
      run.learners = sp->value("groups", 1) * s.value("replicas_per_device", 1);
      if (const auto h = sp->find("halo"); h != sp->end() && h->is_object()) {
        run.halo_exposed = number(*h, "exposed_s");
        run.halo_hidden = number(*h, "hidden_s");
      }
    }
  run.study.emplace_back("periods", run.periods.empty() ? "" : "periods " + run.periods);
  run.study.emplace_back("spatial", run.spatial.empty() ? "" : "spatial " + run.spatial);
  run.study.emplace_back("outer", run.outer);
  return run;
}

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char b[48];
  std::snprintf(b, sizeof(b), "%.*f", decimals, v);
  return b;
}

json or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

bool any_resumed(const std::vector<Run>& runs) {
  for (const Run& r : runs)
    if (r.progress.attempts > 1) return true;
  return false;
}

bool any_target(const std::vector<Run>& runs) {
  for (const Run& r : runs)
    if (r.target) return true;
  return false;
}

// "812.3 s (step 1200)", "not reached" or "-" (no target).
std::string target_cell(const Run& r) {
  if (!r.target) return "-";
  if (!r.target->reached) return "not reached";
  return fixed(r.target->time_s, 1) + " s (step " + std::to_string(r.target->step) + ")";
}

// "812.3", "812.3 (2 attempts)".
std::string run_time_cell(const Run& r) {
  const std::string t = fixed(r.progress.train_loop_s, 2);
  return r.progress.attempts > 1 ? t + " (" + std::to_string(r.progress.attempts) + " attempts)" : t;
}

std::string markdown(const std::vector<Run>& runs, const Reference& ref, bool cuda) {
  const bool targets = any_target(runs);
  std::ostringstream o;
  o << "| run | nodes | ranks | GPUs | learners | global batch | samples/s | efficiency | compute s (%) | "
       "allreduce s (%) | io_wait s (%) | final metric | train loop s |"
    << (targets ? " time to target |" : "") << "\n";
  o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|" << (targets ? "---:|" : "") << "\n";
  for (const Run& r : runs) {
    if (!r.complete) {
      o << "| " << r.name << " | - | - | - | - | - | - | - | - | - | - | incomplete (" << r.why_incomplete << ") | "
        << (r.progress.attempts > 1 ? std::to_string(r.progress.attempts) + " attempts" : std::string("-")) << " |"
        << (targets ? " " + target_cell(r) + " |" : "") << "\n";
      continue;
    }
    const double sum = r.compute + r.allreduce + r.io_wait;
    auto part = [&](double v) {
      return fixed(v, 2) + " (" + (sum > 0 ? fixed(100 * v / sum, 1) : std::string("-")) + "%)";
    };
    o << "| " << r.name << " | " << r.nodes << " | " << r.ranks << " | "
      << (r.cuda ? std::to_string(r.gpus) : std::string("0 (CPU ranks)")) << " | " << r.learners << " | "
      << r.global_batch << " | " << fixed(r.samples_per_s, 1) << " | " << fixed(r.efficiency, 2) << " | "
      << part(r.compute) << " | " << part(r.allreduce) << " | " << part(r.io_wait) << " | "
      << (std::isfinite(r.metric) ? r.metric_name + " " + fixed(r.metric, 4) : std::string("-")) << " | "
      << run_time_cell(r) << " |" << (targets ? " " + target_cell(r) + " |" : "") << "\n";
  }
  for (const Run& r : runs)
    if (r.complete && !r.spatial.empty())
      o << "\n" << r.name << ": parallel.spatial = " << r.spatial << ", each sample split over a group of ranks "
        << "(learners counts the groups); halo exchanges " << fixed(r.halo_exposed, 2) << " s exposed, " << fixed(r.halo_hidden, 2)
        << " s hidden under compute (rank 0)\n";
  const std::string unit = cuda ? "GPU" : "rank";
  if (ref.usable() && !ref.several_sizes) {
    o << "\nEfficiency: blank (-): every run measured on " << ref.count << " " << unit << (ref.count == 1 ? "" : "s")
      << ", and efficiency compares runs of different sizes.\n";
  } else if (ref.usable()) {
    const Run* base = ref.runs.front();
    bool weak = true, strong = true;
    for (const Run& r : runs) {
      if (!r.complete || base->count() == 0) continue;
      weak &= r.global_batch * base->count() == base->global_batch * r.count();
      strong &= r.global_batch == base->global_batch;
    }
    std::string names;
    for (const Run* r : ref.runs) names += (names.empty() ? "" : ", ") + r->name;
    o << "\nEfficiency: weak-scaling definition, (samples/s / " << unit << "s) / (samples/s / " << unit
      << "s of the smallest size's run" << (ref.runs.size() > 1 ? "s, their mean" : "") << ": " << names << " with "
      << ref.count << " " << unit << (ref.count == 1 ? "" : "s") << "), 1.00 for " << (ref.runs.size() > 1 ? "those" : "it")
      << "; 1.00 means each " << unit << " keeps the smallest size's throughput. ";
    if (weak && !strong)
      o << "The global batch grows with the " << unit << " count here (weak scaling).";
    else if (strong && runs.size() > 1)
      o << "The global batch is the same in every run (a strong-scaling study measured per " << unit << ").";
    else
      o << "The global batch is not proportional to the " << unit << " count in every run.";
    o << "\n";
  } else {
    o << "\nNo complete run with a measured throughput: no efficiency.\n";
  }
  if (!cuda) o << "GPUs: 0 (CPU ranks): the runs used the CPU backend; the plots count ranks.\n";
  o << "Time breakdown: rank 0's seconds (summary.json `time_breakdown_s`), as % of their sum.\n";
  o << "Train loop s: the training loops of every attempt of the run (the run clock at its end).\n";
  if (any_resumed(runs))
    o << "A resumed run (several attempts) is one run: its curves continue across the resume; its samples/s and "
         "time breakdown are its last attempt's.\n";
  if (targets)
    o << "Time to target: the run clock when the test metric first reached train.target.\n";
  return o.str();
}

json target_json(const records::TargetResult& t) {
  return json{{"metric", t.metric},
              {"target", or_null(t.target)},
              {"reached", t.reached},
              {"step", t.reached ? json(t.step) : json(nullptr)},
              {"time_to_target_s", or_null(t.time_s)},
              {"metric_value", or_null(t.metric_value)}};
}

json table_json(const std::vector<Run>& runs) {
  json a = json::array();
  for (const Run& r : runs) {
    json j{{"run", r.name}, {"path", r.path}, {"status", r.complete ? "complete" : "incomplete"}};
    j["attempts"] = r.progress.attempts;
    if (r.target) j["target"] = target_json(*r.target);
    if (!r.complete) {
      j["reason"] = r.why_incomplete;
      a.push_back(j);
      continue;
    }
    const double sum = r.compute + r.allreduce + r.io_wait;
    auto pct = [&](double v) { return sum > 0 ? or_null(100 * v / sum) : json(nullptr); };
    j["nodes"] = r.nodes;
    j["ranks"] = r.ranks;
    j["gpus"] = r.gpus;
    j["backend"] = r.cuda ? "cuda" : "cpu";
    j["learners"] = r.learners;
    j["algorithm"] = r.algorithm;
    j["periods"] = r.periods.empty() ? json(nullptr) : json::parse(r.periods);
    j["spatial"] = r.spatial.empty() ? json(nullptr) : json::parse(r.spatial);
    if (!r.spatial.empty()) j["halo_s"] = {{"exposed", or_null(r.halo_exposed)}, {"hidden", or_null(r.halo_hidden)}};
    j["global_batch"] = r.global_batch;
    j["samples_per_s"] = or_null(r.samples_per_s);
    j["efficiency"] = or_null(r.efficiency);
    j["time_breakdown_s"] = {{"compute", or_null(r.compute)}, {"allreduce", or_null(r.allreduce)},
                             {"io_wait", or_null(r.io_wait)}};
    j["time_breakdown_pct"] = {{"compute", pct(r.compute)}, {"allreduce", pct(r.allreduce)},
                               {"io_wait", pct(r.io_wait)}};
    j["metric"] = r.metric_name;
    j[r.metric_name] = or_null(r.metric);
    j["steps"] = r.progress.steps;
    j["train_loop_s"] = or_null(r.progress.train_loop_s);
    a.push_back(j);
  }
  return a;
}

// ---- plots ----------------------------------------------------------------------------------

// A line of a scaling plot: runs of one study (the same model, algorithm, precision, batch per
// learner and backend) in order of size, at most one run per size. A run of a size its study's
// line already holds is a point of its own: the runs of two dirs of one size are never joined.
struct ScalingLine {
  std::string label;
  std::vector<const Run*> runs;
};

std::vector<ScalingLine> scaling_lines(const std::vector<const Run*>& sized, const std::string& unit) {
  // Which of the study's fields differ between the runs: they name the lines.
  std::vector<bool> differs;
  for (const Run* r : sized) {
    differs.resize(r->study.size(), false);
    for (size_t k = 0; k < r->study.size(); ++k) differs[k] = differs[k] || r->study[k] != sized.front()->study[k];
  }
  std::vector<ScalingLine> lines;
  std::vector<decltype(Run::study)> keys;
  for (const Run* r : sized) {
    size_t i = 0;
    while (i < keys.size() && keys[i] != r->study) ++i;
    const bool repeat = i < keys.size() && std::any_of(lines[i].runs.begin(), lines[i].runs.end(), [&](const Run* o) {
                          return o->count() == r->count();
                        });
    if (repeat) {
      lines.push_back({r->name + " (" + std::to_string(r->count()) + " " + unit + (r->count() == 1 ? "" : "s") + ")", {r}});
      keys.emplace_back();  // a point of its own: no later run joins it
      continue;
    }
    if (i == keys.size()) {
      std::string label;
      for (size_t k = 0; k < r->study.size(); ++k)
        if (differs[k] && !r->study[k].second.empty())
          label += (label.empty() ? "" : ", ") +
                   (r->study[k].first == "batch_per_learner" ? "batch " + r->study[k].second : r->study[k].second);
      lines.push_back({label.empty() ? "measured" : "measured (" + label + ")", {}});
      keys.push_back(r->study);
    }
    lines[i].runs.push_back(r);
  }
  return lines;
}

std::vector<double> distinct_counts(const std::vector<const Run*>& sized) {
  std::vector<double> counts;
  for (const Run* r : sized)
    if (counts.empty() || counts.back() != r->count()) counts.push_back(r->count());
  return counts;
}

// One series per scaling line of `set`, with `value` of each run.
void add_scaling_series(pictures::LinePlot& p, const std::vector<const Run*>& set, const std::string& unit,
                        double (*value)(const Run&)) {
  for (const ScalingLine& line : scaling_lines(set, unit)) {
    pictures::PlotSeries s{line.label, {}, {}, false, true};
    for (const Run* r : line.runs) {
      s.x.push_back(r->count());
      s.y.push_back(value(*r));
    }
    p.series.push_back(std::move(s));
  }
}

void write_plots(const std::vector<Run>& runs, const Reference& ref, bool cuda, const fs::path& out) {
  const std::string unit = cuda ? "GPUs" : "ranks";
  std::vector<const Run*> sized;  // sorted by count already
  for (const Run& r : runs)
    if (r.complete && r.count() > 0) sized.push_back(&r);
  const auto counts = distinct_counts(sized);
  {
    pictures::LinePlot p;
    p.title = "Throughput against " + unit;
    p.x_label = unit + " (log2 scale)";
    p.y_label = "samples/s";
    p.log2_x = true;
    p.y_min = 0;
    std::vector<double> ideal;
    for (double c : counts) ideal.push_back(ref.several_sizes ? ref.per_unit * c : k_nan);
    double top = 0;
    for (const Run* r : sized) top = std::max(top, std::isfinite(r->samples_per_s) ? r->samples_per_s : 0);
    for (double v : ideal) top = std::max(top, std::isfinite(v) ? v : 0);
    p.y_max = top > 0 ? top * 1.1 : 1;
    add_scaling_series(p, sized, cuda ? "GPU" : "rank", [](const Run& r) { return r.samples_per_s; });
    p.series.push_back({"ideal linear scaling", counts, ideal, true, false});
    pictures::write_text_file((out / "throughput.svg").string(), pictures::render_line_plot(p));
  }
  {
    pictures::LinePlot p;
    p.title = "Scaling efficiency against " + unit;
    p.x_label = unit + " (log2 scale)";
    p.y_label = "efficiency (per-" + std::string(cuda ? "GPU" : "rank") + " samples/s vs the smallest size)";
    if (!ref.several_sizes) p.title += " (none: every run has the same size)";
    p.log2_x = true;
    p.y_min = 0;
    p.y_max = 1.1;
    add_scaling_series(p, sized, cuda ? "GPU" : "rank", [](const Run& r) { return r.efficiency; });
    if (ref.several_sizes) p.series.push_back({"ideal", counts, std::vector<double>(counts.size(), 1.0), true, false});
    pictures::write_text_file((out / "efficiency.svg").string(), pictures::render_line_plot(p));
  }
  auto label = [&](const Run& r) {
    const std::string attempts =
        r.progress.attempts > 1 ? ", " + std::to_string(r.progress.attempts) + " attempts" : std::string();
    if (!r.complete) return r.name + " (incomplete" + attempts + ")";
    return r.name + " (" + std::to_string(r.count()) + " " + (cuda ? "GPU" : "rank") + (r.count() == 1 ? "" : "s") +
           attempts + ")";
  };
  // Loss and metric on the run clock (every attempt's training loops, continuous across a
  // resume) where every run has times, else against the step. One series per run dir.
  {
    bool timed = true;
    for (const Run& r : runs)
      for (const records::TrainPoint& t : r.records.train) timed &= std::isfinite(t.elapsed_s);
    pictures::LinePlot p;
    p.title = "Training loss";
    p.x_label = timed ? "elapsed s (training loops of every attempt)" : "step";
    p.y_label = "train loss";
    p.x_min = 0;
    for (const Run& r : runs) {
      pictures::PlotSeries s{label(r), {}, {}, false, false};
      for (const records::TrainPoint& t : r.records.train) {
        s.x.push_back(timed ? t.elapsed_s : static_cast<double>(t.step));
        s.y.push_back(t.loss);
      }
      // Where the run resumed on another number of ranks: a dashed mark across its losses.
      double lo = INFINITY, hi = -INFINITY;
      for (double y : s.y) lo = std::min(lo, y), hi = std::max(hi, y);
      const std::string name = s.label;
      p.series.push_back(std::move(s));
      for (const records::ResumePoint& q : r.records.resumes) {
        const double x = timed ? q.elapsed_s : static_cast<double>(q.step);
        if (q.from_ranks <= 0 || !std::isfinite(x) || !(lo <= hi)) continue;
        p.series.push_back({name + ": " + std::to_string(q.from_ranks) + " -> " + std::to_string(q.ranks) +
                                " ranks at step " + std::to_string(q.step),
                            {x, x}, {lo, hi}, true, false});
      }
    }
    pictures::write_text_file((out / "loss.svg").string(), pictures::render_line_plot(p));
  }
  // The learning rate of each step (metrics.jsonl's train records), one series per run dir:
  // warm-up, decay and a resume's rescaling (elastic.batch = learner) as the runs saw them.
  {
    bool any = false;
    pictures::LinePlot p;
    p.title = "Learning rate";
    p.x_label = "step";
    p.y_label = "learning rate";
    p.x_min = 0;
    p.y_min = 0;
    for (const Run& r : runs) {
      pictures::PlotSeries s{label(r), {}, {}, false, false};
      for (const records::TrainPoint& t : r.records.train) {
        if (!std::isfinite(t.lr)) continue;
        s.x.push_back(static_cast<double>(t.step));
        s.y.push_back(t.lr);
        any = true;
      }
      p.series.push_back(std::move(s));
    }
    double top = 0;
    for (const pictures::PlotSeries& s : p.series)
      for (double y : s.y) top = std::max(top, y);
    if (top > 0) p.y_max = top * 1.05;  // the peak below the frame's top edge
    std::error_code ec;
    if (any) pictures::write_text_file((out / "lr.svg").string(), pictures::render_line_plot(p));
    else fs::remove(out / "lr.svg", ec);  // records without lr (an earlier squall's): no plot
  }
  {
    bool seg = false;
    for (const Run& r : runs) seg |= r.metric_name == "test_miou";
    bool timed = true;
    for (const Run& r : runs)
      for (const records::EvalPoint& e : r.records.eval) timed &= std::isfinite(e.elapsed_s);
    pictures::LinePlot p;
    p.title = seg ? "Test mean IoU" : "Test accuracy";
    p.x_label = timed ? "elapsed s (training loops of every attempt)" : "step";
    p.y_label = seg ? "test_miou" : "test_accuracy";
    p.x_min = 0;
    double right = 0;
    for (const Run& r : runs) {
      pictures::PlotSeries s{label(r), {}, {}, false, true};
      for (const records::EvalPoint& e : r.records.eval) {
        s.x.push_back(timed ? e.elapsed_s : static_cast<double>(e.step));
        s.y.push_back(seg ? e.miou : e.accuracy);
        if (std::isfinite(s.x.back())) right = std::max(right, s.x.back());
      }
      p.series.push_back(std::move(s));
    }
    // The targets of the plotted metric, each a dashed level across the plot.
    std::vector<double> levels;
    auto is_miou = [](const std::string& metric) {  // a record's name (train.target.metric)
      const config::TargetMetric* m = config::k_target_metrics.find(metric);
      return m != nullptr && *m == config::TargetMetric::miou;
    };
    for (const Run& r : runs)
      if (r.target && is_miou(r.target->metric) == seg && std::isfinite(r.target->target) &&
          std::find(levels.begin(), levels.end(), r.target->target) == levels.end())
        levels.push_back(r.target->target);
    for (double v : levels) {
      char name[64];
      std::snprintf(name, sizeof(name), "target %s %g", seg ? "mIoU" : "accuracy", v);
      p.series.push_back({name, {0.0, right > 0 ? right : 1.0}, {v, v}, true, false});
    }
    pictures::write_text_file((out / "accuracy.svg").string(), pictures::render_line_plot(p));
  }
  // Time to target against size, for the runs that reached one, joined as in the throughput plot.
  std::vector<const Run*> reached;
  for (const Run* r : sized)
    if (r->target && r->target->reached && std::isfinite(r->target->time_s)) reached.push_back(r);
  if (!reached.empty()) {
    pictures::LinePlot p;
    p.title = "Time to target against " + unit;
    p.x_label = unit + " (log2 scale)";
    p.y_label = "time to target s (run clock)";
    p.log2_x = true;
    p.y_min = 0;
    add_scaling_series(p, reached, cuda ? "GPU" : "rank", [](const Run& r) { return r.target->time_s; });
    pictures::write_text_file((out / "time_to_target.svg").string(), pictures::render_line_plot(p));
  } else {
    std::error_code ec;
    fs::remove(out / "time_to_target.svg", ec);  // an earlier report's, into the same folder
  }
}

int run_report(Context& ctx, const ReportArgs& args) {
  // Every rank reads the same dirs and agrees on an error without a collective; rank 0 writes.
  std::vector<Run> runs;
  for (const std::string& d : args.run_dirs) runs.push_back(read_run(d));
  std::stable_sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    if (a.complete != b.complete) return a.complete;
    return a.count() < b.count();
  });
  bool cuda = false, all_cuda = true;
  for (const Run& r : runs)
    if (r.complete) cuda |= r.cuda, all_cuda &= r.cuda;
  cuda = cuda && all_cuda;  // a mix of CPU and GPU runs is counted in ranks
  if (!cuda)
    for (Run& r : runs) r.cuda = false;
  // The reference: runs are sorted by size, so the first measured run has the smallest.
  Reference ref;
  auto measured = [](const Run& r) {
    return r.complete && r.count() > 0 && std::isfinite(r.samples_per_s) && r.samples_per_s > 0;
  };
  double sum = 0;
  for (const Run& r : runs) {
    if (!measured(r)) continue;
    if (ref.runs.empty()) ref.count = r.count();
    if (r.count() == ref.count) {
      ref.runs.push_back(&r);
      sum += r.samples_per_s / r.count();
    } else {
      ref.several_sizes = true;
    }
  }
  if (ref.usable()) ref.per_unit = sum / static_cast<double>(ref.runs.size());
  for (Run& r : runs) {
    if (!ref.several_sizes || !measured(r)) continue;
    // The reference size's runs are the reference: 1, not one compared with another.
    r.efficiency = r.count() == ref.count ? 1.0 : (r.samples_per_s / r.count()) / ref.per_unit;
  }
  if (ctx.runtime.rank() != 0) return 0;

  const fs::path out(args.out);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) throw Error("cannot create the report folder " + args.out + ": " + ec.message());
  const std::string md = "# squall report\n\n" + markdown(runs, ref, cuda);
  pictures::write_text_file((out / "report.md").string(), md);
  write_plots(runs, ref, cuda, out);
  print_result(args.json, table_json(runs), md);
  return 0;
}

}  // namespace

void add_report_command(CLI::App& root, Context& ctx, Actions& actions) {
  CLI::App* sub = root.add_subcommand("report", "Summarise run directories and scaling studies");
  auto args = std::make_shared<ReportArgs>();
  sub->add_option("run_dirs", args->run_dirs, "Run directories written by `squall train`")
      ->required()
      ->type_name("RUN_DIR...");
  sub->add_option("--out", args->out, "Folder for report.md and the SVG plots")->type_name("DIR")->capture_default_str();
  sub->add_flag("--json", args->json, "Print the table as a JSON array instead of the Markdown");
  sub->footer("Writes report.md (also printed), throughput.svg, efficiency.svg, loss.svg, lr.svg (the learning rate "
              "per step), accuracy.svg and, when a run reached its train.target, time_to_target.svg. Exit status: 0 "
              "done; 1 the report folder cannot be written; 2 a usage error (a dir that is not a run dir).");
  actions[sub] = [&ctx, args] { return run_report(ctx, *args); };
}

}  // namespace squall::app
