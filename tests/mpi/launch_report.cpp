// `squall report`: three small SMA runs on 1, 2 and 4 ranks summarised into a table (Markdown
// and JSON), four SVG plots that are well-formed XML, an incomplete run listed as such, and a
// dir that is not a run dir refused with exit 2. Run dirs written by hand in the records' old
// and current forms: a resumed run is one run on one clock, runs of one size are never joined,
// and the whole run's time and the time to target are in the table. With chromium installed,
// each plot is also rendered headless and the screenshot must not be blank.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/xml_check.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string k_fashion_mnist = "/usr/share/datasets/fashion-mnist";
const std::string k_sma = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-sma.toml";
const char* const k_plots[] = {"throughput.svg", "efficiency.svg", "loss.svg", "lr.svg", "accuracy.svg"};

bool have_data() { return fs::exists(k_fashion_mnist + "/t10k-images-idx3-ubyte.gz"); }

// A tiny SMA run on `ranks` ranks into `dir`.
void train(const std::string& dir, int ranks) {
  const auto r = run_command((ranks > 1 ? mpiexec(ranks) + " " : std::string()) + squall_bin() + " train --config " +
                             k_sma + " --set run.dir=" + dir +
                             " --set train.max_steps=30 --set schedule.warmup_steps=0 --set data.train_samples=4096" +
                             " --set data.test_samples=256" +
                             " --set train.log_every_steps=5");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

squall::test::ProcessResult report(const std::string& args) {
  return run_command(squall_bin() + " report " + args);
}

// ---- run dirs written by hand, as the trainer writes them ---------------------------------

void write_run(const std::string& dir, const std::vector<json>& records, const json& summary) {
  fs::create_directories(dir);
  std::ofstream m(dir + "/metrics.jsonl");
  for (const json& r : records) m << r.dump() << "\n";
  if (!summary.is_null()) std::ofstream(dir + "/summary.json") << summary.dump(2);
}

json summary_of(int ranks, double samples_per_s, int64_t steps, double loop_s) {
  return json{{"world_size", ranks}, {"nodes", 1}, {"devices_per_rank", 1}, {"replicas_per_device", 1},
              {"backend", "cpu"}, {"model", "lenet5"}, {"algorithm", "ssgd"}, {"precision", "fp32"},
              {"batch_per_learner", 32}, {"global_batch", 32 * ranks}, {"samples_per_s", samples_per_s},
              {"steps", steps}, {"train_loop_s", loop_s}, {"wall_s", loop_s + 1}, {"parameters", 61706},
              {"time_breakdown_s", {{"compute", 0.8 * loop_s}, {"allreduce", 0.1 * loop_s}, {"io_wait", 0.01}}},
              {"final", {{"test_accuracy", 0.8}, {"test_loss", 0.5}, {"train_loss", 0.4}}}};
}

json train_record(int64_t step) {
  return {{"kind", "train"}, {"step", step}, {"epoch", 1 + step / 40}, {"loss", 2.0 - step / 100.0}, {"lr", 0.1},
          {"learners", 1}, {"samples_per_s", 100.0}};
}

json eval_record(int64_t step, double elapsed, double accuracy) {
  return {{"kind", "eval"}, {"step", step}, {"epoch", 1 + step / 40}, {"test_loss", 1.0}, {"test_accuracy", accuracy},
          {"test_miou", 0.3}, {"eval_s", 0.1}, {"elapsed_s", elapsed}, {"train_s", elapsed}, {"epochs_done", 1.0}};
}

json with_clock(json r, int attempt, double elapsed) {
  r["attempt"] = attempt;
  r["elapsed_s"] = elapsed;
  return r;
}

// Written before `attempt` and the run clock: 80 steps over two attempts of 20 s each, the
// second resumed from the checkpoint at step 40, with elapsed_s restarting at 0 after the resume.
void old_resumed_run(const std::string& dir) {
  std::vector<json> r;
  for (int64_t step : {10, 20, 30, 40}) {
    r.push_back(train_record(step));
    if (step % 20 == 0) r.push_back(eval_record(step, step * 0.5, 0.5 + step / 400.0));
  }
  r.push_back({{"kind", "checkpoint"}, {"step", 40}, {"path", "checkpoints/step-00000040"}, {"seconds", 0.1}});
  r.push_back({{"kind", "resume"}, {"step", 40}, {"checkpoint", "checkpoints/step-00000040"}});
  for (int64_t step : {50, 60, 70, 80}) {
    r.push_back(train_record(step));
    if (step % 20 == 0) r.push_back(eval_record(step, (step - 40) * 0.5, 0.5 + step / 400.0));
  }
  write_run(dir, r, summary_of(2, 160.0, 80, 20.0));
}

// The records as the trainer writes them now: the run clock continues across the resume; the
// target (accuracy 0.65) is reached at step 60.
void new_resumed_run(const std::string& dir) {
  std::vector<json> r;
  for (int64_t step : {10, 20, 30, 40}) {
    r.push_back(with_clock(train_record(step), 1, step * 0.5));
    if (step % 20 == 0) r.push_back(with_clock(eval_record(step, 0, 0.5 + step / 400.0), 1, step * 0.5 + 0.1));
  }
  r.push_back({{"kind", "resume"}, {"step", 40}, {"checkpoint", "checkpoints/step-00000040"}, {"attempt", 2},
               {"elapsed_s", 20.1}});
  for (int64_t step : {50, 60, 70, 80}) {
    r.push_back(with_clock(train_record(step), 2, 20.1 + (step - 40) * 0.5));
    if (step % 20 == 0) r.push_back(with_clock(eval_record(step, 0, 0.5 + step / 400.0), 2, 20.2 + (step - 40) * 0.5));
    if (step == 60)
      r.push_back({{"kind", "target"}, {"step", 60}, {"metric", "accuracy"}, {"value", 0.65}, {"target", 0.65},
                   {"elapsed_s", 30.2}});
  }
  json s = summary_of(2, 170.0, 80, 20.0);
  s["attempt"] = {{"number", 2}, {"first_step", 40}, {"steps", 40}, {"wall_s", 21.0}, {"train_loop_s", 20.0},
                  {"samples_per_s", 170.0}};
  s["run"] = {{"attempts", 2}, {"steps", 80}, {"train_loop_s", 40.1}, {"samples", 5120}};
  s["target"] = {{"metric", "accuracy"}, {"value", 0.65}, {"reached", true}, {"step", 60}, {"epoch", 2},
                 {"time_to_target_s", 30.2}, {"metric_value", 0.65}};
  write_run(dir, r, s);
}

// One attempt on `ranks` ranks, in the current form, its target (accuracy 0.9) not reached.
void plain_run(const std::string& dir, int ranks, double samples_per_s) {
  std::vector<json> r;
  for (int64_t step : {10, 20, 30, 40}) r.push_back(with_clock(train_record(step), 1, step * 0.3));
  r.push_back(with_clock(eval_record(40, 0, 0.7), 1, 12.1));
  json s = summary_of(ranks, samples_per_s, 40, 12.0);
  s["attempt"] = {{"number", 1}, {"first_step", 0}, {"steps", 40}, {"wall_s", 13.0}, {"train_loop_s", 12.0},
                  {"samples_per_s", samples_per_s}};
  s["run"] = {{"attempts", 1}, {"steps", 40}, {"train_loop_s", 12.0}, {"samples", 1280 * ranks}};
  s["target"] = {{"metric", "accuracy"}, {"value", 0.9}, {"reached", false}};
  write_run(dir, r, s);
}

struct Polyline {
  std::string title;
  std::vector<std::pair<double, double>> points;
};

// Every polyline of an SVG document with its <title> (the series' label) and its points.
std::vector<Polyline> polylines(const std::string& svg) {
  std::vector<Polyline> out;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
    Polyline p;
    const size_t pts = svg.find("points=\"", at) + 8;
    std::istringstream in(svg.substr(pts, svg.find('"', pts) - pts));
    for (std::string xy; in >> xy;) {
      const size_t comma = xy.find(',');
      p.points.emplace_back(std::stod(xy.substr(0, comma)), std::stod(xy.substr(comma + 1)));
    }
    const size_t title = svg.find("<title>", at) + 7;
    p.title = svg.substr(title, svg.find("</title>", title) - title);
    out.push_back(std::move(p));
  }
  return out;
}

