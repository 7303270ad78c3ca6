// `squall train` end to end, as a user runs it: accuracy on real data, the run outputs of
// docs/design.md, the NaN stop, config errors that name the key, and the warning about a
// training set of one class.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::read_json;
using squall::test::read_records;
using squall::test::fresh_dir;

namespace {

const std::string k_lenet = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";

const std::string k_fmnist_dir = "/usr/share/datasets/fashion-mnist";

}  // namespace

TEST_CASE("lenet5 reaches test accuracy >= 0.89 on Fashion-MNIST within 5 epochs", "[train][slow]") {
  const auto dir = fresh_dir("test-lenet5-accuracy");
  const auto r = run_command(squall_bin() + " train --config " + k_lenet + " --set run.dir=" + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto summary = read_json(dir + "/summary.json");
  CHECK(summary.at("epochs") == 5);
  CHECK(summary.at("final").at("test_accuracy").get<double>() >= 0.89);
}

TEST_CASE("resnet20 learns Fashion-MNIST (short run)", "[train][slow]") {
  const auto dir = fresh_dir("test-resnet20-short");
  const auto r = run_command(squall_bin() + " train --config " + SQUALL_SOURCE_DIR +
                             "/configs/fashion-mnist-resnet20.toml --set train.max_steps=250 --set "
                             "schedule.warmup_steps=50 --set data.test_samples=1000 --set run.dir=" + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto summary = read_json(dir + "/summary.json");
  CHECK(summary.at("steps") == 250);
  CHECK(summary.at("final").at("test_accuracy").get<double>() >= 0.70);
}

TEST_CASE("a run writes metrics.jsonl, summary.json and its resolved config", "[train]") {
  const auto dir = fresh_dir("test-outputs");
  const auto r = run_command(squall_bin() + " train --config " + k_lenet + " --set train.max_steps=60 --set " +
                             "schedule.warmup_steps=0 --set train.log_every_steps=20 --set data.test_samples=300 --set run.dir=" + dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("step 60/60") && Catch::Contains("samples/s"));

  std::ifstream lines(dir + "/metrics.jsonl");
  int train_lines = 0, eval_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto j = json::parse(line);
    if (j.at("kind") == "train") {
      ++train_lines;
      CHECK(std::isfinite(j.at("loss").get<double>()));
      CHECK(j.at("lr").get<double>() > 0);
    } else if (j.at("kind") == "eval") {
      ++eval_lines;
      CHECK(j.at("test_accuracy").get<double>() > 0.2);  // chance is 0.1
    }
  }
  CHECK(train_lines == 3);
  CHECK(eval_lines == 1);

  const auto s = read_json(dir + "/summary.json");
  for (const char* key : {"world_size", "nodes", "devices_per_rank", "replicas_per_device", "algorithm", "backend",
                          "global_batch", "epochs", "steps", "wall_s", "samples_per_s", "time_breakdown_s", "final",
                          "model_checksum"})
    CHECK(s.contains(key));
  CHECK(s.at("steps") == 60);
  CHECK(s.at("global_batch") == 64);
  CHECK(s.at("samples_per_s").get<double>() > 0);
  CHECK(s.at("time_breakdown_s").at("compute").get<double>() > 0);
  CHECK(s.at("model_checksum").get<std::string>().size() == 16);
  // LeNet-5's true parameter count (as PyTorch counts it), not the floats of its arena, whose
  // tensors each start on a 256-byte boundary (src/nn/param_arena.hpp).
  CHECK(s.at("parameters") == 61706);
  CHECK_THAT(r.out, Catch::Contains("(61706 parameters)"));
  CHECK(std::filesystem::exists(dir + "/config.toml"));

  // The same seed gives the same model, bit for bit; another seed does not.
  const auto dir2 = fresh_dir("test-outputs-again");
  const auto base = squall_bin() + " train --config " + k_lenet + " --set train.max_steps=60 --set data.test_samples=300" +
                    " --set schedule.warmup_steps=0";
  REQUIRE(run_command(base + " --set run.dir=" + dir2).exit_code == 0);
  CHECK(read_json(dir2 + "/summary.json").at("model_checksum") == s.at("model_checksum"));
  REQUIRE(run_command(base + " --set run.seed=2 --overwrite --set run.dir=" + dir2).exit_code == 0);
  CHECK(read_json(dir2 + "/summary.json").at("model_checksum") != s.at("model_checksum"));
}

TEST_CASE("a diverging run stops with the step number", "[train]") {
  const auto r = run_command(squall_bin() + " train --config " + k_lenet +
                             " --set optimizer.lr=1e6 --set schedule.warmup_steps=0 --set run.dir=" + fresh_dir("test-nan"));
  CHECK(r.exit_code == 1);
  // train.nonfinite = stop (the default) names the step, the rank, the learner and the layer.
  CHECK_THAT(r.err, Catch::Contains("training diverged") && Catch::Contains("at step") &&
                        Catch::Contains("rank 0 learner 0: ") &&
                        (Catch::Contains("the output of layer '") || Catch::Contains("the gradient of ")));
}

TEST_CASE("config mistakes exit 2 and name the key or file", "[train][config]") {
  const auto unknown = run_command(squall_bin() + " train --config " + k_lenet + " --set train.batchsize=3");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("train.batchsize"));

  const auto wrong_type = run_command(squall_bin() + " train --config " + k_lenet + " --set optimizer.lr=fast");
  CHECK(wrong_type.exit_code == 2);
  CHECK_THAT(wrong_type.err, Catch::Contains("optimizer.lr"));

  const auto missing = run_command(squall_bin() + " train --config /nonexistent/run.toml");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("/nonexistent/run.toml"));

  const auto model = run_command(squall_bin() + " train --config " + k_lenet + " --set model.name=vgg");
  CHECK(model.exit_code != 0);
  CHECK_THAT(model.err, Catch::Contains("vgg"));

  // A near miss: the key, the value, where it was set and the nearest model, not the file.
  const auto near = run_command(squall_bin() + " train --config " + k_lenet + " --set model.name=unet3");
  CHECK(near.exit_code == 2);
  CHECK_THAT(near.err, Catch::StartsWith("squall: error: --set model.name=unet3: model.name = \"unet3\"") &&
                           Catch::Contains("did you mean 'unet'?") && Catch::Contains("lenet5 | resnet20 | unet"));
  CHECK_THAT(near.err, !Catch::Contains(k_lenet));
}

