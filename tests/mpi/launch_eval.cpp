// `squall eval`: a checkpoint's central model on the test set, alone and under mpiexec, must
// reproduce the run's own final evaluation; broken checkpoints, missing ones and data that does
// not fit the model end with the right exit status and a message naming the thing.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
using squall::test::read_json;
using squall::test::read_records;
namespace fs = std::filesystem;

namespace {

const std::string k_fashion_mnist = "/usr/share/datasets/fashion-mnist";
const std::string k_lenet = std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml";
// The test samples the run evaluates on; eval is given the same ones.
const std::string k_same_samples = " --set data.test_samples=512";

// A small LeNet-5 run (about a second): checkpoints at steps 10, 20 and 30 (the last one at the
// end), and its summary.
class SmallRun {
 public:
  SmallRun() : m_tmp("squall-launch-eval") {
    dir = m_tmp.file("run");
    const auto r = run_command(squall_bin() + " train --config " + k_lenet + " --set run.dir=" + dir +
                               " --set train.max_steps=30 --set schedule.warmup_steps=0" +
                               " --set checkpoint.every_steps=10" +
                               " --set data.train_samples=4096" + k_same_samples);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    summary = read_json(dir + "/summary.json");
  }
  std::string checkpoint(int step) const {
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08d", step);
    return dir + "/checkpoints/" + name;
  }
  std::string scratch(const std::string& name) const { return m_tmp.file(name); }

  std::string dir;
  json summary;

