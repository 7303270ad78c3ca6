// The performance model (src/perf/perf_model.hpp, docs/model.md): parameter counts and
// FLOPs against the built graphs (every zoo model, with and without its knobs) and hand counts,
// the allreduce formulas against hand computations, the shape of the forecast, and calibration
// from a run's summary.json and from a run dir (model, knobs and input from its own files).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/checkpoint/checkpoint_file.hpp"
#include "src/core/error.hpp"
#include "src/nn/graph.hpp"
#include "src/nn/layer.hpp"
#include "src/perf/perf_model.hpp"
#include "src/perf/perf_run.hpp"
#include "src/config/config.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_backend.hpp"

using namespace squall;
using namespace squall::perf;
using nlohmann::json;

TEST_CASE("perf model: parameter counts equal the built graph's for every zoo model", "[perf_model]") {
  auto backend = test::make_test_backend();
  for (const auto& name : nn::model_names()) {
    // A small input: parameters do not depend on the image size (segmentation models need a
    // size their encoder can divide).
    const bool small = name == "lenet5" || name == "resnet20";
    const int64_t c = small ? 1 : 16, h = small ? 28 : 64, w = small ? 28 : 96, classes = small ? 10 : 3;
    INFO(name);
    const ModelCost cost = model_cost(name, c, h, w, classes);
    nn::ModelSpec spec;
    spec.name = name;
    spec.classes = classes;
    auto g = nn::make_model(spec, nn::Shape(1, c, h, w));
    g->build(*backend, 1, 1);
    CHECK(cost.parameters == static_cast<int64_t>(g->parameter_count()));
    CHECK(cost.forward_flops > 0);
  }
  CHECK(model_cost("lenet5", 1, 28, 28, 10).parameters == 61706);
  CHECK(model_cost("deeplabv3plus-resnet50", 16, 768, 1152, 3).parameters == 40388067);
  const ModelCost r20 = model_cost("resnet20", 3, 32, 32, 10);
  CHECK(r20.parameters > 260000);
  CHECK(r20.parameters < 280000);
  // ResNet-20 on CIFAR: about 41 M multiply-adds in its convolutions and classifier (82 M
  // FLOPs), plus a few M for batch norm, ReLU and the residual additions.
  CHECK(r20.forward_flops > 80e6);
  CHECK(r20.forward_flops < 92e6);
  // Fashion-MNIST's 28x28 single channel: less.
  CHECK(model_cost("resnet20", 1, 28, 28, 10).forward_flops < r20.forward_flops);
}

TEST_CASE("perf model: every zoo model's knobs change the graph it counts, and only the knobs it takes",
          "[perf_model]") {
  auto backend = test::make_test_backend();
  for (const auto& name : nn::model_names()) {
    INFO(name);
    const nn::ModelKnobs knobs = nn::model_knobs(name);
    const bool small = name == "lenet5" || name == "resnet20";
    const int64_t c = small ? 1 : 4, h = small ? 28 : 32, w = small ? 28 : 48, classes = small ? 10 : 3;
    nn::ModelSpec spec;
    spec.name = name;
    spec.classes = classes;
    if (knobs.width) spec.width = 4;
    if (knobs.depth) spec.depth = 2;
    if (knobs.aspp_rates) spec.aspp_rates = {1, 2};
    const ModelCost cost = model_cost(spec, c, h, w);
    auto g = nn::make_model(spec, nn::Shape(1, c, h, w));
    g->build(*backend, 1, 1);
    CHECK(cost.parameters == static_cast<int64_t>(g->parameter_count()));
    // The knobs as built, and the zoo's defaults for none: another graph.
    CHECK(cost.spec.width == spec.width);
    CHECK(cost.spec.depth == spec.depth);
    CHECK(cost.spec.aspp_rates == spec.aspp_rates);
    const ModelCost plain = model_cost(name, c, h, w, classes);
    CHECK(plain.spec.width == knobs.default_width);
    CHECK(plain.spec.depth == knobs.default_depth);
    CHECK(plain.spec.aspp_rates == knobs.default_aspp_rates);
    if (knobs.width || knobs.depth) CHECK(plain.parameters != cost.parameters);
    if (knobs.aspp_rates && !knobs.width) CHECK(plain.forward_flops != cost.forward_flops);
    if (name == "lenet5") CHECK(knobs_text(cost.spec).empty());
  }
  CHECK(knobs_text(model_cost("unet", 16, 16, 24, 3).spec) == "width 16, depth 3");
  CHECK(knobs_text(model_cost("deeplabv3plus-resnet50", 16, 32, 32, 3).spec) == "aspp_rates 6,12,18");
  // A knob the input cannot take names the model, its knobs and the input.
  nn::ModelSpec deep;
  deep.name = "unet";
  deep.classes = 3;
  deep.depth = 5;
  CHECK_THROWS_WITH(model_cost(deep, 16, 16, 24), Catch::Contains("unet") && Catch::Contains("depth 5") &&
                                                      Catch::Contains("16,16,24"));
  CHECK_THROWS_WITH(nn::model_knobs("alexnet"), Catch::Contains("alexnet") && Catch::Contains("unet"));
}

