// `squall report`: three small SMA runs on 1, 2 and 4 ranks summarised into a table (Markdown
// and JSON), four SVG plots that are well-formed XML, an incomplete run listed as such, and a
// dir that is not a run dir refused with exit 2. With chromium installed, each plot is also
// rendered headless and the screenshot must not be blank.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
const char* const k_plots[] = {"throughput.svg", "efficiency.svg", "loss.svg", "accuracy.svg"};

bool have_data() { return fs::exists(k_fashion_mnist + "/t10k-images-idx3-ubyte.gz"); }

// A tiny SMA run on `ranks` ranks into `dir`.
void train(const std::string& dir, int ranks) {
  const auto r = run_command((ranks > 1 ? mpiexec(ranks) + " " : std::string()) + squall_bin() + " train --config " +
                             k_sma + " --set run.dir=" + dir +
                             " --set train.max_steps=30 --set data.train_samples=4096 --set data.test_samples=256" +
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