const Polyline* find_line(const std::vector<Polyline>& lines, const std::string& title_start) {
  for (const Polyline& p : lines)
    if (p.title.rfind(title_start, 0) == 0) return &p;
  return nullptr;
}

// A rectangle of an SVG document: x, y, width, height.
struct Box {
  double x = 0, y = 0, w = 0, h = 0;
  bool overlaps(const Box& o) const { return x < o.x + o.w && o.x < x + w && y < o.y + o.h && o.y < y + h; }
};

// The plot area (the clip path's rectangle), the legend's box and the document's size, read
// from the elements of a plot.
struct PlotLayout {
  bool has_plot = false, has_legend = false;
  Box plot, legend;
  double width = 0, height = 0;
};

PlotLayout plot_layout(const squall::test::XmlCheck& x) {
  PlotLayout l;
  auto box = [](const squall::test::XmlElement& e) {
    return Box{std::stod(e.attributes.at("x")), std::stod(e.attributes.at("y")), std::stod(e.attributes.at("width")),
               std::stod(e.attributes.at("height"))};
  };
  std::string parent;
  for (const auto& e : x.elements) {
    if (e.name == "svg") {
      l.width = std::stod(e.attributes.at("width"));
      l.height = std::stod(e.attributes.at("height"));
    }
    if (e.name == "rect" && parent == "clipPath") l.plot = box(e), l.has_plot = true;
    const auto cls = e.attributes.find("class");
    if (e.name == "rect" && cls != e.attributes.end() && cls->second == "legend-box") l.legend = box(e), l.has_legend = true;
    parent = e.name;
  }
  return l;
}