TEST_CASE("perf model: FLOPs of one convolution and one linear layer against a hand count", "[perf_model]") {
  // conv 3x3, 2 -> 4 channels, stride 1, padding 1, bias, on [2,2,5,5]: output [2,4,5,5] = 200
  // values, each 2*3*3 = 18 multiply-adds (36 FLOPs) plus the bias: 200 * 37 = 7400.
  nn::Graph conv(nn::Shape(1, 2, 5, 5));
  nn::Conv2dOptions o;
  o.out_channels = 4;
  o.kernel = 3;
  o.padding = 1;
  conv.set_output(conv.add("conv", nn::conv2d(o), nn::Graph::k_input));
  conv.setup(2);
  CHECK(conv.forward_flops() == Approx(7400.0));
  // linear 12 -> 5 with bias on a batch of 3: 3 * 5 * (2 * 12 + 1) = 375.
  nn::Graph lin(nn::Shape(1, 12));
  lin.set_output(lin.add("fc", nn::linear(5), nn::Graph::k_input));
  lin.setup(3);
  CHECK(lin.forward_flops() == Approx(375.0));
  // Without bias: 3 * 5 * 24 = 360.
  nn::Graph lin2(nn::Shape(1, 12));
  lin2.set_output(lin2.add("fc", nn::linear(5, false), nn::Graph::k_input));
  lin2.setup(3);
  CHECK(lin2.forward_flops() == Approx(360.0));
}

TEST_CASE("perf model: ring allreduce cost against a hand computation", "[perf_model]") {
  // 4 ranks, 1 MB, alpha 10 us, beta 1 GB/s: 6 steps * 10 us + 6/4 * 1e6 / 1e9 s = 60 us + 1.5 ms.
  CHECK(ring_allreduce_s(1e6, 4, 10e-6, 1e9) == Approx(1.56e-3));
  CHECK(ring_allreduce_s(1e6, 1, 10e-6, 1e9) == 0.0);
  Machine m;
  m.gpus_per_node = 6;
  m.intra_bw = 50e9;
  m.intra_latency = 2e-6;
  m.inter_bw = 25e9;
  m.inter_latency = 5e-6;
  // One node: both are the ring over NVLink: 10 * 2 us + 10/6 * 6e6 / 50e9.
  const double one = 10 * 2e-6 + 10.0 / 6.0 * 6e6 / 50e9;
  CHECK(flat_allreduce_s(6e6, 1, m) == Approx(one));
  CHECK(hier_allreduce_s(6e6, 1, m) == Approx(one));
  // Two nodes, flat: 12 GPUs, 22 steps of 5 us, 22/12 * 6e6 at 25e9/6 per GPU.
  CHECK(flat_allreduce_s(6e6, 2, m) == Approx(22 * 5e-6 + 22.0 / 12.0 * 6e6 / (25e9 / 6)));
  // Two nodes, hierarchical: the node's ring, then 2 steps across on 1 MB at 25e9/6 each.
  CHECK(hier_allreduce_s(6e6, 2, m) == Approx(one + 2 * 5e-6 + 1.0 * 1e6 / (25e9 / 6)));
}

