// `squall report RUN_DIR... [--out DIR] [--json]`: a table of runs (one row per run dir,
// sorted by GPU or rank count) with throughput, scaling efficiency against the smallest run,
// the time breakdown and the final metric, as report.md (also printed) or JSON, and four SVG
// plots drawn by io/svg (docs/training.md, "Reports").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/svg.hpp"
#include "mpi/runtime.hpp"
#include "src/app/cli.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

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

struct TrainPoint {
  int64_t step;
  double loss;
};
struct EvalPoint {
  int64_t step;
  double elapsed_s;  // NaN when the record has none
  double metric;     // test_accuracy, or test_miou for per-pixel labels
};

struct Run {
  std::string path, name;
  bool complete = false;
  std::string why_incomplete;
  int nodes = 0, ranks = 0, gpus = 0, learners = 0;
  bool cuda = false;
  int64_t global_batch = 0;
  double samples_per_s = k_nan, efficiency = k_nan;
  double compute = k_nan, allreduce = k_nan, io_wait = k_nan;
  std::string metric_name = "test_accuracy";
  double metric = k_nan;
  std::vector<TrainPoint> train;
  std::vector<EvalPoint> eval;

  int count() const { return cuda ? gpus : ranks; }  // what the x axes and the sort use
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

Run read_run(const std::string& path) {
  Run run;
  run.path = path;
  run.name = dir_name(path);
  const fs::path dir(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw CollectiveError(path + " is not a run dir: no such directory", k_exit_usage);
  const bool has_summary = fs::is_regular_file(dir / "summary.json", ec);
  const bool has_metrics = fs::is_regular_file(dir / "metrics.jsonl", ec);
  if (!has_summary && !has_metrics)
    throw CollectiveError(path + " is not a run dir: it holds neither summary.json nor metrics.jsonl (written by "
                                 "`squall train`)",
                          k_exit_usage);

  if (has_metrics) {
    std::ifstream in(dir / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const json r = json::parse(line, nullptr, false);
      if (r.is_discarded() || !r.is_object()) continue;  // a line cut by a crash
      const std::string kind = r.value("kind", "");
      if (kind == "train" && r.contains("step") && r.contains("loss")) {
        run.train.push_back({r.at("step").get<int64_t>(), number(r, "loss")});
      } else if (kind == "eval" && r.contains("step")) {
        const bool seg = r.contains("test_iou_per_class");
        if (seg) run.metric_name = "test_miou";
        run.eval.push_back({r.at("step").get<int64_t>(), number(r, "elapsed_s"),
                            number(r, seg ? "test_miou" : "test_accuracy")});
      }
    }
  }

  if (!has_summary) {
    run.why_incomplete = "no summary.json";
    return run;
  }
  std::ifstream in(dir / "summary.json");
  const json s = json::parse(in, nullptr, false);
  if (s.is_discarded() || !s.is_object() || !s.contains("world_size") || !s.contains("samples_per_s")) {
    run.why_incomplete = "summary.json unreadable";
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
  return run;
}

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char b[48];
  std::snprintf(b, sizeof(b), "%.*f", decimals, v);
  return b;
}

json or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// The seconds of a train record: interpolated from the eval records' (step, elapsed_s), from
// (0, 0) on and extrapolated at the last rate; NaN without any timed eval record.
double elapsed_at(const std::vector<std::pair<double, double>>& timed, double step) {
  if (timed.size() < 2) return k_nan;
  size_t k = 1;
  while (k + 1 < timed.size() && timed[k].first < step) ++k;
  const auto [s0, t0] = timed[k - 1];
  const auto [s1, t1] = timed[k];
  if (s1 == s0) return t1;
  return t0 + (step - s0) * (t1 - t0) / (s1 - s0);
}

std::vector<std::pair<double, double>> step_times(const Run& run) {
  std::vector<std::pair<double, double>> timed{{0.0, 0.0}};
  for (const EvalPoint& e : run.eval)
    if (std::isfinite(e.elapsed_s) && e.step > 0 && static_cast<double>(e.step) > timed.back().first)
      timed.emplace_back(static_cast<double>(e.step), e.elapsed_s);
  return timed;
}

std::string markdown(const std::vector<Run>& runs, const Run* base, bool cuda) {
  std::ostringstream o;
  o << "| run | nodes | ranks | GPUs | learners | global batch | samples/s | efficiency | compute s (%) | "
       "allreduce s (%) | io_wait s (%) | final metric |\n";
  o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const Run& r : runs) {
    if (!r.complete) {
      o << "| " << r.name << " | - | - | - | - | - | - | - | - | - | - | incomplete (" << r.why_incomplete << ") |\n";
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
      << (std::isfinite(r.metric) ? r.metric_name + " " + fixed(r.metric, 4) : std::string("-")) << " |\n";
  }
  if (base) {
    const std::string unit = cuda ? "GPU" : "rank";
    bool weak = true, strong = true;
    for (const Run& r : runs) {
      if (!r.complete || base->count() == 0) continue;
      weak &= r.global_batch * base->count() == base->global_batch * r.count();
      strong &= r.global_batch == base->global_batch;
    }
    o << "\nEfficiency: weak-scaling definition, (samples/s / " << unit << "s) / (samples/s / " << unit
      << "s of the smallest run, " << base->name << " with " << base->count() << " " << unit
      << (base->count() == 1 ? "" : "s") << "); 1.00 means each " << unit
      << " keeps the smallest run's throughput. ";
    if (weak && !strong)
      o << "The global batch grows with the " << unit << " count here (weak scaling).";
    else if (strong && runs.size() > 1)
      o << "The global batch is the same in every run (a strong-scaling study measured per " << unit << ").";
    else
      o << "The global batch is not proportional to the " << unit << " count in every run.";
    o << "\n";
  } else {
    o << "\nNo complete run: no efficiency.\n";
  }
  if (!cuda) o << "GPUs: 0 (CPU ranks): the runs used the CPU backend; the plots count ranks.\n";
  o << "Time breakdown: rank 0's seconds (summary.json `time_breakdown_s`), as % of their sum.\n";
  return o.str();
}

json table_json(const std::vector<Run>& runs) {
  json a = json::array();
  for (const Run& r : runs) {
    json j{{"run", r.name}, {"path", r.path}, {"status", r.complete ? "complete" : "incomplete"}};
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
    j["global_batch"] = r.global_batch;
    j["samples_per_s"] = or_null(r.samples_per_s);
    j["efficiency"] = or_null(r.efficiency);
    j["time_breakdown_s"] = {{"compute", or_null(r.compute)}, {"allreduce", or_null(r.allreduce)},
                             {"io_wait", or_null(r.io_wait)}};
    j["time_breakdown_pct"] = {{"compute", pct(r.compute)}, {"allreduce", pct(r.allreduce)},
                               {"io_wait", pct(r.io_wait)}};
    j["metric"] = r.metric_name;
    j[r.metric_name] = or_null(r.metric);
    a.push_back(j);
  }
  return a;
}

void write_plots(const std::vector<Run>& runs, const Run* base, bool cuda, const fs::path& out) {
  const std::string unit = cuda ? "GPUs" : "ranks";
  std::vector<double> counts, sps, ideal, eff;
  for (const Run& r : runs) {
    if (!r.complete || r.count() <= 0) continue;
    counts.push_back(r.count());
    sps.push_back(r.samples_per_s);
    eff.push_back(r.efficiency);
    ideal.push_back(base ? base->samples_per_s * r.count() / base->count() : k_nan);
  }
  {
    io::LinePlot p;
    p.title = "Throughput against " + unit;
    p.x_label = unit + " (log2 scale)";
    p.y_label = "samples/s";
    p.log2_x = true;
    p.y_min = 0;
    double top = 0;
    for (double v : sps) top = std::max(top, std::isfinite(v) ? v : 0);
    for (double v : ideal) top = std::max(top, std::isfinite(v) ? v : 0);
    p.y_max = top > 0 ? top * 1.1 : 1;
    p.series.push_back({"measured", counts, sps, false, true});
    p.series.push_back({"ideal linear scaling", counts, ideal, true, false});
    io::write_text_file((out / "throughput.svg").string(), io::render_line_plot(p));
  }
  {
    io::LinePlot p;
    p.title = "Scaling efficiency against " + unit;
    p.x_label = unit + " (log2 scale)";
    p.y_label = "efficiency (per-" + std::string(cuda ? "GPU" : "rank") + " samples/s vs smallest run)";
    p.log2_x = true;
    p.y_min = 0;
    p.y_max = 1.1;
    p.series.push_back({"efficiency", counts, eff, false, true});
    p.series.push_back({"ideal", counts, std::vector<double>(counts.size(), 1.0), true, false});
    io::write_text_file((out / "efficiency.svg").string(), io::render_line_plot(p));
  }
  // Loss and metric against time: seconds where every run has timed eval records, else steps.
  bool timed = true;
  for (const Run& r : runs)
    if (!r.train.empty() && step_times(r).size() < 2) timed = false;
  auto label = [&](const Run& r) {
    if (!r.complete) return r.name + " (incomplete)";
    return r.name + " (" + std::to_string(r.count()) + " " + (cuda ? "GPU" : "rank") + (r.count() == 1 ? "" : "s") +
           ")";
  };
  {
    io::LinePlot p;
    p.title = "Training loss";
    p.x_label = timed ? "elapsed s" : "step";
    p.y_label = "train loss";
    p.x_min = 0;
    for (const Run& r : runs) {
      io::PlotSeries s{label(r), {}, {}, false, false};
      const auto times = step_times(r);
      for (const TrainPoint& t : r.train) {
        s.x.push_back(timed ? elapsed_at(times, static_cast<double>(t.step)) : static_cast<double>(t.step));
        s.y.push_back(t.loss);
      }
      p.series.push_back(std::move(s));
    }
    io::write_text_file((out / "loss.svg").string(), io::render_line_plot(p));
  }
  {
    bool seg = false;
    for (const Run& r : runs) seg |= r.metric_name == "test_miou";
    io::LinePlot p;
    p.title = seg ? "Test mean IoU" : "Test accuracy";
    bool eval_timed = true;
    for (const Run& r : runs)
      for (const EvalPoint& e : r.eval) eval_timed &= std::isfinite(e.elapsed_s);
    p.x_label = eval_timed ? "elapsed s" : "step";
    p.y_label = seg ? "test_miou" : "test_accuracy";
    p.x_min = 0;
    for (const Run& r : runs) {
      io::PlotSeries s{label(r), {}, {}, false, true};
      for (const EvalPoint& e : r.eval) {
        s.x.push_back(eval_timed ? e.elapsed_s : static_cast<double>(e.step));
        s.y.push_back(e.metric);
      }
      p.series.push_back(std::move(s));
    }
    io::write_text_file((out / "accuracy.svg").string(), io::render_line_plot(p));
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
  const Run* base = nullptr;
  for (const Run& r : runs)
    if (r.complete && r.count() > 0 && std::isfinite(r.samples_per_s) && r.samples_per_s > 0) {
      base = &r;
      break;
    }
  for (Run& r : runs)
    if (base && r.complete && r.count() > 0)
      r.efficiency = (r.samples_per_s / r.count()) / (base->samples_per_s / base->count());
  if (ctx.runtime.rank() != 0) return 0;

  const fs::path out(args.out);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) throw Error("cannot create the report folder " + args.out + ": " + ec.message());
  const std::string md = "# squall report\n\n" + markdown(runs, base, cuda);
  io::write_text_file((out / "report.md").string(), md);
  write_plots(runs, base, cuda, out);
  if (args.json)
    std::cout << table_json(runs).dump(2) << "\n" << std::flush;
  else
    std::cout << md << std::flush;
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
  sub->footer("Writes report.md (also printed), throughput.svg, efficiency.svg, loss.svg and accuracy.svg. Exit "
              "status: 0 done; 1 the report folder cannot be written; 2 a usage error (a dir that is not a run dir).");
  actions[sub] = [&ctx, args] { return run_report(ctx, *args); };
}

}  // namespace squall::app