 private:
  TempDir m_tmp;
};

squall::test::ProcessResult eval(const std::string& args, int ranks = 1) {
  return run_command((ranks > 1 ? mpiexec(ranks) + " " : std::string()) + squall_bin() + " eval " + args);
}

json eval_json(const std::string& args, int ranks = 1) {
  const auto r = eval(args + " --json", ranks);
  INFO(args << "\n" << r.out << r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

// Cuts a file to half its size: an HDF5 file whose end is missing, as a full disk leaves it.
void truncate_half(const std::string& path) {
  REQUIRE(fs::exists(path));
  fs::resize_file(path, fs::file_size(path) / 2);
}

bool have_data() { return fs::exists(k_fashion_mnist + "/t10k-images-idx3-ubyte.gz"); }

}  // namespace

TEST_CASE("eval --run reproduces the run's final test loss and accuracy", "[launch][eval]") {
  if (!have_data()) SQUALL_SKIP(k_fashion_mnist << " missing (install dataset-fashion-mnist)");
  const SmallRun run;
  const json e = eval_json("--run " + run.dir + k_same_samples);
  const json& final = run.summary.at("final");
  INFO(e.dump() << "\n" << final.dump());
  CHECK(e.at("step") == 30);
  CHECK(e.at("model") == "lenet5");
  CHECK(e.at("samples") == 512);
  CHECK(e.at("world_size") == 1);
  CHECK(fs::path(e.at("checkpoint").get<std::string>()) == fs::path(run.checkpoint(30)));
  CHECK(e.at("test_accuracy").get<double>() == final.at("test_accuracy").get<double>());
  CHECK(std::abs(e.at("test_loss").get<double>() - final.at("test_loss").get<double>()) <= 1e-6);
  CHECK(e.at("test_miou").get<double>() > 0);
  CHECK(e.at("eval_s").get<double>() >= 0);
  CHECK_FALSE(e.contains("test_iou_per_class"));  // classification: no per-class IoU

  // The line a person reads.
  const auto text = eval("--run " + run.dir + k_same_samples);
  INFO(text.out << text.err);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::StartsWith("eval step-00000030 (lenet5, step 30) on Fashion-MNIST test") &&
                           Catch::Contains(": 512 samples, loss ") && Catch::Contains(", accuracy ") &&
                           Catch::Contains(", mIoU "));
}

TEST_CASE("eval on 2 ranks splits the test samples and sums them to the run's numbers", "[launch][eval]") {
  if (!have_data()) SQUALL_SKIP(k_fashion_mnist << " missing (install dataset-fashion-mnist)");
  const SmallRun run;  // trained on one rank: the checkpoint's world size differs, which eval accepts
  const json& final = run.summary.at("final");
  for (int ranks : {2, 3}) {  // 3: ranges that end inside a batch
    const json e = eval_json("--run " + run.dir + k_same_samples, ranks);
    INFO(ranks << " ranks: " << e.dump() << "\n" << final.dump());
    CHECK(e.at("world_size") == ranks);
    CHECK(e.at("samples") == 512);
    CHECK(e.at("step") == 30);
    CHECK(e.at("test_accuracy").get<double>() == final.at("test_accuracy").get<double>());
    CHECK(std::abs(e.at("test_loss").get<double>() - final.at("test_loss").get<double>()) <= 1e-6);
  }
}

TEST_CASE("eval --checkpoint takes an earlier step's folder, or a model.h5", "[launch][eval]") {
  if (!have_data()) SQUALL_SKIP(k_fashion_mnist << " missing (install dataset-fashion-mnist)");
  const SmallRun run;
  const json final = eval_json("--checkpoint " + run.checkpoint(30) + "/model.h5" + k_same_samples);
  CHECK(final.at("step") == 30);
  CHECK(final.at("test_accuracy").get<double>() == run.summary.at("final").at("test_accuracy").get<double>());
  const json early = eval_json("--checkpoint " + run.checkpoint(10) + k_same_samples);
  INFO(early.dump() << "\n" << final.dump());
  CHECK(early.at("step") == 10);
  CHECK(fs::path(early.at("checkpoint").get<std::string>()) == fs::path(run.checkpoint(10)));
  // 10 steps of warm-up against 30: another model, other numbers.
  CHECK(early.at("test_accuracy").get<double>() != final.at("test_accuracy").get<double>());
  CHECK(early.at("test_loss").get<double>() != final.at("test_loss").get<double>());
  // --set reaches the checkpoint's config: fewer samples.
  const json few = eval_json("--checkpoint " + run.checkpoint(10) + " --set data.test_samples=100");
  CHECK(few.at("samples") == 100);
}

TEST_CASE("eval refuses a missing checkpoint, a run without one, and neither or both of --checkpoint and --run",
          "[launch][eval]") {
  TempDir tmp("squall-launch-eval-usage");
  {
    const auto r = eval("--checkpoint " + tmp.file("no-such-step"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(tmp.file("no-such-step")) && Catch::Contains("no such file or folder"));
  }
  {  // a run dir without checkpoints (an empty one, as a run killed before its first)
    fs::create_directories(tmp.path / "empty-run");
    const auto r = eval("--run " + tmp.file("empty-run"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(tmp.file("empty-run")) && Catch::Contains("no checkpoint"));
    const auto as_checkpoint = eval("--checkpoint " + tmp.file("empty-run"));
    CHECK(as_checkpoint.exit_code == 2);
    CHECK_THAT(as_checkpoint.err, Catch::Contains(tmp.file("empty-run")) && Catch::Contains("model.h5"));
  }
  {
    const auto r = eval("--run " + tmp.file("no-such-run"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(tmp.file("no-such-run")));
  }
  {
    const auto neither = eval("--json");
    CHECK(neither.exit_code == 2);
    CHECK_THAT(neither.err, Catch::Contains("--checkpoint") && Catch::Contains("--run"));
    const auto both = eval("--checkpoint " + tmp.file("a") + " --run " + tmp.file("b"));
    CHECK(both.exit_code == 2);
    CHECK_THAT(both.err, Catch::Contains("not both"));
  }
  {  // the same refusal from every rank of a job, without a hang
    const auto r = eval("--run " + tmp.file("empty-run"), 2);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("no checkpoint"));
  }
}

TEST_CASE("eval of a truncated model.h5 fails naming it, and --run falls back to the previous checkpoint", "[launch][eval]") {
  if (!have_data()) SQUALL_SKIP(k_fashion_mnist << " missing (install dataset-fashion-mnist)");
  const SmallRun run;
  // A copy of the run whose newest checkpoint lost the end of its model.h5.
  const std::string copy = run.scratch("copy");
  fs::copy(run.dir, copy, fs::copy_options::recursive);
  const std::string bad = copy + "/checkpoints/step-00000030/model.h5";
  truncate_half(bad);
  {
    const auto r = eval("--checkpoint " + copy + "/checkpoints/step-00000030");
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(bad));
  }
  {  // the same on 2 ranks: rank 0 reads, every rank ends alike
    const auto r = eval("--checkpoint " + bad, 2);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(bad));
  }
  {
    const auto r = eval("--run " + copy + " --json" + k_same_samples);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(json::parse(r.out).at("step") == 20);
    CHECK_THAT(r.err, Catch::Contains("step-00000030") && Catch::Contains("not usable"));
  }
  {  // every checkpoint broken: each one is named
    truncate_half(copy + "/checkpoints/step-00000020/model.h5");
    truncate_half(copy + "/checkpoints/step-00000010/model.h5");
    const auto r = eval("--run " + copy);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("no usable checkpoint") && Catch::Contains("step-00000010") &&
                          Catch::Contains("step-00000020") && Catch::Contains("step-00000030"));
  }
}