TEST_CASE("perf model: hierarchical beats flat when the network is the bottleneck", "[perf_model]") {
  const Machine summit = machine_preset("summit");
  const double bytes = 4.0 * 25.6e6;  // ResNet-50's gradients
  for (int nodes : {2, 16, 256, 4608}) {
    INFO(nodes);
    CHECK(hier_allreduce_s(bytes, nodes, summit) < flat_allreduce_s(bytes, nodes, summit));
  }
  // With a network as fast as NVLink per GPU, the intra-node phases are pure overhead for
  // large messages on few nodes: flat is then no worse.
  Machine fast = summit;
  fast.inter_bw = 1e15;
  fast.inter_latency = summit.intra_latency;
  CHECK(flat_allreduce_s(bytes, 2, fast) <= hier_allreduce_s(bytes, 2, fast));
}

TEST_CASE("perf model: efficiency is 1 at the base and non-increasing with nodes", "[perf_model]") {
  const ModelCost r20 = model_cost("resnet20", 1, 28, 28, 10);
  const ModelCost dl = model_cost("deeplabv3plus-resnet50", 16, 768, 1152, 3);
  for (const std::string machine : {"summit", "perlmutter", "frontier", "cori-gpu", "horovod-p100"}) {
    const Machine m = machine_preset(machine);
    std::vector<int> nodes;
    for (int n : {1, 2, 16, 256})
      if (n < m.max_nodes) nodes.push_back(n);
    nodes.push_back(m.max_nodes);
    for (const auto algo : {squall::parallel::Algorithm::ssgd, squall::parallel::Algorithm::sma}) {
      for (const std::string ar : {"hier", "flat"}) {
        Scenario s;
        s.algorithm = algo;
        s.allreduce = ar;
        for (const ModelCost* cost : {&r20, &dl}) {
          s.batch = cost == &dl ? 2 : 32;
          const auto rows = forecast(*cost, m, s, nodes);
          INFO(machine << " " << squall::parallel::algorithm_name(algo) << " " << ar << " " << cost->name);
          REQUIRE(rows.size() == nodes.size());
          CHECK(rows[0].efficiency == Approx(1.0));
          for (size_t i = 1; i < rows.size(); ++i) {
            CHECK(rows[i].efficiency <= rows[i - 1].efficiency + 1e-12);
            CHECK(rows[i].efficiency > 0);
            CHECK(rows[i].global_batch == rows[0].global_batch / rows[0].nodes * rows[i].nodes);
          }
        }
      }
    }
  }
}

TEST_CASE("perf model: bad machines and node counts are usage errors naming the value", "[perf_model]") {
  CHECK_THROWS_AS(machine_preset("bluegene"), UsageError);
  CHECK_THROWS_WITH(machine_preset("bluegene"), Catch::Contains("bluegene"));
  CHECK_THROWS_AS(machine_preset("local"), UsageError);
  CHECK_THROWS_WITH(model_cost("alexnet", 3, 224, 224, 10), Catch::Contains("alexnet"));
  const ModelCost r20 = model_cost("resnet20", 1, 28, 28, 10);
  CHECK_THROWS_WITH(forecast(r20, machine_preset("summit"), Scenario{}, {1, 0}), Catch::Contains("0"));
  CHECK_THROWS_WITH(forecast(r20, machine_preset("summit"), Scenario{}, {5000}), Catch::Contains("5000"));
}

