// Named weights in checkpoints (io/checkpoint/named_weights.hpp, docs/formats.md "Checkpoints"):
// the central model saved by name and shape reads back through load_model_checkpoint into a
// fresh graph that gives the trained model's logits; an old flat checkpoint and a model of
// another shape are refused naming the file and the tensor. And the normalisation: the test
// set is normalised with the training set's statistics, in training and in `squall eval`, the
// checkpoint and the summary record them, and an unlabeled DeepCAM folder is refused by name.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
#include "io/formats/dataset.hpp"
#include "io/formats/h5_util.hpp"
#include "src/core/error.hpp"
#include "io/checkpoint/named_weights.hpp"
#include "src/nn/graph.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

using squall::test::read_json;
using squall::test::read_records;

namespace {

// A small ResNet: convolutions, BatchNorm (running statistics as state) and a dense head.
nn::ModelSpec small_resnet() {
  nn::ModelSpec s;
  s.name = "resnet20";
  s.classes = 3;
  s.width = 4;
  return s;
}
const nn::Shape k_sample(1, 2, 8, 8);

std::vector<float> batch_images(int64_t b, int64_t step) {
  std::vector<float> x(static_cast<size_t>(b * k_sample.per_sample()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + step));
  return x;
}

std::vector<float> logits(nn::Graph& g, nn::Backend& backend, const std::vector<float>& images) {
  auto stream = backend.create_stream();
  backend.synchronize_all();
  backend.copy_from_host(*stream, g.input().f32(), images.data(), images.size());
  g.forward(*stream, nn::RunMode{false});
  const nn::Tensor out = g.output();
  REQUIRE(out.dtype == nn::DType::f32);
  std::vector<float> host(static_cast<size_t>(out.numel()));
  backend.copy_to_host(*stream, host.data(), out.f32(), host.size());
  backend.synchronize(*stream);
  return host;
}

void generate_climate(const std::string& out, int seed) {
  const auto r = test::run_command(test::squall_bin() + " data climate --out " + out +
                                   " --samples 4 --height 16 --width 24 --seed " + std::to_string(seed));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

// A copy of `from`'s DeepCAM files with the statistics of another folder beside them.
void copy_with_other_stats(const std::string& from, const std::string& stats_of, const std::string& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from))
    if (e.path().filename() != "stats.h5") fs::copy_file(e.path(), fs::path(to) / e.path().filename());
  fs::copy_file(fs::path(stats_of) / "stats.h5", fs::path(to) / "stats.h5");
}

std::string train_unet(const std::string& train, const std::string& test, const std::string& dir) {
  return test::squall_bin() + " train --config " + std::string(SQUALL_SOURCE_DIR) +
         "/configs/fashion-mnist-lenet5.toml --set model.name=unet --set model.width=4 --set model.depth=2" +
         " --set train.batch_size=2 --set train.max_steps=3 --set schedule.warmup_steps=0 --set data.train=" + train +
         " --set data.test=" + test + " --set run.dir=" + dir;
}

}  // namespace