TEST_CASE("eval on data that does not fit the model is a usage error naming both", "[launch][eval]") {
  if (!have_data()) SQUALL_SKIP(k_fashion_mnist << " missing (install dataset-fashion-mnist)");
  const SmallRun run;
  const std::string climate = run.scratch("climate");
  const auto gen = run_command(squall_bin() + " data climate --out " + climate + " --samples 4 --height 16 --width 16");
  INFO(gen.out << gen.err);
  REQUIRE(gen.exit_code == 0);
  for (int ranks : {1, 2}) {
    const auto r = eval("--checkpoint " + run.checkpoint(30) + " --data " + climate, ranks);
    INFO(ranks << " rank(s): " << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(climate) && Catch::Contains(run.checkpoint(30)) &&
                          Catch::Contains("does not fit") && Catch::Contains("16 x 16 x 16") &&
                          Catch::Contains("1 x 28 x 28"));
  }
  {  // a bad override is the user's to fix too, naming the key
    const auto r = eval("--checkpoint " + run.checkpoint(30) + " --set data.test_samples=-1");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("data.test_samples"));
  }
  {
    const auto r = eval("--checkpoint " + run.checkpoint(30) + " --data " + run.scratch("nowhere"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--data") && Catch::Contains(run.scratch("nowhere")));
  }
}

TEST_CASE("eval of a segmentation checkpoint reports the IoU of each class, as the run did", "[launch][eval][climate]") {
  TempDir tmp("squall-launch-eval-climate");
  const std::string raw = tmp.file("raw"), labelled = tmp.file("labelled"), dir = tmp.file("run");
  const auto gen = run_command(squall_bin() + " data climate --out " + raw + " --samples 4 --height 16 --width 24 --seed 3");
  INFO(gen.out << gen.err);
  REQUIRE(gen.exit_code == 0);
  const auto label = run_command(squall_bin() + " data label --in " + raw + " --out " + labelled);
  INFO(label.out << label.err);
  REQUIRE(label.exit_code == 0);
  const auto train = run_command(squall_bin() + " train --config " + k_lenet + " --set model.name=unet" +
                                 " --set model.width=4 --set model.depth=2 --set train.batch_size=2" +
                                 " --set train.max_steps=4 --set schedule.warmup_steps=0 --set data.train=" + labelled +
                                 " --set data.test=" + labelled + " --set run.dir=" + dir);
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const json final = read_json(dir + "/summary.json").at("final");
  for (int ranks : {1, 3}) {  // 3 ranks: 1, 1 and 2 of the 4 samples
    const json e = eval_json("--run " + dir, ranks);
    INFO(ranks << " rank(s): " << e.dump() << "\n" << final.dump());
    CHECK(e.at("model") == "unet");
    CHECK(e.at("samples") == 4);
    CHECK(e.at("test_miou").get<double>() == final.at("test_miou").get<double>());
    CHECK(e.at("test_iou_per_class") == final.at("test_iou_per_class"));
    CHECK(std::abs(e.at("test_loss").get<double>() - final.at("test_loss").get<double>()) <= 1e-6);
  }
  const auto text = eval("--run " + dir);
  INFO(text.out << text.err);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("IoU per class: background ") && Catch::Contains("atmospheric river "));
}