TEST_CASE("perf model: calibration from a summary.json reproduces its samples/s", "[perf_model]") {
  const ModelCost r20 = model_cost("resnet20", 1, 28, 28, 10);
  const json summary{{"model", "resnet20"}, {"world_size", 2}, {"global_batch", 128},
                     {"parameters", r20.parameters}, {"samples_per_s", 640.0}, {"steps", 100},
                     {"time_breakdown_s", {{"compute", 15.0}, {"allreduce", 3.0}, {"io_wait", 0.5}}}};
  const RunMeasurement run = read_summary(summary);
  CHECK(run.step_s() == Approx(0.2));
  const Machine local = calibrate_local(r20, run);
  CHECK(local.gpus_per_node == 2);
  // 64 samples per rank in 0.15 s of compute.
  CHECK(local.sustained_flops() == Approx(r20.train_flops() * 64 / 0.15));
  // 30 ms of allreduce per step for 4 * parameters bytes over a ring of 2: 1 * bytes / beta.
  CHECK(local.intra_bw == Approx(4.0 * r20.parameters / 0.03));
  CHECK(local.step_overhead == Approx(0.02));
  CHECK(local.overlap == 0.0);
  Scenario s;
  s.batch = 64;
  s.overlap = local.overlap;
  const Row row = forecast_one(r20, local, s, 1);
  CHECK(row.samples_per_s == Approx(640.0));
  CHECK(row.compute_ms == Approx(150.0));
  CHECK(row.exposed_ms == Approx(30.0));
  // Without a step count: the shares of compute and allreduce in the measured step.
  json no_steps = summary;
  no_steps.erase("steps");
  const Machine local2 = calibrate_local(r20, read_summary(no_steps));
  CHECK(forecast_one(r20, local2, s, 1).samples_per_s == Approx(640.0));
  // With 10 ms per step hidden behind backward: 40 ms of allreduce in all, a quarter hidden.
  json hidden = summary;
  hidden["time_breakdown_s"]["allreduce_overlapped"] = 1.0;
  const Machine local3 = calibrate_local(r20, read_summary(hidden));
  CHECK(local3.intra_bw == Approx(4.0 * r20.parameters / 0.04));
  CHECK(local3.overlap == Approx(0.01 / 0.04));
  s.overlap = local3.overlap;
  const Row row3 = forecast_one(r20, local3, s, 1);
  CHECK(row3.exposed_ms == Approx(30.0));
  CHECK(row3.samples_per_s == Approx(640.0));
  CHECK_THROWS_AS(read_summary(json{{"model", "resnet20"}}), Error);
  // A resumed run: its figures and its steps are the last attempt's.
  json resumed = summary;
  resumed["steps"] = 300;
  resumed["attempt"] = json{{"number", 2}, {"first_step", 200}, {"steps", 100}};
  CHECK(read_summary(resumed).steps == 100);
  s.overlap = 0;
  CHECK(forecast_one(r20, calibrate_local(r20, read_summary(resumed)), s, 1).samples_per_s == Approx(640.0));
}