TEST_CASE("train --overwrite keeps the earlier run until the new config has passed its checks", "[train][config]") {
  namespace fs = std::filesystem;
  const auto dir = fresh_dir("test-overwrite-checks");
  const auto base = squall_bin() + " train --config " + k_lenet + " --set train.max_steps=10" +
                    " --set schedule.warmup_steps=0 --set data.test_samples=100 --set run.dir=" + dir;
  const auto first = run_command(base);
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  const auto checksum = read_json(dir + "/summary.json").at("model_checksum");
  const auto checkpoints = [&] {
    int n = 0;
    if (fs::is_directory(dir + "/checkpoints"))
      for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) n += e.is_directory() ? 1 : 0;
    return n;
  };
  REQUIRE(checkpoints() > 0);

  // An unknown key, a bad value, and a value that only the data shows wrong (the sphere's
  // augmentation on Fashion-MNIST's samples, refused once the data is open): each exits 2
  // naming the key, and the earlier run stays as it was.
  for (const std::string bad : {"train.epochz=1", "optimizer.lr=fast", "data.augment_roll=true"}) {
    const auto r = run_command(base + " --overwrite --set " + bad);
    INFO(bad << ": " << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(bad.substr(0, bad.find('='))));
    CHECK_THAT(r.out + r.err, !Catch::Contains("removed the earlier run"));
    CHECK(fs::exists(dir + "/summary.json"));
    CHECK(fs::exists(dir + "/metrics.jsonl"));
    CHECK(checkpoints() > 0);
  }
  CHECK(read_json(dir + "/summary.json").at("model_checksum") == checksum);

  // A good config replaces it.
  const auto again = run_command(base + " --overwrite --set run.seed=2");
  INFO(again.out << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.out + again.err, Catch::Contains("--overwrite: removed the earlier run's outputs"));
  CHECK(read_json(dir + "/summary.json").at("model_checksum") != checksum);
}

TEST_CASE("a missing dataset names the path", "[train][data]") {
  const auto r = run_command(squall_bin() + " train --config " + k_lenet + " --set data.train=/nonexistent/fmnist");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("/nonexistent/fmnist"));
}

