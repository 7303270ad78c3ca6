// `squall model` (the performance model, docs/model.md) as a user runs it: a forecast for
// Summit in JSON, every zoo model with its knobs, calibration from real tiny runs of each zoo
// model (their model, knobs and input read from the run dir) and from a split run
// (parallel.spatial), and bad input that exits 2 naming the value or the flag.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/json_files.hpp"
#include "tests/support/must_run.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::must_run;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
using squall::test::read_json;
using squall::test::read_records;
namespace fs = std::filesystem;

namespace {

const std::string k_fashion_mnist = "/usr/share/datasets/fashion-mnist";
const std::string k_configs = std::string(SQUALL_SOURCE_DIR) + "/configs/";

json model_json(const std::string& args) {
  const auto r = run_command(squall_bin() + " model " + args + " --json");
  INFO(args << "\n" << r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

// Labelled climate fields of 16 x h x w in tmp/name (squall data climate + squall data label).
std::string climate_data(const TempDir& tmp, const std::string& name, int samples, int h, int w, int seed) {
  const std::string raw = tmp.file(name + "-raw"), out = tmp.file(name);
  must_run(squall_bin() + " data climate --out " + raw + " --samples " + std::to_string(samples) + " --height " +
           std::to_string(h) + " --width " + std::to_string(w) + " --seed " + std::to_string(seed));
  must_run(squall_bin() + " data label --in " + raw + " --out " + out);
  return out;
}

// The calibration of a run dir against its summary.json: the same model and parameters, and
// the run's own shape predicted at its measured rate.
json check_calibration(const std::string& dir, const std::string& model, const json& knobs) {
  const json doc = model_json("--calibrate " + dir + " --nodes 1,2");
  const json summary = read_json(dir + "/summary.json");
  const json& cal = doc.at("calibration");
  INFO(doc.dump(1));
  CHECK(doc.at("model") == model);
  CHECK(doc.at("knobs") == knobs);
  CHECK(doc.at("parameters") == summary.at("parameters"));
  CHECK(cal.at("model") == model);
  CHECK(cal.at("knobs") == knobs);
  CHECK(cal.at("parameters") == summary.at("parameters"));
  CHECK_THAT(cal.at("model_from").get<std::string>(), Catch::EndsWith("config.toml"));
  CHECK(cal.at("predicted_samples_per_s").get<double>() ==
        Approx(summary.at("samples_per_s").get<double>()).epsilon(1e-9));
  CHECK(doc.at("machine").at("name") == "local");
  return doc;
}

}  // namespace

TEST_CASE("model: resnet20 on Summit at 1 to 4608 nodes in JSON", "[launch][model]") {
  const auto r = run_command(squall_bin() + " model --machine summit --nodes 1,16,256,4608 --model resnet20 --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc.at("model") == "resnet20");
  CHECK(doc.at("parameters").get<int64_t>() > 0);
  CHECK(doc.at("forward_gflop_per_sample").get<double>() > 0);
  CHECK(doc.at("machine").at("gpus_per_node") == 6);
  const auto& rows = doc.at("rows");
  REQUIRE(rows.size() == 4);
  const int nodes[] = {1, 16, 256, 4608};
  for (size_t i = 0; i < 4; ++i) {
    INFO(i);
    CHECK(rows[i].at("nodes") == nodes[i]);
    CHECK(rows[i].at("gpus") == nodes[i] * 6);
    const double eff = rows[i].at("efficiency").get<double>();
    CHECK(eff > 0);
    CHECK(eff <= 1.0 + 1e-12);
    for (const char* key : {"learners", "global_batch", "compute_ms", "allreduce_flat_ms", "allreduce_hier_ms",
                            "exposed_ms", "step_ms", "samples_per_s"})
      CHECK(rows[i].contains(key));
  }
  CHECK(rows[0].at("efficiency").get<double>() == Approx(1.0));
}

TEST_CASE("model: without --model it forecasts DeepCAM's network, the issue's command", "[launch][model]") {
  const auto r = run_command(squall_bin() + " model --machine summit --nodes 1,16,256,4608 --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc.at("model") == "deeplabv3plus-resnet50");
  CHECK(doc.at("parameters") == 40388067);
  REQUIRE(doc.at("rows").size() == 4);
  // Efficiency falls with the node count and stays in (0, 1].
  double last = 1.0 + 1e-12;
  for (const auto& row : doc.at("rows")) {
    const double eff = row.at("efficiency").get<double>();
    CHECK(eff > 0);
    CHECK(eff <= last);
    last = eff;
  }
}

TEST_CASE("model: the text table has a row per node count", "[launch][model]") {
  const auto r = run_command(squall_bin() + " model --model lenet5 --machine frontier --nodes 1,2");
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("parameters 61706"));
  CHECK_THAT(r.out, Catch::Contains("efficiency"));
}

TEST_CASE("model: bad input exits 2 naming the value", "[launch][model]") {
  struct Case {
    const char* args;
    const char* named;
  };
  const Case cases[] = {
      {"--model resnet20 --machine bluegene", "bluegene"},
      {"--model alexnet --machine summit", "alexnet"},
      {"--model resnet20 --machine summit --nodes 1,0", "0"},
      {"--model resnet20 --machine summit --nodes 99999", "99999"},
      {"--model resnet20 --machine local", "calibrate"},
      {"--model resnet20 --input 1,28", "1,28"},
      {"--model resnet20 --algorithm bsp", "bsp"},
      {"--machine summit --learners 0", "--learners"},
      {"--machine summit --batch -3", "--batch"},
      {"--model alexnet", "--model"},
      {"--model lenet5 --width 8", "--width"},
      {"--model deeplabv3plus-resnet50 --depth 2", "--depth"},
      {"--model unet --aspp-rates 1,2", "--aspp-rates"},
      {"--model resnet20 --width 0", "--width"},
      {"--model deeplabv3plus --aspp-rates 6,x", "--aspp-rates"},
      {"--model unet --depth 9 --input 16,96,144", "depth 9"},
      {"--model lenet5 --input 1,32,32", "28x28"},
      {"--calibrate /no/such/run", "/no/such/run"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const auto r = run_command(squall_bin() + " model " + c.args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.named));
    CHECK(r.out.empty());
  }
}

TEST_CASE("model: every zoo model takes the knobs it has, and its parameters follow them", "[launch][model]") {
  // The climate U-Net of configs/climate-tiny.toml at DeepCAM's size, against its defaults.
  const json unet = model_json("--model unet --width 16 --depth 4 --machine summit --nodes 1");
  CHECK(unet.at("knobs") == json{{"width", 16}, {"depth", 4}});
  CHECK(unet.at("input") == json{16, 768, 1152});
  CHECK(unet.at("classes") == 3);
  const json plain = model_json("--model unet --machine summit --nodes 1");
  CHECK(plain.at("knobs") == json{{"width", 16}, {"depth", 3}});
  CHECK(unet.at("parameters").get<int64_t>() > plain.at("parameters").get<int64_t>());
  const json r20 = model_json("--model resnet20 --width 32 --depth 5 --machine summit --nodes 1");
  CHECK(r20.at("knobs") == json{{"width", 32}, {"depth", 5}});
  CHECK(r20.at("parameters").get<int64_t>() > 272186);
  const json dl = model_json("--model deeplabv3plus --width 8 --depth 3 --aspp-rates 2,4 --input 4,64,96 "
                             "--classes 5 --machine summit --nodes 1");
  CHECK(dl.at("knobs") == json{{"width", 8}, {"depth", 3}, {"aspp_rates", {2, 4}}});
  CHECK(dl.at("classes") == 5);
  const json r50 = model_json("--model deeplabv3plus-resnet50 --aspp-rates 12,24,36 --machine summit --nodes 1");
  CHECK(r50.at("knobs") == json{{"aspp_rates", {12, 24, 36}}});
  CHECK(r50.at("parameters") == 40388067);  // the rates change dilations, not sizes
  const json lenet = model_json("--model lenet5 --machine summit --nodes 1");
  CHECK(lenet.at("knobs") == json::object());
  CHECK(lenet.at("parameters") == 61706);
}

TEST_CASE("model: --calibrate reads a tiny climate U-Net run's model, knobs and input from its run dir",
          "[launch][model][climate]") {
  TempDir tmp("squall-launch-model-climate");
  const std::string train = climate_data(tmp, "train", 8, 16, 24, 3);
  const std::string run = tmp.file("run");
  // configs/climate-tiny.toml (unet, width 16, depth 4) made smaller still: a few seconds.
  must_run(squall_bin() + " train --config " + k_configs + "climate-tiny.toml --set data.train=" + train +
           " --set data.test=" + train + " --set run.dir=" + run +
           " --set train.max_steps=4 --set train.batch_size=4 --set model.width=8 --set model.depth=2" +
           " --set schedule.warmup_steps=0");
  const json knobs{{"width", 8}, {"depth", 2}};
  {
    const json doc = check_calibration(run, "unet", knobs);
    const json& cal = doc.at("calibration");
    CHECK(cal.at("input") == json{16, 16, 24});
    CHECK(cal.at("classes") == 3);
    // summary.json records the input and classes.
    CHECK_THAT(cal.at("input_from").get<std::string>(), Catch::EndsWith("summary.json"));
    CHECK(doc.at("input") == json{16, 16, 24});  // the forecast: the run's model on its input
    CHECK(doc.at("batch_per_learner") == 4);
    CHECK(cal.at("steps") == 4);
  }
  {
    // A run dir written before summary.json had them: the newest checkpoint says.
    json s;
    std::ifstream(run + "/summary.json") >> s;
    s.erase("input");
    s.erase("classes");
    std::ofstream(run + "/summary.json") << s.dump(2);
    const json doc = check_calibration(run, "unet", knobs);
    const json& cal = doc.at("calibration");
    CHECK(cal.at("input") == json{16, 16, 24});
    CHECK_THAT(cal.at("input_from").get<std::string>(), Catch::StartsWith("checkpoint ") &&
                                                             Catch::Contains("step-00000004"));
  }
  // The text names the run's model and where its shape came from.
  const auto text = run_command(squall_bin() + " model --calibrate " + run + " --nodes 1");
  INFO(text.err);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("the run's unet (width 8, depth 2) at input 16x16x24, 3 classes"));
  // Forecast the same U-Net at DeepCAM's size on the machine this run calibrated.
  const json big = model_json("--calibrate " + run + " --input 16,768,1152 --nodes 1");
  CHECK(big.at("input") == json{16, 768, 1152});
  CHECK(big.at("knobs") == knobs);
  CHECK(big.at("calibration").at("input") == json{16, 16, 24});
  CHECK(big.at("rows")[0].at("compute_ms").get<double>() > big.at("calibration").at("measured_step_ms").get<double>());
  // Another model on the same machine.
  CHECK(model_json("--calibrate " + run + " --model resnet20 --nodes 1").at("model") == "resnet20");

  // Without its checkpoints the run's input comes from its data (data.train of its config.toml).
  fs::remove_all(run + "/checkpoints");
  CHECK_THAT(check_calibration(run, "unet", knobs).at("calibration").at("input_from").get<std::string>(),
             Catch::Equals("data.train " + train));
  // Without its data too, the input must be given; a wrong one is refused by the parameter count.
  fs::rename(train, tmp.file("moved"));
  auto r = run_command(squall_bin() + " model --calibrate " + run);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--input") && Catch::Contains("--classes") && Catch::Contains(train));
  CHECK(model_json("--calibrate " + run + " --input 16,16,24 --classes 3 --nodes 1").at("calibration").at(
            "input_from") == "--input");
  r = run_command(squall_bin() + " model --calibrate " + run + " --input 16,16,24 --classes 4");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("parameters") && Catch::Contains("summary.json"));
}

TEST_CASE("model: --calibrate reads runs of the other segmentation models", "[launch][model][climate]") {
  TempDir tmp("squall-launch-model-deeplab");
  const std::string climate = climate_data(tmp, "climate", 4, 16, 32, 5);
  {  // deeplabv3plus with its width, depth and ASPP rates
    const std::string run = tmp.file("deeplab");
    must_run(squall_bin() + " train --config " + k_configs + "climate-tiny.toml --set data.train=" + climate +
             " --set data.test=" + climate + " --set run.dir=" + run + " --set train.max_steps=2" +
             " --set train.batch_size=2 --set model.name=deeplabv3plus --set model.width=4 --set model.depth=2" +
             " --set model.aspp_rates=[1,2] --set schedule.warmup_steps=0");
    check_calibration(run, "deeplabv3plus", json{{"width", 4}, {"depth", 2}, {"aspp_rates", {1, 2}}});
  }
  {  // deeplabv3plus-resnet50: training it takes too long here (18 s a step at 16 x 16 x 32), so
     // its run dir as squall train leaves it without a checkpoint: config.toml and summary.json.
    const std::string run = tmp.file("r50");
    fs::create_directories(run);
    std::ofstream(run + "/config.toml") << "[data]\ntrain = \"" << climate << "\"\ntest = \"" << climate
                                        << "\"\n[model]\nname = \"deeplabv3plus-resnet50\"\naspp_rates = [1, 2]\n";
    const json shape = model_json("--model deeplabv3plus-resnet50 --aspp-rates 1,2 --input 16,16,32 --classes 3 "
                                  "--machine summit --nodes 1");
    const json summary{{"model", "deeplabv3plus-resnet50"}, {"world_size", 1}, {"global_batch", 1},
                       {"batch_per_learner", 1}, {"parameters", shape.at("parameters")}, {"samples_per_s", 0.1},
                       {"steps", 2}, {"train_loop_s", 20.0},
                       {"time_breakdown_s", {{"compute", 19.0}, {"allreduce", 0.0}, {"io_wait", 0.1}}}};
    std::ofstream(run + "/summary.json") << summary.dump();
    const json doc = check_calibration(run, "deeplabv3plus-resnet50", json{{"aspp_rates", {1, 2}}});
    CHECK(doc.at("calibration").at("input") == json{16, 16, 32});
    CHECK(doc.at("calibration").at("input_from") == "data.train " + climate);
  }
}

TEST_CASE("model: --calibrate reads tiny runs of lenet5 and resnet20", "[launch][model]") {
  if (!fs::exists(k_fashion_mnist + "/t10k-images-idx3-ubyte.gz"))
    SQUALL_SKIP(k_fashion_mnist << " missing (install dataset-fashion-mnist)");
  TempDir tmp("squall-launch-model-fashion");
  {
    const std::string run = tmp.file("lenet5");
    must_run(squall_bin() + " train --config " + k_configs + "fashion-mnist-lenet5.toml --set run.dir=" + run +
             " --set train.max_steps=3 --set data.train_samples=512 --set data.test_samples=64" +
             " --set schedule.warmup_steps=0");
    CHECK(check_calibration(run, "lenet5", json::object()).at("calibration").at("input") == json{1, 28, 28});
  }
  {  // resnet20 with its width and depth
    const std::string run = tmp.file("resnet20");
    must_run(squall_bin() + " train --config " + k_configs + "fashion-mnist-resnet20.toml --set run.dir=" + run +
             " --set train.max_steps=3 --set data.train_samples=512 --set data.test_samples=64" +
             " --set train.batch_size=16 --set model.width=4 --set model.depth=1 --set schedule.warmup_steps=0");
    check_calibration(run, "resnet20", json{{"width", 4}, {"depth", 1}});
  }
}

namespace {

// The cells of a Markdown table row, trimmed ("| a | b |" -> {"a", "b"}).
std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '|') {
      const size_t first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

// The number a cell starts with after an optional sign or "×" ("+3.2" -> 3.2, "×8.47" -> 8.47),
// and the digits after its decimal point (its printed precision).
double cell_number(std::string text, int& decimals) {
  const std::string times = "\xC3\x97";  // U+00D7, the multiplication sign
  if (text.rfind(times, 0) == 0) text = text.substr(times.size());
  size_t used = 0;
  const double v = std::stod(text, &used);
  const std::string digits = text.substr(0, used);
  const size_t dot = digits.find('.');
  decimals = dot == std::string::npos ? 0 : static_cast<int>(digits.size() - dot - 1);
  return v;
}

}  // namespace

TEST_CASE("model: the model against published runs, as docs/model.md prints it", "[launch][model]") {
  // Each row of the table: run its command, and check its forecast and difference to the
  // precision the doc prints them with. Fewer than five rows, or a column missing, fails.
  std::ifstream doc(std::string(SQUALL_SOURCE_DIR) + "/docs/model.md");
  REQUIRE(doc);
  std::string line;
  bool in_section = false;
  std::vector<std::string> header;
  int rows = 0;
  while (std::getline(doc, line)) {
    if (line.rfind("## ", 0) == 0) {
      in_section = line == "## The model against published runs";
      continue;
    }
    if (!in_section || line.rfind("|", 0) != 0) continue;
    const auto cells = table_cells(line);
    if (header.empty()) {
      header = cells;
      continue;
    }
    if (line.rfind("|---", 0) == 0) continue;
    auto column = [&](const std::string& name) -> const std::string& {
      const auto it = std::find(header.begin(), header.end(), name);
      REQUIRE(it != header.end());
      REQUIRE(cells.size() == header.size());
      return cells[static_cast<size_t>(it - header.begin())];
    };
    std::string command = column("command");
    INFO(line);
    REQUIRE(command.size() > 2);
    REQUIRE(command.front() == '`');
    command = command.substr(1, command.size() - 2);
    const std::string prefix = "squall model ";
    REQUIRE(command.rfind(prefix, 0) == 0);
    const json out = model_json(command.substr(prefix.size()));
    const json& last = out.at("rows").back();
    const std::string metric = column("metric");
    double forecast = 0;
    if (metric == "efficiency %") {
      forecast = last.at("efficiency").get<double>() * 100;
    } else {
      REQUIRE(metric == "samples/s/GPU");
      forecast = last.at("samples_per_s").get<double>() / last.at("gpus").get<double>();
    }
    int decimals = 0, published_decimals = 0, difference_decimals = 0;
    const double printed = cell_number(column("forecast"), decimals);
    const double published = cell_number(column("published"), published_decimals);
    const double difference = cell_number(column("difference"), difference_decimals);
    CHECK(std::abs(forecast - printed) <= 0.5 * std::pow(10.0, -decimals) + 1e-9);
    // The difference: points for efficiencies, a ratio for rates, from the printed figures.
    const double expected = metric == "efficiency %" ? printed - published : printed / published;
    CHECK(std::abs(expected - difference) <= 0.5 * std::pow(10.0, -difference_decimals) + 1e-9);
    ++rows;
  }
  CHECK(rows >= 5);
}

TEST_CASE("model: --jitter, --cross-node and --params/--flops reach the forecast", "[launch][model]") {
  const std::string base = "--model deeplabv3plus-resnet50 --machine summit --batch 2 --nodes 1,256";
  const json plain = model_json(base);
  CHECK(plain.at("jitter") == 0.02);
  CHECK(plain.at("cross_node") == "auto");
  const json& row = plain.at("rows").back();
  CHECK(row.at("straggler_ms").get<double>() > 0);
  CHECK(row.at("cross_node") == "halving-doubling");
  CHECK(plain.at("rows").front().at("cross_node") == "ring");  // one node: no cross-node stage
  // No jitter: no wait, a higher efficiency; a forced ring: a slower allreduce.
  const json calm = model_json(base + " --jitter 0");
  CHECK(calm.at("rows").back().at("straggler_ms") == 0.0);
  CHECK(calm.at("rows").back().at("efficiency").get<double>() > row.at("efficiency").get<double>());
  const json ring = model_json(base + " --cross-node ring");
  CHECK(ring.at("rows").back().at("cross_node") == "ring");
  CHECK(ring.at("rows").back().at("allreduce_hier_ms").get<double>() > row.at("allreduce_hier_ms").get<double>());
  // A model by its counts: as given, not built.
  const json given = model_json("--model resnet-101 --params 44549160 --flops 15.6e9 --machine horovod-p100 --nodes 1,2");
  CHECK(given.at("model") == "resnet-101");
  CHECK(given.at("model_from") == "--params/--flops");
  CHECK(given.at("parameters") == 44549160);
  CHECK(given.at("forward_gflop_per_sample").get<double>() == Approx(15.6));
  // The text table has the new columns.
  const auto r = run_command(squall_bin() + " model " + base);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("straggler_ms") && Catch::Contains("cross") && Catch::Contains(" hd "));
}