TEST_CASE("perf model: calibration from a split run's summary.json: groups are learners, a rank a tile",
          "[perf_model][spatial]") {
  const ModelCost r20 = model_cost("resnet20", 1, 28, 28, 10);
  // 4 ranks in 2 groups of [2, 1], batch 2 per group: a 0.8 s step of 0.5 s compute (0.1 s of
  // it waiting for halos), 0.1 s of allreduce.
  const json summary{{"model", "resnet20"}, {"world_size", 4}, {"global_batch", 4},
                     {"parameters", r20.parameters}, {"samples_per_s", 5.0}, {"steps", 10},
                     {"time_breakdown_s", {{"compute", 5.0}, {"allreduce", 1.0}, {"io_wait", 0.0}}},
                     {"parallel", {{"spatial", {{"rows", 2}, {"cols", 1}, {"groups", 2},
                                                {"halo", {{"exposed_s", 1.0}, {"hidden_s", 2.0}, {"bytes", 1e6}}}}}}}};
  const RunMeasurement run = read_summary(summary);
  CHECK(run.split == squall::nn::SpatialSplit{2, 1});
  CHECK(run.groups() == 2);
  CHECK(run.batch_per_learner() == 2);
  // Halo bytes per sample whose model time on this shape is 0.2 s: 2 samples per GPU, over the
  // group's 2 GPUs, at the allreduce's bandwidth (a ring of 4: 3/2 x bytes / 0.1 s).
  const double beta = 1.5 * 4.0 * r20.parameters / 0.1;
  const double halo_bytes = 0.2 * beta;
  const Machine local = calibrate_local(r20, run, 0.0, squall::parallel::Algorithm::ssgd, halo_bytes);
  CHECK(local.intra_bw == Approx(beta));
  // A rank computed half of each of its group's 2 samples in the 0.4 s it did not wait.
  CHECK(local.sustained_flops() == Approx(r20.train_flops() * 1 / 0.4));
  // 0.2 s of halo time, 0.1 s exposed: half of it hidden; the rest of the step is overhead.
  CHECK(local.halo_overlap == Approx(0.5));
  CHECK(local.step_overhead == Approx(0.8 - 0.4 - 0.1 - 0.1));
  Scenario s;
  s.batch = run.batch_per_learner();
  s.spatial = 2;
  s.halo_bytes = halo_bytes;
  s.overlap = local.overlap;
  const Row row = forecast_one(r20, local, s, 1);
  CHECK(row.learners == 2);
  CHECK(row.compute_ms == Approx(400.0));
  CHECK(row.halo_exposed_ms == Approx(100.0));
  CHECK(row.samples_per_s == Approx(5.0));
  // Whole samples on the same ranks: 4 learners of 2 samples, each rank twice the tile's compute.
  s.spatial = 1;
  s.halo_bytes = 0;
  const Row whole = forecast_one(r20, local, s, 1);
  CHECK(whole.learners == 4);
  CHECK(whole.compute_ms == Approx(800.0));
  CHECK(whole.group_sum_ms == 0);
  // A split that does not divide the run's ranks, or its global batch, is refused.
  json bad = summary;
  bad["parallel"]["spatial"]["rows"] = 3;
  CHECK_THROWS_WITH(read_summary(bad), Catch::Contains("[3, 1]") && Catch::Contains("4 rank(s)"));
  bad = summary;
  bad["global_batch"] = 3;
  CHECK_THROWS_WITH(read_summary(bad), Catch::Contains("global batch 3"));
}

TEST_CASE("perf model: alpha and beta fitted from an allreduce benchmark", "[perf_model]") {
  // Synthetic: 4 ranks, alpha 20 us, beta 2 GB/s, exact.
  json bench{{"results", json::array()}};
  for (double bytes : {4096.0, 65536.0, 1048576.0, 16777216.0}) {
    const double x = 2.0 * 3 / 4 * bytes;
    bench["results"].push_back(json{{"algo", "mpi"}, {"bytes", bytes}, {"ranks", 4},
                                    {"time_us", (6 * 20e-6 + x / 2e9) * 1e6}, {"busbw_GBps", 1.0}});
    bench["results"].push_back(json{{"algo", "hier"}, {"bytes", bytes}, {"ranks", 4},
                                    {"time_us", 1.0 + bytes * 1e-3}, {"busbw_GBps", 1.0}});
  }
  const AlphaBetaFit fit = fit_alpha_beta(bench, "mpi");
  CHECK(fit.points == 4);
  CHECK(fit.alpha == Approx(20e-6).epsilon(1e-6));
  CHECK(fit.beta == Approx(2e9).epsilon(1e-6));
  CHECK(fit.rms_rel_error < 1e-9);
  CHECK_THROWS_AS(fit_alpha_beta(json{{"results", json::array()}}), Error);
}