// A run whose learning rate warms up over its first 40 steps: lr = 0.001 * step.
void warmup_run(const std::string& dir, int ranks, double samples_per_s) {
  plain_run(dir, ranks, samples_per_s);
  std::vector<json> r;
  for (int64_t step : {10, 20, 30, 40}) {
    json t = with_clock(train_record(step), 1, step * 0.3);
    t["lr"] = 0.001 * static_cast<double>(step);
    r.push_back(t);
  }
  write_run(dir, r, squall::test::read_json(dir + "/summary.json"));
}

}  // namespace

TEST_CASE("report summarises runs on 1, 2 and 4 ranks into a table and four SVG plots", "[launch][report]") {
  if (!have_data()) SQUALL_SKIP(k_fashion_mnist << " missing (install dataset-fashion-mnist)");
  TempDir tmp("squall-launch-report");
  // Given out of order: the table sorts them by rank count.
  for (int ranks : {4, 1, 2}) train(tmp.file("np" + std::to_string(ranks)), ranks);
  const std::string dirs = tmp.file("np4") + " " + tmp.file("np1") + " " + tmp.file("np2");
  const std::string out = tmp.file("report");

  const auto md = report(dirs + " --out " + out);
  INFO(md.out << md.err);
  REQUIRE(md.exit_code == 0);
  CHECK(md.out == slurp(out + "/report.md"));  // the Markdown on stdout is the file's
  // Three rows in rank order, the smallest one at efficiency 1.00, CPU ranks.
  std::vector<std::string> rows;
  std::istringstream lines(md.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("| np", 0) == 0) rows.push_back(line);
  REQUIRE(rows.size() == 3);
  CHECK_THAT(rows[0], Catch::StartsWith("| np1 | 1 | 1 | 0 (CPU ranks) | 2 | 32 |") && Catch::Contains("| 1.00 |") &&
                          Catch::Contains("test_accuracy 0."));
  CHECK_THAT(rows[1], Catch::StartsWith("| np2 | 1 | 2 | 0 (CPU ranks) | 4 | 64 |"));
  CHECK_THAT(rows[2], Catch::StartsWith("| np4 | 1 | 4 | 0 (CPU ranks) | 8 | 128 |"));
  CHECK_THAT(md.out, Catch::Contains("weak-scaling") && Catch::Contains("(weak scaling)"));

  for (const char* plot : k_plots) {
    const std::string path = out + "/" + plot;
    INFO(path);
    REQUIRE(fs::exists(path));
    const auto x = squall::test::check_xml(slurp(path));
    INFO(x.error);
    CHECK(x.ok);
    CHECK(x.root == "svg");
    CHECK(x.count("polyline") >= 2);
  }
  // The throughput plot: one point per run, measured and ideal.
  const auto tp = squall::test::check_xml(slurp(out + "/throughput.svg"));
  for (const auto& e : tp.elements)
    if (e.name == "polyline") CHECK(squall::test::polyline_point_count(e.attributes.at("points")) == 3);

  // --json: the same table.
  const auto j = report(dirs + " --out " + out + " --json");
  INFO(j.out << j.err);
  REQUIRE(j.exit_code == 0);
  const json table = json::parse(j.out);
  REQUIRE(table.size() == 3);
  CHECK(table[0].at("ranks") == 1);
  CHECK(table[1].at("ranks") == 2);
  CHECK(table[2].at("ranks") == 4);
  CHECK(table[0].at("efficiency").get<double>() == Approx(1.0));
  CHECK(table[0].at("gpus") == 0);
  CHECK(table[2].at("learners") == 8);
  CHECK(table[2].at("samples_per_s").get<double>() > 0);
  CHECK(table[1].at("time_breakdown_s").at("allreduce").get<double>() >= 0);
  CHECK(table[0].at("test_accuracy").get<double>() > 0.1);

  // An incomplete run (no summary.json) is listed, not dropped.
  fs::remove(tmp.file("np2") + "/summary.json");
  const auto inc = report(dirs + " --out " + out + " --json");
  INFO(inc.out << inc.err);
  REQUIRE(inc.exit_code == 0);
  const json t2 = json::parse(inc.out);
  REQUIRE(t2.size() == 3);
  CHECK(t2[2].at("run") == "np2");
  CHECK(t2[2].at("status") == "incomplete");
  const auto inc_md = report(dirs + " --out " + out);
  CHECK_THAT(inc_md.out, Catch::Contains("| np2 |") && Catch::Contains("incomplete (no summary.json)"));
}