TEST_CASE("model: bad --jitter, --cross-node, --params and --flops exit 2 naming the flag", "[launch][model]") {
  const std::pair<const char*, const char*> cases[] = {
      {"--jitter 1.5", "--jitter"},
      {"--jitter -0.1", "--jitter"},
      {"--cross-node tree", "tree"},
      {"--params 1000", "--flops"},
      {"--flops 1e9", "--params"},
      {"--params 0 --flops 1e9", "--params"},
      {"--params 1000 --flops 0", "--flops"},
      {"--params 1000 --flops 1e9 --width 8", "--width"},
  };
  for (const auto& [args, named] : cases) {
    INFO(args);
    const auto r = run_command(squall_bin() + " model --machine summit --nodes 1,2 " + args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(named));
    CHECK(r.out.empty());
  }
}

TEST_CASE("squall model --spatial forecasts a split sample: fewer learners, a tile's compute, the halos",
          "[launch][model][spatial]") {
  const std::string unet = "--model unet --width 16 --depth 4 --input 16,768,1152 --classes 3 --batch 1 "
                           "--machine summit --nodes 1,16";
  const json whole = model_json(unet);
  const json split = model_json(unet + " --spatial 2,1");
  CHECK(split.at("spatial") == json::array({2, 1}));
  CHECK(split.at("halo_bytes_per_sample").get<double>() > 0);
  CHECK(whole.at("halo_bytes_per_sample").get<double>() == 0);
  for (size_t i = 0; i < 2; ++i) {
    const json& w = whole.at("rows").at(i);
    const json& s = split.at("rows").at(i);
    CHECK(s.at("learners").get<int>() * 2 == w.at("learners").get<int>());
    CHECK(s.at("compute_ms").get<double>() == Approx(w.at("compute_ms").get<double>() / 2));
    CHECK(s.at("halo_ms").get<double>() > 0);
    CHECK(s.at("halo_exposed_ms").get<double>() <= s.at("halo_ms").get<double>());
    CHECK(w.at("halo_ms").get<double>() == 0);
  }
  const auto text = run_command(squall_bin() + " model " + unet + " --spatial 2,1");
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("parallel.spatial [2, 1]") && Catch::Contains("halo_ms"));
  // Groups of 4 GPUs do not divide Summit's 6 per node; the ResNet-50 DeepLabv3+'s padded max
  // pooling cannot split; the DeepLabv3+ of the zoo can.
  const auto four = run_command(squall_bin() + " model " + unet + " --spatial 4,1");
  CHECK(four.exit_code == 2);
  CHECK_THAT(four.err, Catch::Contains("--spatial") && Catch::Contains("6 GPUs per node"));
  const auto resnet = run_command(squall_bin() + " model --model deeplabv3plus-resnet50 --machine summit --spatial 2,1");
  CHECK(resnet.exit_code == 2);
  CHECK_THAT(resnet.err, Catch::Contains("--spatial") && Catch::Contains("stem.pool"));
  const json deeplab = model_json("--model deeplabv3plus --machine summit --nodes 1 --spatial 2,1");
  CHECK(deeplab.at("halo_bytes_per_sample").get<double>() > 0);
}