TEST_CASE("a checkpoint's named weights load into a fresh graph that gives the trained model's logits",
          "[checkpoint][named-weights]") {
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  const int64_t b = 4;
  const nn::ModelSpec spec = small_resnet();
  auto make = [&] { return nn::make_model(spec, k_sample); };
  parallel::LearnerGroupOptions o;
  parallel::LearnerGroup group(*backend, make, b, b, test::plain_sgd(), {}, o, alone);
  std::vector<int32_t> labels(static_cast<size_t>(b));
  for (int64_t step = 0; step < 3; ++step) {
    const std::vector<float> x = batch_images(b, step);
    for (int64_t i = 0; i < b; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i + step) % 3);
    group.step({{x.data(), labels.data()}}, step, 0.1f);
  }
  REQUIRE(group.state_value_count() > 0);  // BatchNorm's running statistics travel too

  checkpoint::CheckpointData shared;
  group.save_shared(shared);
  shared.ints["step"] = 3;
  data::DatasetInfo info;
  info.sample = k_sample;
  info.classes = 3;
  info.class_names = {"zero", "one", "two"};
  const data::Normalization norm{"zscore", {0.5f, -1.0f}, {2.0f, 0.25f}, 1.0f, "a test"};
  checkpoint::add_model_entries(shared, group.replica_graph(0), shared.arrays.at("central/params"),
                           shared.arrays.at("central/state"), spec, "[model]\nname = \"resnet20\"\n", info, norm);
  test::TempDir tmp("squall-named-weights");
  const fs::path folder = tmp.path / "step-00000003";
  fs::create_directories(folder);
  checkpoint::write_checkpoint_file((folder / "model.h5").string(), shared);

  const checkpoint::ModelCheckpoint ck = checkpoint::load_model_checkpoint(folder);
  CHECK(ck.step == 3);
  CHECK(ck.spec.name == "resnet20");
  CHECK(ck.spec.classes == 3);
  CHECK(ck.spec.width == 4);
  CHECK(ck.spec.aspp_rates == spec.aspp_rates);
  CHECK(ck.input == k_sample);
  CHECK(ck.class_names == info.class_names);
  CHECK(ck.normalization.same_as(norm));
  CHECK(ck.model_config == "[model]\nname = \"resnet20\"\n");
  const nn::Graph& layout = group.replica_graph(0);
  CHECK(ck.tensors.size() == layout.param_info().size() + layout.state_info().size());
  for (const auto& p : layout.param_info()) {
    INFO(p.name);
    REQUIRE(ck.tensors.contains(p.name));
    CHECK(ck.tensors.at(p.name).shape == std::vector<int64_t>(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank));
  }

  // A graph built from what the checkpoint says, loaded by name: the central model's logits.
  auto g = nn::make_model(ck.spec, ck.input);
  g->set_forward_only(true);     // as eval and predict build it, and as the group's evaluation graph is
  g->build(*backend, b, 12345);  // another initialisation: everything must come from the file
  auto stream = backend->create_stream();
  checkpoint::load_into_graph(ck, *g, *backend, *stream);
  const std::vector<float> x = batch_images(b, 7);
  const std::vector<float> want = logits(group.eval_graph(), *backend, x);
  const std::vector<float> got = logits(*g, *backend, x);
  REQUIRE(got.size() == want.size());
  CHECK(got == want);

  // Another model (other width): refused naming the checkpoint and a tensor.
  nn::ModelSpec wider = spec;
  wider.width = 8;
  auto other = nn::make_model(wider, ck.input);
  other->build(*backend, b, 1);
  CHECK_THROWS_WITH(checkpoint::load_into_graph(ck, *other, *backend, *stream),
                    Contains((folder / "model.h5").string()) && Contains("model/") && Contains("shape"));
}

TEST_CASE("a checkpoint from before named weights is refused naming the file", "[checkpoint][named-weights]") {
  test::TempDir tmp("squall-flat-checkpoint");
  checkpoint::CheckpointData d;
  d.arrays["central/params"] = {1.0f, 2.0f};
  d.arrays["central/state"] = {};
  d.ints["step"] = 5;
  d.texts["model"] = "lenet5";
  const std::string file = tmp.file("model.h5");
  checkpoint::write_checkpoint_file(file, d);
  CHECK_THROWS_WITH(checkpoint::load_model_checkpoint(file), Contains(file) && Contains("predates named weights"));
}

TEST_CASE("a shaped array reads back with its shape, and a shape that does not fit it is an error",
          "[checkpoint][named-weights]") {
  test::TempDir tmp("squall-shaped");
  checkpoint::CheckpointData d;
  d.arrays["model/w"] = {1, 2, 3, 4, 5, 6};
  d.shapes["model/w"] = {2, 3};
  d.arrays["flat"] = {7, 8};
  checkpoint::write_checkpoint_file(tmp.file("a.h5"), d);
  const checkpoint::CheckpointData r = checkpoint::read_checkpoint_file(tmp.file("a.h5"));
  CHECK(r.arrays == d.arrays);
  CHECK(r.shape("model/w") == std::vector<int64_t>{2, 3});
  CHECK(r.shape("flat") == std::vector<int64_t>{2});
  CHECK_FALSE(r.shapes.contains("flat"));
  const checkpoint::CheckpointData back = checkpoint::CheckpointData::deserialize(r.serialize(), "sent");
  CHECK(back.shapes == r.shapes);
  d.shapes["model/w"] = {4, 2};
  CHECK_THROWS_WITH(checkpoint::write_checkpoint_file(tmp.file("b.h5"), d), Contains("model/w") && Contains("shape"));
  CHECK_FALSE(fs::exists(tmp.file("b.h5")));
}