TEST_CASE("report refuses a dir that is not a run dir, naming it", "[launch][report]") {
  TempDir tmp("squall-launch-report-bad");
  fs::create_directories(tmp.file("not-a-run"));
  std::ofstream(tmp.file("not-a-run/notes.txt")) << "hello\n";
  auto r = report(tmp.file("not-a-run") + " --out " + tmp.file("out"));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(tmp.file("not-a-run")) && Catch::Contains("is not a run dir"));
  CHECK_FALSE(fs::exists(tmp.file("out") + "/report.md"));

  r = report(tmp.file("missing") + " --out " + tmp.file("out"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(tmp.file("missing")));

  r = report("");  // no run dir at all: a usage error
  CHECK(r.exit_code == 2);
}

TEST_CASE("report plots render in headless chromium and are not blank", "[launch][report][chromium]") {
  if (run_command("command -v chromium").exit_code != 0)
    SQUALL_SKIP("chromium is not installed (scripts/install-deps installs it): the plots are not rendered");
  if (!have_data()) SQUALL_SKIP(k_fashion_mnist << " missing (install dataset-fashion-mnist)");
  TempDir tmp("squall-launch-report-render");
  train(tmp.file("np1"), 1);
  train(tmp.file("np2"), 2);
  const std::string out = tmp.file("report");
  const auto r = report(tmp.file("np1") + " " + tmp.file("np2") + " --out " + out);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* plot : k_plots) {
    const std::string svg = out + "/" + plot;
    const std::string png = svg + ".png";
    const auto c = run_command("timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
                               "--user-data-dir=" + tmp.file("chromium-profile") + " --screenshot=" + png +
                               " --window-size=800,600 file://" + svg);
    INFO(plot << ": " << c.out << c.err);
    REQUIRE(fs::exists(png));
    const std::string bytes = slurp(png);
    REQUIRE(bytes.size() > 24);
    CHECK(bytes.compare(1, 3, "PNG") == 0);
    // A blank 800x600 page compresses to about 2 KB; lines, text and markers make it far larger.
    CHECK(bytes.size() > 8000);
  }
}