TEST_CASE("perf model: a run dir gives the calibration its model, knobs and input", "[perf_model]") {
  test::TempDir tmp("squall-perf-run");
  const std::filesystem::path dir = tmp.path / "run";
  std::filesystem::create_directories(dir);
  config::Config cfg;
  cfg.model.name = "unet";
  cfg.model.width = 8;
  cfg.model.depth = 2;
  cfg.data.train = tmp.file("moved-away");  // the run's data is not here
  cfg.data.test = cfg.data.train;
  std::ofstream(dir / "config.toml") << config::to_toml(cfg);
  nn::ModelSpec spec;
  spec.name = "unet";
  spec.classes = 3;
  spec.width = 8;
  spec.depth = 2;
  const ModelCost cost = model_cost(spec, 16, 16, 24);
  json summary{{"model", "unet"}, {"world_size", 1}, {"global_batch", 4}, {"parameters", cost.parameters},
               {"samples_per_s", 6.0}, {"steps", 4}, {"train_loop_s", 2.5},
               {"time_breakdown_s", {{"compute", 2.4}, {"allreduce", 0.0}, {"io_wait", 0.01}}}};
  std::ofstream(dir / "summary.json") << summary.dump();

  // Neither checkpoint nor data: the model and its knobs, but no input.
  CalibrationRun run = read_calibration_run(dir.string());
  CHECK(run.spec.name == "unet");
  CHECK(run.spec.width == 8);
  CHECK(run.spec.depth == 2);
  CHECK(run.has_knobs);
  CHECK_FALSE(run.has_input);
  CHECK_THAT(run.no_input_why, Catch::Contains("no checkpoint") && Catch::Contains("moved-away"));
  CHECK(run.measurement.steps == 4);

  // A checkpoint's metadata says the input and classes.
  checkpoint::CheckpointData d;
  d.ints["step"] = 4;
  d.texts["spec/name"] = "unet";
  d.texts["spec/config"] = "";
  d.ints["spec/classes"] = 3;
  d.ints["spec/width"] = 8;
  d.ints["spec/depth"] = 2;
  d.reals["spec/dropout"] = 0;
  d.texts["spec/aspp_rates"] = "";
  d.ints["input/channels"] = 16;
  d.ints["input/height"] = 16;
  d.ints["input/width"] = 24;
  d.texts["class_names"] = "background\ncyclone\nriver";
  d.texts["normalization/kind"] = "none";
  d.texts["normalization/source"] = "";
  d.reals["normalization/input_scale"] = 1;
  d.arrays["normalization/mean"] = {};
  std::filesystem::create_directories(dir / "checkpoints" / "step-00000004");
  checkpoint::write_checkpoint_file((dir / "checkpoints" / "step-00000004" / "model.h5").string(), d);
  run = read_calibration_run((dir / "summary.json").string());
  REQUIRE(run.has_input);
  CHECK(run.c == 16);
  CHECK(run.h == 16);
  CHECK(run.w == 24);
  CHECK(run.spec.classes == 3);
  CHECK_THAT(run.input_from, Catch::Contains("step-00000004"));
  CHECK(model_cost(run.spec, run.c, run.h, run.w).parameters == cost.parameters);

  // A resumed run written before summary.json's `attempt`: the steps are the last attempt's.
  std::ofstream(dir / "metrics.jsonl") << "{\"kind\":\"resume\",\"step\":3,\"checkpoint\":\"c\"}\n";
  CHECK(read_calibration_run(dir.string()).measurement.steps == 1);

  // The summary names another model than the config: not one run.
  summary["model"] = "resnet20";
  std::ofstream(dir / "summary.json") << summary.dump();
  CHECK_THROWS_AS(read_calibration_run(dir.string()), UsageError);
  CHECK_THROWS_WITH(read_calibration_run(dir.string()), Catch::Contains("resnet20") && Catch::Contains("unet"));
}