TEST_CASE("the test set is normalised with the training set's statistics, in training and in eval",
          "[climate][train][eval][normalization]") {
  test::TempDir tmp("squall-normalization");
  const std::string a = tmp.file("a"), b = tmp.file("b"), a_with_b_stats = tmp.file("a-b-stats");
  generate_climate(a, 3);
  generate_climate(b, 11);
  copy_with_other_stats(a, b, a_with_b_stats);
  const formats::ChannelStats stats_a = formats::read_deepcam_stats(a + "/stats.h5");
  const formats::ChannelStats stats_b = formats::read_deepcam_stats(b + "/stats.h5");
  REQUIRE(stats_a.mean != stats_b.mean);  // the two folders' statistics differ

  // The same samples as test set, beside their own statistics or beside another folder's:
  // the run evaluates them alike, with a's.
  const std::string run1 = tmp.file("run1"), run2 = tmp.file("run2");
  for (const auto& [test, dir] : {std::pair{a, run1}, {a_with_b_stats, run2}}) {
    const auto r = test::run_command(train_unet(a, test, dir));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
  const json s1 = read_json(run1 + "/summary.json"), s2 = read_json(run2 + "/summary.json");
  CHECK(s1.at("final").at("test_loss") == s2.at("final").at("test_loss"));
  CHECK(s1.at("final").at("test_miou") == s2.at("final").at("test_miou"));

  // The summary and the checkpoint record a's statistics.
  const json& n = s2.at("normalization");
  CHECK(n.at("kind") == "zscore");
  CHECK(n.at("mean").get<std::vector<float>>() == stats_a.mean);
  CHECK(n.at("std").get<std::vector<float>>() == stats_a.std);
  CHECK_THAT(n.at("source").get<std::string>(), Contains(a + "/stats.h5"));
  const checkpoint::ModelCheckpoint ck = checkpoint::load_model_checkpoint(run2 + "/checkpoints/step-00000003");
  CHECK(ck.normalization.kind == "zscore");
  CHECK(ck.normalization.mean == stats_a.mean);
  CHECK(ck.normalization.std == stats_a.std);
  CHECK(ck.class_names == std::vector<std::string>{"background", "tropical cyclone", "atmospheric river"});
  CHECK(ck.input == nn::Shape(1, static_cast<int64_t>(stats_a.mean.size()), 16, 24));

  // squall eval too: the copy beside b's statistics evaluates as a itself, with a's.
  auto eval = [&](const std::string& data) {
    const auto r = test::run_command(test::squall_bin() + " eval --run " + run1 + " --data " + data + " --json");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out);
  };
  const json e1 = eval(a), e2 = eval(a_with_b_stats);
  CHECK(e1.at("test_loss") == e2.at("test_loss"));
  CHECK(e1.at("test_miou") == e2.at("test_miou"));
  CHECK(e1.at("test_loss") == s1.at("final").at("test_loss"));
}

TEST_CASE("an unlabeled DeepCAM folder is refused for training and evaluation, naming it",
          "[climate][train][eval][normalization]") {
  test::TempDir tmp("squall-unlabeled");
  const std::string a = tmp.file("a"), bare = tmp.file("bare");
  generate_climate(a, 5);
  fs::create_directories(bare);
  for (const auto& e : fs::directory_iterator(a)) {
    const fs::path to = fs::path(bare) / e.path().filename();
    fs::copy_file(e.path(), to);
    if (to.filename() == "stats.h5") continue;
    auto lock = formats::h5_lock();
    const hid_t f = H5Fopen(to.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    REQUIRE(H5Ldelete(f, "/climate/labels_0", H5P_DEFAULT) >= 0);
    H5Fclose(f);
  }
  const auto r = test::run_command(train_unet(bare, a, tmp.file("run")));
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains(bare + " holds unlabeled DeepCAM files") && Contains("labels_0"));

  const auto ok = test::run_command(train_unet(a, a, tmp.file("run-ok")));
  INFO(ok.out << ok.err);
  REQUIRE(ok.exit_code == 0);
  const auto e = test::run_command(test::squall_bin() + " eval --run " + tmp.file("run-ok") + " --data " + bare);
  INFO(e.out << e.err);
  CHECK(e.exit_code != 0);
  CHECK_THAT(e.err, Contains(bare + " holds unlabeled DeepCAM files"));
}
