// `squall model` (the performance model, docs/model.md) as a user runs it: a forecast for
// Summit in JSON, and bad input that exits 2 naming the value.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

using nlohmann::json;
using squall::test::run_command;
using squall::test::squall_bin;

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
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const auto r = run_command(squall_bin() + " model " + c.args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.named));
    CHECK(r.out.empty());
  }
}