TEST_CASE("report draws a resumed run as one run on one clock, in the records' old and current forms",
          "[launch][report]") {
  TempDir tmp("squall-launch-report-resume");
  old_resumed_run(tmp.file("old-resumed"));
  new_resumed_run(tmp.file("new-resumed"));
  plain_run(tmp.file("one"), 1, 100.0);
  const std::string dirs = tmp.file("old-resumed") + " " + tmp.file("new-resumed") + " " + tmp.file("one");
  const std::string out = tmp.file("report");
  const auto md = report(dirs + " --out " + out);
  INFO(md.out << md.err);
  REQUIRE(md.exit_code == 0);
  // The whole run's time (old form: the last attempt's 20 s after the 20 s before its resume),
  // the attempts, and the time to target where a run has one.
  CHECK_THAT(md.out, Catch::Contains("| train loop s | time to target |"));
  CHECK_THAT(md.out, Catch::Contains("| test_accuracy 0.8000 | 40.00 (2 attempts) | - |"));
  CHECK_THAT(md.out, Catch::Contains("| 40.10 (2 attempts) | 30.2 s (step 60) |"));
  CHECK_THAT(md.out, Catch::Contains("| 12.00 | not reached |"));

  const auto j = report(dirs + " --out " + out + " --json");
  INFO(j.out << j.err);
  REQUIRE(j.exit_code == 0);
  const json table = json::parse(j.out);
  REQUIRE(table.size() == 3);
  CHECK(table[0].at("run") == "one");  // sorted by rank count, then as given
  CHECK(table[1].at("run") == "old-resumed");
  CHECK(table[2].at("run") == "new-resumed");
  CHECK(table[0].at("attempts") == 1);
  CHECK(table[0].at("target").at("reached") == false);
  CHECK(table[0].at("target").at("time_to_target_s").is_null());
  CHECK(table[1].at("attempts") == 2);
  CHECK(table[1].at("train_loop_s").get<double>() == Approx(40.0));
  CHECK(table[1].at("steps") == 80);
  CHECK_FALSE(table[1].contains("target"));
  CHECK(table[2].at("attempts") == 2);
  CHECK(table[2].at("train_loop_s").get<double>() == Approx(40.1));
  CHECK(table[2].at("target").at("time_to_target_s").get<double>() == Approx(30.2));
  CHECK(table[2].at("target").at("step") == 60);
  for (const json& row : table) CHECK(row.contains("samples_per_s"));  // the old columns stay

  // loss.svg: each resumed run is one polyline through all 8 train records, its x (the run
  // clock) increasing and going on past the resume at step 40 (the 4th point) as far again.
  const auto loss = polylines(slurp(out + "/loss.svg"));
  REQUIRE(loss.size() == 3);
  for (const char* name : {"old-resumed (2 ranks, 2 attempts)", "new-resumed (2 ranks, 2 attempts)"}) {
    INFO(name);
    const Polyline* p = find_line(loss, name);
    REQUIRE(p != nullptr);
    REQUIRE(p->points.size() == 8);
    for (size_t i = 1; i < p->points.size(); ++i) CHECK(p->points[i].first > p->points[i - 1].first);
    const double x0 = p->points[0].first, x4 = p->points[3].first, x8 = p->points[7].first;
    CHECK((x8 - x4) == Approx(x4 - x0 + (p->points[1].first - x0)).epsilon(0.05));  // 0.5 s a step throughout
  }
  // The old run's times are those of the current one, up to the 0.1 s its evaluations took.
  CHECK(find_line(loss, "old-resumed")->points.back().first ==
        Approx(find_line(loss, "new-resumed")->points.back().first).epsilon(0.01));
  // accuracy.svg: four evaluations per resumed run, x increasing; the target a dashed level.
  const std::string acc_svg = slurp(out + "/accuracy.svg");
  const auto acc = polylines(acc_svg);
  for (const char* name : {"old-resumed", "new-resumed"}) {
    const Polyline* p = find_line(acc, name);
    REQUIRE(p != nullptr);
    REQUIRE(p->points.size() == 4);
    for (size_t i = 1; i < p->points.size(); ++i) CHECK(p->points[i].first > p->points[i - 1].first);
  }
  CHECK(find_line(acc, "target accuracy 0.65") != nullptr);
  CHECK(find_line(acc, "target accuracy 0.9") != nullptr);
  CHECK_THAT(slurp(out + "/loss.svg"), Catch::Contains("elapsed s"));
  // time_to_target.svg: the one run that reached its target.
  REQUIRE(fs::exists(out + "/time_to_target.svg"));
  const auto ttt = polylines(slurp(out + "/time_to_target.svg"));
  REQUIRE(ttt.size() == 1);
  CHECK(ttt[0].points.size() == 1);
  for (const char* plot : {"throughput.svg", "efficiency.svg", "loss.svg", "accuracy.svg", "time_to_target.svg"}) {
    INFO(plot);
    const auto x = squall::test::check_xml(slurp(out + "/" + plot));
    INFO(x.error);
    CHECK(x.ok);
  }
}