TEST_CASE("perf model: the expected maximum of n normals (Blom) against exact values", "[perf_model]") {
  CHECK(normal_quantile(0.5) == Approx(0.0).margin(1e-12));
  CHECK(normal_quantile(0.975) == Approx(1.959964).epsilon(1e-6));
  CHECK(normal_quantile(0.025) == Approx(-1.959964).epsilon(1e-6));
  CHECK(expected_max_normal(1) == 0.0);
  // Exact E[max of n standard normals] (numerical integration of x n phi(x) Phi(x)^(n-1)):
  // n = 2: 1/sqrt(pi); Blom is within 5% everywhere, within 1% from n = 6 on.
  const struct { int n; double exact, tolerance; } cases[] = {
      {2, 1.0 / std::sqrt(M_PI), 0.05}, {3, 0.8463, 0.03}, {6, 1.2672, 0.015}, {10, 1.5388, 0.01},
      {100, 2.5076, 0.01}, {1000, 3.2414, 0.01}, {27360, 4.0923, 0.01}};
  double last = 0;
  for (const auto& c : cases) {
    INFO(c.n);
    CHECK(expected_max_normal(c.n) == Approx(c.exact).epsilon(c.tolerance));
    CHECK(expected_max_normal(c.n) > last);
    // The asymptotic sqrt(2 ln n) is higher than the exact value at every n here.
    CHECK(std::sqrt(2.0 * std::log(c.n)) > c.exact);
    last = expected_max_normal(c.n);
  }
  CHECK_THROWS_AS(expected_max_normal(0), UsageError);
  CHECK_THROWS_AS(normal_quantile(1.0), UsageError);
}

TEST_CASE("perf model: the straggler term is compute x jitter x the expected maximum over the GPUs",
          "[perf_model]") {
  const ModelCost dl = model_cost("deeplabv3plus-resnet50", 16, 768, 1152, 3);
  const Machine summit = machine_preset("summit");
  Scenario s;
  s.batch = 2;
  s.jitter = 0.05;
  for (int nodes : {1, 16, 4560}) {
    INFO(nodes);
    const Row r = forecast_one(dl, summit, s, nodes);
    CHECK(r.straggler_ms == Approx(r.compute_ms * 0.05 * expected_max_normal(nodes * 6)));
    // It is part of the step: step = compute + straggler + exposed (no overhead, not I/O-bound).
    CHECK(r.step_ms == Approx(r.compute_ms + r.straggler_ms + r.exposed_ms));
  }
  // Without jitter there is no wait; with it the efficiency at scale is lower, and more so
  // with more jitter.
  Scenario none = s;
  none.jitter = 0;
  CHECK(forecast_one(dl, summit, none, 4560).straggler_ms == 0.0);
  const double eff0 = forecast(dl, summit, none, {1, 4560}).back().efficiency;
  const double eff2 = forecast(dl, summit, [&] { Scenario t = s; t.jitter = 0.02; return t; }(), {1, 4560}).back().efficiency;
  const double eff5 = forecast(dl, summit, s, {1, 4560}).back().efficiency;
  CHECK(eff2 < eff0);
  CHECK(eff5 < eff2);
  // Against the base node's own 6 GPUs: (1 + j z(6)) / (1 + j z(27360)) when compute dominates.
  Scenario bare = s;
  bare.overlap = 1.0;
  bare.sample_bytes = 0;
  Machine no_net = summit;
  no_net.intra_latency = no_net.inter_latency = 0;
  no_net.intra_bw = no_net.inter_bw = 1e30;
  CHECK(forecast(dl, no_net, bare, {1, 4560}).back().efficiency ==
        Approx((1 + 0.05 * expected_max_normal(6)) / (1 + 0.05 * expected_max_normal(27360))));
  // A calibrated machine holds its own ranks' wait in its overhead: none at its own size, the
  // growth beyond it elsewhere.
  Machine local = summit;
  local.gpus_per_node = 4;
  local.jitter_base_ranks = 4;
  const Row own = forecast_one(dl, local, s, 1);
  CHECK(own.straggler_ms == 0.0);
  const Row more = forecast_one(dl, local, s, 8);
  CHECK(more.straggler_ms == Approx(more.compute_ms * 0.05 * (expected_max_normal(32) - expected_max_normal(4))));
  s.jitter = 1.5;
  CHECK_THROWS_WITH(forecast(dl, summit, s, {1}), Catch::Contains("--jitter"));
}