TEST_CASE("training from HDF5 shards matches training from the IDX files", "[train][io][slow]") {
  const auto shards = fresh_dir("test-fmnist-shards");
  const auto conv = run_command(squall_bin() + " data fashion-mnist --out " + shards + " --shards 5");
  INFO(conv.err);
  REQUIRE(conv.exit_code == 0);
  const auto base = squall_bin() + " train --config " + SQUALL_SOURCE_DIR +
                    "/configs/fashion-mnist-shards.toml --set train.epochs=2 --set run.dir=";
  const std::string from_shards_dir = fresh_dir("test-from-shards"), from_idx_dir = fresh_dir("test-from-idx");
  const auto from_shards = run_command(base + from_shards_dir + " --set data.train=" + shards +
                                       " --set data.test=" + shards);
  INFO(from_shards.err);
  REQUIRE(from_shards.exit_code == 0);
  const auto from_idx = run_command(base + from_idx_dir + " --set data.train=" + k_fmnist_dir +
                                    " --set data.test=" + k_fmnist_dir);
  REQUIRE(from_idx.exit_code == 0);
  const auto a = read_json(from_shards_dir + "/summary.json");
  const auto b = read_json(from_idx_dir + "/summary.json");
  CHECK(a.at("steps") == b.at("steps"));
  CHECK(a.at("skipped_samples") == 0);
  CHECK_THAT(a.at("data").get<std::string>(), Catch::Contains("shards"));
  // Same samples in the same order; the only difference is the normalisation constants
  // (exact statistics in the shards, 4-digit ones for IDX), so the runs agree closely.
  CHECK(a.at("final").at("test_accuracy").get<double>() >= 0.86);
  CHECK(std::abs(a.at("final").at("test_accuracy").get<double>() - b.at("final").at("test_accuracy").get<double>()) <= 0.01);
}

TEST_CASE("training on labels of one class warns once, naming the data and the class", "[train][data]") {
  // `squall data climate` writes fields whose labels are all 0 (background) until `squall data
  // label` finds their cyclones and rivers: unlabelled climate data.
  squall::test::TempDir tmp("squall-one-class");
  const std::string raw = tmp.file("raw"), labelled = tmp.file("labelled");
  for (const std::string command : {" data climate --out " + raw + " --samples 8 --height 16 --width 24",
                                    " data label --in " + raw + " --out " + labelled}) {
    const auto r = run_command(squall_bin() + command);
    INFO(command << ": " << r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
  const auto train = [&](const std::string& data, const std::string& run) {
    return run_command(squall_bin() + " train --config " + SQUALL_SOURCE_DIR + "/configs/climate-tiny.toml" +
                       " --set data.train=" + data + " --set data.test=" + data + " --set run.dir=" + tmp.file(run) +
                       " --set train.max_steps=3 --set train.batch_size=2 --set model.width=4 --set model.depth=2" +
                       " --set schedule.warmup_steps=0");
  };
  const auto one = train(raw, "one-class");
  INFO(one.out << one.err);
  REQUIRE(one.exit_code == 0);  // a warning, not an error: the run goes on
  const std::string warning = "data.train = " + raw + ": all 2304 labels of the first 3 training batches are " +
                              "class 0 (background), one class of 3";
  CHECK_THAT(one.err, Catch::Contains("squall: warning: ") && Catch::Contains(warning));
  CHECK(one.err.find(warning) == one.err.rfind(warning));  // once

  // Labelled, the fields hold cyclones and rivers: no warning; nor on Fashion-MNIST's ten classes.
  const auto normal = train(labelled, "labelled");
  INFO(normal.out << normal.err);
  REQUIRE(normal.exit_code == 0);
  CHECK_THAT(normal.err, !Catch::Contains("labels of the first"));
  const auto fm = run_command(squall_bin() + " train --config " + k_lenet + " --set train.max_steps=20" +
                              " --set schedule.warmup_steps=0 --set data.test_samples=64 --set run.dir=" + tmp.file("fm"));
  INFO(fm.out << fm.err);
  REQUIRE(fm.exit_code == 0);
  CHECK_THAT(fm.err, !Catch::Contains("labels of the first"));
}