TEST_CASE("report never joins the runs of two dirs of one size", "[launch][report]") {
  TempDir tmp("squall-launch-report-same-size");
  plain_run(tmp.file("a-np1"), 1, 100.0);
  plain_run(tmp.file("a-np2"), 2, 190.0);
  plain_run(tmp.file("b-np2"), 2, 150.0);  // a second run on 2 ranks
  plain_run(tmp.file("a-np4"), 4, 360.0);
  old_resumed_run(tmp.file("c-np2"));      // and a third, resumed once
  const std::string out = tmp.file("report");
  const auto r = report(tmp.file("a-np1") + " " + tmp.file("a-np2") + " " + tmp.file("b-np2") + " " +
                        tmp.file("a-np4") + " " + tmp.file("c-np2") + " --out " + out);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* plot : {"throughput.svg", "efficiency.svg"}) {
    INFO(plot);
    const auto lines = polylines(slurp(out + "/" + plot));
    // The study's line through 1, 2 and 4 ranks (the first run of each size), each other run
    // of 2 ranks a point of its own, and the ideal.
    const Polyline* measured = find_line(lines, "measured");
    REQUIRE(measured != nullptr);
    CHECK(measured->points.size() == 3);
    const Polyline* b = find_line(lines, "b-np2");
    const Polyline* c = find_line(lines, "c-np2");
    REQUIRE(b != nullptr);
    REQUIRE(c != nullptr);
    CHECK(b->points.size() == 1);
    CHECK(c->points.size() == 1);
    CHECK(lines.size() == 4);
    // No line has two points at one x: nothing vertical joins two runs.
    for (const Polyline& p : lines)
      for (size_t i = 1; i < p.points.size(); ++i) CHECK(p.points[i].first > p.points[i - 1].first);
  }
  // Loss and accuracy: one polyline per run dir.
  const auto loss = polylines(slurp(out + "/loss.svg"));
  CHECK(loss.size() == 5);
  for (const char* name : {"a-np1", "a-np2", "b-np2", "a-np4", "c-np2"}) CHECK(find_line(loss, name) != nullptr);

  // Runs of different studies (here another algorithm) are separate lines, named by what differs.
  json s = squall::test::read_json(tmp.file("b-np2") + "/summary.json");
  s["algorithm"] = "sma";
  std::ofstream(tmp.file("b-np2") + "/summary.json") << s.dump();
  REQUIRE(report(tmp.file("a-np1") + " " + tmp.file("a-np2") + " " + tmp.file("b-np2") + " --out " + out).exit_code == 0);
  const auto lines = polylines(slurp(out + "/throughput.svg"));
  REQUIRE(find_line(lines, "measured (ssgd)") != nullptr);
  CHECK(find_line(lines, "measured (ssgd)")->points.size() == 2);
  REQUIRE(find_line(lines, "measured (sma)") != nullptr);
  CHECK(find_line(lines, "measured (sma)")->points.size() == 1);
}

TEST_CASE("report keeps runs of other parallel.periods apart and lists the periods", "[launch][report]") {
  TempDir tmp("squall-launch-report-periods");
  plain_run(tmp.file("np1"), 1, 100.0);
  plain_run(tmp.file("np2"), 2, 190.0);
  plain_run(tmp.file("np2-by-level"), 2, 195.0);
  for (const auto& [name, periods] : {std::pair<std::string, json>{"np1", json{1, 1}}, {"np2", json{1, 1}},
                                      {"np2-by-level", json{1, 4}}}) {
    json s = squall::test::read_json(tmp.file(name) + "/summary.json");
    s["algorithm"] = "sma";
    s["parallel"] = {{"period", periods[1]}, {"periods", periods}};
    std::ofstream(tmp.file(name) + "/summary.json") << s.dump();
  }
  const std::string dirs = tmp.file("np1") + " " + tmp.file("np2") + " " + tmp.file("np2-by-level");
  const std::string out = tmp.file("report");
  REQUIRE(report(dirs + " --out " + out).exit_code == 0);
  const auto lines = polylines(slurp(out + "/throughput.svg"));
  REQUIRE(find_line(lines, "measured (periods [1, 1])") != nullptr);
  CHECK(find_line(lines, "measured (periods [1, 1])")->points.size() == 2);
  REQUIRE(find_line(lines, "measured (periods [1, 4])") != nullptr);
  CHECK(find_line(lines, "measured (periods [1, 4])")->points.size() == 1);
  const auto j = report(dirs + " --out " + out + " --json");
  INFO(j.out << j.err);
  REQUIRE(j.exit_code == 0);
  const json table = json::parse(j.out);
  REQUIRE(table.size() == 3);
  CHECK(table[0].at("algorithm") == "sma");
  CHECK(table[0].at("periods") == json({1, 1}));
  bool by_level = false;
  for (const json& row : table) by_level = by_level || (row.at("run") == "np2-by-level" && row.at("periods") == json({1, 4}));
  CHECK(by_level);
}