TEST_CASE("squall model --calibrate of a split run: a group is one learner, a rank computes its tile's share",
          "[launch][model][spatial]") {
  TempDir tmp("squall-launch-model-split");
  const std::string train = climate_data(tmp, "train", 8, 32, 48, 5);
  const std::string run = tmp.file("run");
  // 2 ranks, one group of [2, 1]: a learner of batch 2 whose samples each rank computes half of.
  must_run(mpiexec(2) + " " + squall_bin() + " train --config " + k_configs + "climate-tiny.toml --set data.train=" +
           train + " --set data.test=" + train + " --set run.dir=" + run +
           " --set train.max_steps=4 --set train.batch_size=2 --set model.width=8 --set model.depth=2" +
           " --set schedule.warmup_steps=0 --set run.threads=1 --set parallel.spatial=[2,1]");
  const json summary = read_json(run + "/summary.json");
  REQUIRE(summary.at("parallel").at("spatial").at("rows") == 2);
  const json doc = check_calibration(run, "unet", json{{"width", 8}, {"depth", 2}});
  INFO(doc.dump(1));
  const json& cal = doc.at("calibration");
  CHECK(cal.at("spatial") == json::array({2, 1}));
  CHECK(cal.at("batch_per_learner") == 2);  // the group's batch, not global batch / ranks
  // The forecast keeps the run's split and shape: one learner of 2 samples on 2 ranks.
  CHECK(doc.at("spatial") == json::array({2, 1}));
  CHECK(doc.at("batch_per_learner") == 2);
  const json& row = doc.at("rows").at(0);
  CHECK(row.at("learners") == 1);
  CHECK(row.at("global_batch") == summary.at("global_batch"));
  CHECK(doc.at("halo_bytes_per_sample").get<double>() > 0);
  // The rate of a rank: its tile's share (2 samples / 2 ranks) over the compute it did not wait
  // for halos. (Less the group's gradient sum too, which the model times at the run's allreduce
  // bandwidth: a job of one group has no allreduce to measure one, so next to nothing; 1e-4.)
  const double steps = summary.at("steps").get<double>();
  const double tile_s = (summary.at("time_breakdown_s").at("compute").get<double>() -
                         summary.at("parallel").at("spatial").at("halo").at("exposed_s").get<double>()) / steps;
  CHECK(cal.at("sustained_gflops_per_rank").get<double>() ==
        Approx(doc.at("train_gflop_per_sample").get<double>() * 2 / 2 / tile_s).epsilon(1e-4));
  CHECK(row.at("compute_ms").get<double>() == Approx(tile_s * 1e3).epsilon(1e-4));
  // Its halo wait: what the run measured, and the step reproduced with it.
  CHECK(cal.at("predicted_halo_exposed_ms").get<double>() <= cal.at("measured_halo_exposed_ms").get<double>() + 1e-9);
  // Whole samples on the same machine: 2 learners, each rank a whole sample's compute.
  const json whole = model_json("--calibrate " + run + " --spatial 1,1 --nodes 1");
  CHECK(whole.at("rows").at(0).at("learners") == 2);
  CHECK(whole.at("rows").at(0).at("compute_ms").get<double>() == Approx(2 * tile_s * 1e3).epsilon(1e-4));
  CHECK(whole.at("rows").at(0).at("halo_ms").get<double>() == 0);
  // The memory of a rank of the split: its tile's rows, activations less than a whole sample's,
  // halo buffers besides. (At 32 x 48 the total is not less: each convolution plan and edge
  // strip costs its fixed workspace, which a field this small does not outweigh.)
  const json& mine = doc.at("memory_per_gpu");
  const json& full = whole.at("memory_per_gpu");
  CHECK(mine.at("tile") == json::array({16, 48}));
  CHECK(full.at("tile") == json::array({32, 48}));
  CHECK(mine.at("parts").at("activations").get<double>() < full.at("parts").at("activations").get<double>());
  CHECK(mine.at("parts").at("halos").get<double>() > 0);
  CHECK(full.at("parts").at("halos").get<double>() == 0);
  // The text says the run's split.
  const auto text = run_command(squall_bin() + " model --calibrate " + run + " --nodes 1");
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("on 2 rank(s), parallel.spatial [2, 1]: measured") &&
                           Catch::Contains("memory per rank"));
}