TEST_CASE("perf model: the hierarchical cross-node stage is the allreduce's own choice (mpi/cross_algorithm.hpp)",
          "[perf_model]") {
  using squall::mpi::CrossAlgorithm;
  const Machine summit = machine_preset("summit");
  const double bytes = 4.0 * 40388067;  // DeepCAM's network's fp32 gradients
  const double intra = ring_allreduce_s(bytes, 6, summit.intra_latency, summit.intra_bw);
  const double part = bytes / 6;
  const double a = summit.inter_latency, bw = summit.inter_bw / 6;
  for (int nodes : {2, 3, 16, 17, 256, 4560}) {
    INFO(nodes);
    // Forced: the ring is the old formula on the part; halving-doubling is the header's.
    const double ring = hier_allreduce_s(bytes, nodes, summit, CrossAlgorithm::ring);
    const double hd = hier_allreduce_s(bytes, nodes, summit, CrossAlgorithm::halving_doubling);
    CHECK(ring == Approx(intra + ring_allreduce_s(part, nodes, a, bw)));
    const int q = squall::mpi::pow2_floor(nodes);
    const double hd_hand = 2.0 * std::log2(q) * a + 2.0 * (q - 1) / q * part / bw + (q == nodes ? 0.0 : 2.0 * (a + part / bw));
    CHECK(hd == Approx(intra + hd_hand));
    // Auto: the cheaper, and the same choice the allreduce makes for that part.
    const double automatic = hier_allreduce_s(bytes, nodes, summit);
    CHECK(automatic == Approx(std::min(ring, hd)));
    CHECK(hier_cross_algorithm(bytes, nodes, summit) ==
          squall::mpi::choose_cross(part, nodes, squall::mpi::LinkCost{a, bw}));
    Scenario s;
    s.batch = 2;
    const ModelCost dl = model_cost("deeplabv3plus-resnet50", 16, 768, 1152, 3);
    CHECK(forecast_one(dl, summit, s, nodes).cross == hier_cross_algorithm(bytes, nodes, summit));
  }
  // Two nodes: the same exchange, the ring taken on the tie.
  CHECK(hier_cross_algorithm(bytes, 2, summit) == CrossAlgorithm::ring);
  // A power of two at scale: halving-doubling's log2 latency wins.
  CHECK(hier_cross_algorithm(bytes, 256, summit) == CrossAlgorithm::halving_doubling);
  CHECK(hier_allreduce_s(bytes, 256, summit) < hier_allreduce_s(bytes, 256, summit, CrossAlgorithm::ring));
  // Three nodes: halving-doubling's two extra steps move the whole part; the ring is cheaper.
  CHECK(hier_cross_algorithm(bytes, 3, summit) == CrossAlgorithm::ring);
  CHECK(hier_allreduce_s(bytes, 3, summit) < hier_allreduce_s(bytes, 3, summit, CrossAlgorithm::halving_doubling));
  // Forced choices are kept even where they are dearer.
  CHECK(hier_cross_algorithm(bytes, 3, summit, CrossAlgorithm::halving_doubling) == CrossAlgorithm::halving_doubling);
}

TEST_CASE("perf model: a model given by its counts", "[perf_model]") {
  const ModelCost c = given_cost("resnet-101", 44549160, 15.6e9, 3, 224, 224);
  CHECK(c.parameters == 44549160);
  CHECK(c.train_flops() == Approx(46.8e9));
  Scenario s;
  s.batch = 64;
  s.jitter = 0;
  const Machine m = machine_preset("horovod-p100");
  const Row r = forecast_one(c, m, s, 1);
  CHECK(r.compute_ms == Approx(46.8e9 * 64 / (9.3e12 * 0.4) * 1e3));
  CHECK_THROWS_WITH(given_cost("x", 0, 1e9), Catch::Contains("--params"));
  CHECK_THROWS_WITH(given_cost("x", 10, -1), Catch::Contains("--flops"));
}