TEST_CASE("report draws each legend below its plot, outside the plot area, however long the run names",
          "[launch][report]") {
  TempDir tmp("squall-launch-report-legend");
  // Six runs, two of them with names longer than the plot is wide.
  const std::string long_name = "a-run-dir-whose-name-is-long-enough-to-fill-most-of-a-plot-of-eight-hundred-pixels-np";
  std::string dirs;
  for (int ranks : {1, 2, 4, 8}) {
    plain_run(tmp.file("np" + std::to_string(ranks)), ranks, 100.0 * ranks);
    dirs += tmp.file("np" + std::to_string(ranks)) + " ";
  }
  new_resumed_run(tmp.file(long_name + "2"));
  plain_run(tmp.file(long_name + "16"), 16, 1500.0);
  dirs += tmp.file(long_name + "2") + " " + tmp.file(long_name + "16");
  const std::string out = tmp.file("report");
  const auto r = report(dirs + " --out " + out);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* plot : {"throughput.svg", "efficiency.svg", "loss.svg", "lr.svg", "accuracy.svg",
                           "time_to_target.svg"}) {
    INFO(plot);
    const auto x = squall::test::check_xml(slurp(out + "/" + plot));
    INFO(x.error);
    REQUIRE(x.ok);
    const PlotLayout l = plot_layout(x);
    REQUIRE(l.has_plot);
    REQUIRE(l.has_legend);
    INFO("plot " << l.plot.x << "," << l.plot.y << " " << l.plot.w << "x" << l.plot.h << "; legend " << l.legend.x
                 << "," << l.legend.y << " " << l.legend.w << "x" << l.legend.h << "; document " << l.width << "x"
                 << l.height);
    CHECK_FALSE(l.legend.overlaps(l.plot));
    CHECK(l.legend.y >= l.plot.y + l.plot.h);  // below it, past the axis labels
    // Within the document, and the plot area as wide and high as an 800 x 600 plot leaves it.
    CHECK(l.legend.x + l.legend.w <= l.width);
    CHECK(l.legend.y + l.legend.h <= l.height);
    CHECK(l.plot.w == Approx(700));
    CHECK(l.plot.h == Approx(490));
    // Every polyline's points lie in the plot area (the legend's samples are lines, not polylines).
    for (const Polyline& p : polylines(slurp(out + "/" + plot)))
      for (const auto& [px, py] : p.points) {
        CHECK(py <= l.plot.y + l.plot.h + 1e-6);
        CHECK(py >= l.plot.y - 1e-6);
      }
  }
}

TEST_CASE("report measures efficiency only across sizes: blank when every run has one size", "[launch][report]") {
  TempDir tmp("squall-launch-report-efficiency");
  plain_run(tmp.file("a-np1"), 1, 100.0);
  plain_run(tmp.file("b-np1"), 1, 314.0);  // another run of 1 rank, 3.14 times as fast
  const std::string out = tmp.file("report");
  auto md = report(tmp.file("a-np1") + " " + tmp.file("b-np1") + " --out " + out);
  INFO(md.out << md.err);
  REQUIRE(md.exit_code == 0);
  std::vector<std::string> rows;
  {
    std::istringstream lines(md.out);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("| a-np1", 0) == 0 || line.rfind("| b-np1", 0) == 0) rows.push_back(line);
  }
  REQUIRE(rows.size() == 2);
  // run, nodes, ranks, GPUs, learners, global batch, samples/s, efficiency: the 9th cell.
  auto cell = [](const std::string& row, int k) {
    std::vector<std::string> cells;
    std::istringstream in(row);
    for (std::string c; std::getline(in, c, '|');) cells.push_back(c);
    return k < static_cast<int>(cells.size()) ? cells[static_cast<size_t>(k)] : std::string("?");
  };
  CHECK(cell(rows[0], 8) == " - ");
  CHECK(cell(rows[1], 8) == " - ");
  CHECK_THAT(md.out, Catch::Contains("Efficiency: blank (-): every run measured on 1 rank,"));
  auto j = report(tmp.file("a-np1") + " " + tmp.file("b-np1") + " --out " + out + " --json");
  REQUIRE(j.exit_code == 0);
  json table = json::parse(j.out);
  REQUIRE(table.size() == 2);
  CHECK(table[0].at("efficiency").is_null());
  CHECK(table[1].at("efficiency").is_null());
  // No efficiency point, and no ideal line, in the plot.
  for (const Polyline& p : polylines(slurp(out + "/efficiency.svg"))) CHECK(p.points.empty());

  // With a run of 2 ranks: both runs of 1 rank are the reference (1.00, their mean per rank
  // 207 samples/s), and the run of 2 ranks is measured against it: 190 / 207.
  plain_run(tmp.file("np2"), 2, 380.0);
  j = report(tmp.file("a-np1") + " " + tmp.file("b-np1") + " " + tmp.file("np2") + " --out " + out + " --json");
  INFO(j.out << j.err);
  REQUIRE(j.exit_code == 0);
  table = json::parse(j.out);
  REQUIRE(table.size() == 3);
  CHECK(table[0].at("efficiency").get<double>() == 1.0);
  CHECK(table[1].at("efficiency").get<double>() == 1.0);
  CHECK(table[2].at("run") == "np2");
  CHECK(table[2].at("efficiency").get<double>() == Approx(190.0 / 207.0));
  md = report(tmp.file("a-np1") + " " + tmp.file("b-np1") + " " + tmp.file("np2") + " --out " + out);
  CHECK_THAT(md.out, Catch::Contains("of the smallest size's runs, their mean: a-np1, b-np1 with 1 rank)"));
}

TEST_CASE("report plots the learning rate of each step, one line per run", "[launch][report]") {
  TempDir tmp("squall-launch-report-lr");
  warmup_run(tmp.file("warm-np1"), 1, 100.0);
  plain_run(tmp.file("flat-np2"), 2, 190.0);  // lr 0.1 throughout
  const std::string out = tmp.file("report");
  const auto r = report(tmp.file("warm-np1") + " " + tmp.file("flat-np2") + " --out " + out);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(fs::exists(out + "/lr.svg"));
  const std::string svg = slurp(out + "/lr.svg");
  CHECK_THAT(svg, Catch::Contains("<title>Learning rate</title>"));
  const auto lines = polylines(svg);
  REQUIRE(lines.size() == 2);
  const Polyline* warm = find_line(lines, "warm-np1");
  const Polyline* flat = find_line(lines, "flat-np2");
  REQUIRE(warm != nullptr);
  REQUIRE(flat != nullptr);
  REQUIRE(warm->points.size() == 4);
  REQUIRE(flat->points.size() == 4);
  // Steps 10..40 along x; the warm-up rises (SVG's y grows downwards), 0.01 at step 10 to 0.04
  // at step 40, and the flat rate stays at one height above all of it (0.1).
  for (size_t i = 1; i < 4; ++i) {
    CHECK(warm->points[i].first > warm->points[i - 1].first);
    CHECK(warm->points[i].second < warm->points[i - 1].second);
    CHECK(flat->points[i].second == flat->points[0].second);
    CHECK(warm->points[i].first == flat->points[i].first);
  }
  CHECK(flat->points[0].second < warm->points[3].second);
  // Equal steps in lr are equal steps in pixels: the axis is linear.
  const double d1 = warm->points[1].second - warm->points[0].second, d3 = warm->points[3].second - warm->points[2].second;
  CHECK(d1 == Approx(d3).margin(0.02));

  // Records without lr (an earlier squall's): no lr.svg, and an earlier report's is removed.
  for (const char* dir : {"warm-np1", "flat-np2"}) {
    std::vector<json> recs;
    for (int64_t step : {10, 20, 30, 40}) {
      json t = with_clock(train_record(step), 1, step * 0.3);
      t.erase("lr");
      recs.push_back(t);
    }
    write_run(tmp.file(dir), recs, squall::test::read_json(tmp.file(dir) + "/summary.json"));
  }
  const auto again = report(tmp.file("warm-np1") + " " + tmp.file("flat-np2") + " --out " + out);
  INFO(again.out << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK_FALSE(fs::exists(out + "/lr.svg"));
}
