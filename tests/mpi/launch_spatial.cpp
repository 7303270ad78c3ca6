// parallel.spatial under a real mpiexec (docs/training.md, "One sample across ranks"): the
// climate U-Net with each sample split over a group of ranks trains as the unsplit job does
// (ssgd, sma, local-sgd and outer across groups), resumes bit for bit on its own split and
// elastically on another split or number of groups (the epoch goes on where it stood, the
// change recorded), and refuses what it cannot do before training, naming the keys.
//
// Tolerance: a split sums the same terms in another order (each tile's share of the weight
// gradients, batch norm's statistics merged over the tiles, the loss's weights), so losses
// agree to float rounding, not bit for bit; 1e-5 relative is 100 times that rounding over these
// few steps and 1000 times smaller than one step's change of the loss. The same split run twice
// (a resume) is bit for bit.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::output_tail;
using squall::test::read_json;
using squall::test::read_records;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string k_configs = std::string(SQUALL_SOURCE_DIR) + "/configs/";

// 8 generated climate samples of 96 x 144, TECA-style labels: made once per test process.
const std::string& climate_data() {
  static TempDir dir("squall-spatial-data");
  static const std::string labelled = [] {
    const std::string raw = dir.file("raw"), out = dir.file("labelled");
    const auto gen = run_command(squall_bin() + " data climate --out " + raw +
                                 " --samples 8 --height 96 --width 144 --seed 3");
    REQUIRE(gen.exit_code == 0);
    const auto label = run_command(squall_bin() + " data label --in " + raw + " --out " + out);
    REQUIRE(label.exit_code == 0);
    return out;
  }();
  return labelled;
}

// The U-Net (width 8, depth 3: 96 rows cut on multiples of 8) on `ranks` ranks, one thread each.
std::string unet_job(int ranks, const std::string& dir, const std::string& extra) {
  const std::string data = climate_data();
  return mpiexec(ranks) + " " + squall_bin() + " train --config " + k_configs +
         "fashion-mnist-lenet5.toml --set model.name=unet --set model.width=8 --set model.depth=3"
         " --set train.batch_size=2 --set train.max_steps=6 --set schedule.warmup_steps=0"
         " --set train.log_every_steps=1 --set run.threads=1 --set data.train=" + data + " --set data.test=" + data +
         " --set data.test_samples=4 --set run.dir=" + dir + " " + extra;
}

std::vector<double> train_losses(const std::string& dir) {
  std::vector<double> out;
  for (const json& j : read_records(fs::path(dir) / "metrics.jsonl", "train")) out.push_back(j.at("loss").get<double>());
  return out;
}

std::vector<double> eval_losses(const std::string& dir) {
  std::vector<double> out;
  for (const json& j : read_records(fs::path(dir) / "metrics.jsonl", "eval")) out.push_back(j.at("test_loss").get<double>());
  return out;
}

void check_close(const std::vector<double>& a, const std::vector<double>& b, double tol = 1e-5) {
  REQUIRE(a.size() == b.size());
  REQUIRE_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("record " << i << ": " << a[i] << " vs " << b[i]);
    CHECK(std::abs(a[i] - b[i]) <= tol * std::max(1.0, std::abs(b[i])));
  }
}

void run_ok(const std::string& command) {
  const auto r = run_command(command);
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
}

}  // namespace

TEST_CASE("one sample split over 2 and 4 ranks trains as one rank does", "[launch][spatial]") {
  TempDir t("squall-spatial");
  const std::string whole = t.file("whole"), rows = t.file("rows"), both = t.file("both"), async = t.file("async");
  run_ok(unet_job(1, whole, ""));
  const auto r = run_command(unet_job(2, rows, "--set parallel.spatial=[2,1]"));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("parallel.spatial = [2, 1]: 1 group(s) of 2 ranks") &&
                        Contains("rows [0, 48) x columns [0, 144)"));
  run_ok(unet_job(4, both, "--set parallel.spatial=[2,2]"));
  // Asynchronous CPU streams: the layers' halos and sums run on each stream's worker thread,
  // the loss's and the evaluation's on the host's, which must wait for the stream first.
  run_ok(unet_job(2, async, "--set parallel.spatial=[2,1] --set run.cpu_streams=async"));
  for (const std::string& split : {rows, both, async}) {
    INFO(split);
    check_close(train_losses(split), train_losses(whole));
    check_close(eval_losses(split), eval_losses(whole));
  }
  // The split and its halos in summary.json: exchanges made, bytes sent, time hidden.
  const json s = read_json(fs::path(rows) / "summary.json");
  const json& sp = s.at("parallel").at("spatial");
  CHECK(sp.at("rows") == 2);
  CHECK(sp.at("cols") == 1);
  CHECK(sp.at("tile") == json::array({48, 144}));
  CHECK(sp.at("halo").at("exchanges").get<int64_t>() > 0);
  CHECK(sp.at("halo").at("bytes").get<double>() > 0);
  CHECK(sp.at("halo").at("hidden_s").get<double>() >= 0);
  CHECK(sp.at("halo").at("exchange") == "host");  // a CPU job: auto is host memory
  CHECK_FALSE(read_json(fs::path(whole) / "summary.json").at("parallel").contains("spatial"));
}

TEST_CASE("DeepLabv3+ on a wrapped globe split over 4 ranks trains as one rank does", "[launch][spatial]") {
  // Output stride 8: 12 x 18 features for the ASPP. [4, 1] gives tiles of 3 rows, so the
  // dilation-18 branch takes its halos from the tiles beyond the next; [2, 2] splits the
  // wrapped columns, so the western tile's western halo is the eastern one's east.
  // The first step's loss (before any update) within 1e-5; later losses within 1e-2: the
  // edges' own plans (no padding) round differently from the unsplit plan's, a ReLU mask
  // flips where a value lies within that rounding of zero, and the updates carry the
  // difference on (measured: 1.3e-3 after 6 steps, the same under both splits, whose unpadded
  // plans round alike; tests/unit/test_spatial.cpp holds each layer to 1e-5).
  TempDir t("squall-spatial-deeplab");
  const std::string deeplab = "--set model.name=deeplabv3plus --set model.width=8 --set model.depth=0 "
                              "--set model.padding=periodic_longitude";
  const std::string whole = t.file("whole"), rows = t.file("rows"), both = t.file("both");
  run_ok(unet_job(1, whole, deeplab));
  run_ok(unet_job(4, rows, deeplab + " --set parallel.spatial=[4,1]"));
  run_ok(unet_job(4, both, deeplab + " --set parallel.spatial=[2,2]"));
  for (const std::string& split : {rows, both}) {
    INFO(split);
    const std::vector<double> got = train_losses(split), want = train_losses(whole);
    REQUIRE(got.size() == 6);
    check_close({got[0]}, {want[0]}, 1e-5);
    check_close(got, want, 1e-2);
    check_close(eval_losses(split), eval_losses(whole), 1e-2);
  }
  // ONNX cannot express the wrapped edges: export refuses rather than write a model with a seam.
  const auto exported = run_command(squall_bin() + " export --run " + whole + " --format onnx --out " +
                                    t.file("wrapped.onnx"));
  if (exported.err.find("without ONNX export") == std::string::npos) {
    CHECK(exported.exit_code != 0);
    CHECK_THAT(exported.err, Contains("periodic_longitude") && Contains("ONNX"));
    CHECK_FALSE(fs::exists(t.file("wrapped.onnx")));
  }
}

TEST_CASE("groups of a split sample are data parallel under ssgd, sma, local-sgd and outer", "[launch][spatial]") {
  for (const std::string algorithm : {"ssgd", "sma", "local-sgd", "outer"}) {
    INFO(algorithm);
    TempDir t("squall-spatial-groups");
    const std::string plain = t.file("plain"), split = t.file("split");
    std::string extra = "--set parallel.algorithm=" + algorithm;
    if (algorithm == "sma" || algorithm == "local-sgd") extra += " --set parallel.period=2";
    if (algorithm == "outer") extra += " --set parallel.outer.period=2";
    // 2 unsplit ranks against 2 groups of 2 ranks: the same samples, the same learners.
    run_ok(unet_job(2, plain, extra));
    run_ok(unet_job(4, split, extra + " --set parallel.spatial=[2,1]"));
    check_close(train_losses(split), train_losses(plain));
    check_close(eval_losses(split), eval_losses(plain));
    CHECK(read_json(fs::path(split) / "summary.json").at("parallel").at("spatial").at("groups") == 2);
  }
}

TEST_CASE("a split run resumes on its split bit for bit", "[launch][spatial][checkpoint]") {
  for (const std::string algorithm : {"ssgd", "sma"}) {
    INFO(algorithm);
    TempDir t("squall-spatial-resume");
    const std::string whole = t.file("whole"), crashed = t.file("crashed");
    const std::string extra = "--set parallel.spatial=[2,1] --set checkpoint.every_steps=2 --set parallel.algorithm=" +
                              algorithm + (algorithm == "sma" ? " --set parallel.period=2" : "");
    run_ok(unet_job(4, whole, extra));
    const auto crash = run_command("SQUALL_FAIL_AT=1:4 " + unet_job(4, crashed, extra));
    REQUIRE(crash.exit_code != 0);
    const auto resumed = run_command(unet_job(4, crashed, extra + " --resume auto"));
    INFO(output_tail(resumed));
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.out, Contains("resuming from") && Contains("step-00000002"));
    CHECK(train_losses(crashed) == train_losses(whole));
    CHECK(read_json(fs::path(crashed) / "summary.json").at("model_checksum") ==
          read_json(fs::path(whole) / "summary.json").at("model_checksum"));
  }
}

namespace {

// The resume record of a run dir's metrics.jsonl (null when there is none).
json resume_record(const std::string& dir) {
  const std::vector<json> r = read_records(fs::path(dir) / "metrics.jsonl", "resume");
  return r.empty() ? json() : r.back();
}

// "with parallel.spatial = [2, 1]", as the log says a split.
std::string split_words(const std::vector<int64_t>& s) {
  return "with parallel.spatial = [" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + "]";
}

}  // namespace

TEST_CASE("a split run resumes on another split and another number of groups, and an unsplit one on a split",
          "[launch][spatial][checkpoint][elastic]") {
  TempDir t("squall-spatial-resplit");
  // 8 steps, a checkpoint every 3, the job killed as it starts step 5: the runs resume step 3's.
  const std::string steps = "--set train.max_steps=8 --set checkpoint.every_steps=3 ";
  struct Case {
    std::string name;
    int from_ranks;
    std::string from_split;            // parallel.spatial of the checkpoint's job
    int ranks;
    std::string split;                 // ... and of the resumed one
    std::vector<int64_t> from_spatial, spatial;
    int64_t from_batch, batch;         // per learner (elastic.batch = global keeps the global batch)
    int64_t epoch, position;           // where step 3 left the run: its epoch (from 1), and its sample
  };
  // 8 samples: one group, 2 samples a step, has read 6 of epoch 1 in 3 steps; two groups, 4
  // samples a step, have read epoch 1 and 4 of epoch 2.
  const Case cases[] = {
      {"[2,1] on [1,1]", 2, "[2,1]", 1, "[1,1]", {2, 1}, {1, 1}, 2, 2, 1, 6},
      {"[2,1] on [4,1]", 2, "[2,1]", 4, "[4,1]", {2, 1}, {4, 1}, 2, 2, 1, 6},
      {"[2,1] on [2,2]", 2, "[2,1]", 4, "[2,2]", {2, 1}, {2, 2}, 2, 2, 1, 6},
      {"2 groups of [2,1] on 1 of [4,1]", 4, "[2,1]", 4, "[4,1]", {2, 1}, {4, 1}, 2, 4, 2, 4},
      {"[1,1] on [2,1]", 1, "[1,1]", 2, "[2,1]", {1, 1}, {2, 1}, 2, 2, 1, 6},
  };
  std::map<std::pair<int, std::string>, std::string> crashed;  // the checkpoint's job: its run dir
  std::map<std::pair<int, std::string>, std::string> whole;    // ... and the same job run through
  for (const Case& c : cases) {
    INFO(c.name);
    const auto key = std::make_pair(c.from_ranks, c.from_split);
    const std::string from = "--set parallel.spatial=" + c.from_split + " ";
    if (!crashed.count(key)) {
      const std::string tag = std::to_string(c.from_ranks) + "-" + std::to_string(crashed.size());
      whole[key] = t.file("whole-" + tag);
      crashed[key] = t.file("crashed-" + tag);
      run_ok(unet_job(c.from_ranks, whole[key], steps + from));
      const auto crash = run_command("SQUALL_FAIL_AT=0:5 " + unet_job(c.from_ranks, crashed[key], steps + from));
      REQUIRE(crash.exit_code != 0);
      REQUIRE(fs::exists(fs::path(crashed[key]) / "checkpoints/step-00000003/model.h5"));
    }
    const std::vector<std::pair<int64_t, double>> before = squall::test::train_losses(crashed[key]);
    REQUIRE(before.size() >= 3);
    REQUIRE(before[2].first == 3);
    const double loss_at_3 = before[2].second;

    const std::string dir = t.file("resumed-" + std::to_string(&c - cases));
    fs::copy(crashed[key], dir, fs::copy_options::recursive);
    const auto r = run_command(unet_job(c.ranks, dir, steps + "--set parallel.spatial=" + c.split + " --resume auto"));
    INFO(output_tail(r));
    REQUIRE(r.exit_code == 0);
    // The log says both shapes, each split with its groups.
    CHECK_THAT(r.out, Contains("resuming step 3 of a job of " + std::to_string(c.from_ranks) + " rank(s)") &&
                          Contains(split_words(c.from_spatial)) && Contains(split_words(c.spatial)) &&
                          Contains("epoch " + std::to_string(c.epoch) + " goes on at sample " +
                                   std::to_string(c.position) + " of its 8"));
    // Training went on from step 3, not from 0: the resumed records are steps 4 to 8.
    const std::vector<std::pair<int64_t, double>> after = squall::test::train_losses(dir);
    REQUIRE(after.size() == 8);
    for (size_t i = 0; i < after.size(); ++i) CHECK(after[i].first == static_cast<int64_t>(i) + 1);
    CHECK(std::isfinite(after[3].second));
    CHECK(std::abs(after[3].second - loss_at_3) < 0.25 * loss_at_3);
    // As many groups at the same batch read the same lists: the run is the one it would have
    // been on its first split, to a split's float rounding.
    if (c.from_batch == c.batch) check_close(train_losses(dir), train_losses(whole[key]));
    // summary.json and the resume record carry the change of split, and where the epoch stood.
    const json s = read_json(fs::path(dir) / "summary.json");
    CHECK(s.at("steps") == 8);
    CHECK(s.at("run").at("samples") == 8 * 2 * c.from_ranks / (c.from_spatial[0] * c.from_spatial[1]));
    const json& change = s.at("attempt").at("shape_change");
    REQUIRE(change.is_object());
    CHECK(change.at("step") == 3);
    CHECK(change.at("from").at("ranks") == c.from_ranks);
    CHECK(change.at("to").at("ranks") == c.ranks);
    CHECK(change.at("from").at("spatial") == json(c.from_spatial));
    CHECK(change.at("to").at("spatial") == json(c.spatial));
    CHECK(change.at("from").at("learner_batch") == c.from_batch);
    CHECK(change.at("to").at("learner_batch") == c.batch);
    CHECK(change.at("from").at("global_batch") == change.at("to").at("global_batch"));
    CHECK(change.at("epoch") == c.epoch);
    CHECK(change.at("epoch_position") == c.position);
    CHECK(resume_record(dir).value("shape_change", json()) == change);
  }
}

namespace {

// A checkpoint of `algorithm`, whose replicas are saved per rank, of one group of [2, 1] (2
// ranks) and of two (4 ranks), resumed on [1, 1], [4, 1] and [2, 2]: each group of the resumed
// job takes the replicas and optimizer state of the checkpoint's group of its number (every
// rank of a group holds the same), a group the checkpoint's job lacked starts from the centre,
// and one it had beyond this job's is dropped. Where the number of groups is kept, the run is
// the one it would have been on its first split, to a split's float rounding: a group that
// took another group's replicas, or the centre's, would not be. outer's nodes do not mix: one
// group on a node resumed as two there is refused.
void resume_parts_on_other_splits(const std::string& algorithm) {
  TempDir t("squall-spatial-parts");
  // 8 steps, a checkpoint every 3, the job killed as it starts step 5: the runs resume step 3's,
  // which is between two synchronisations (every 2 steps): the replicas differ from the centre.
  const std::string steps = "--set train.max_steps=8 --set checkpoint.every_steps=3 --set parallel.algorithm=" +
                            algorithm + (algorithm == "outer" ? " --set parallel.outer.period=2"
                                                              : " --set parallel.period=2") + " ";
  std::map<int, std::string> whole, crashed;  // by the checkpoint's ranks (2: one group, 4: two)
  for (const int ranks : {2, 4}) {
    whole[ranks] = t.file("whole-" + std::to_string(ranks));
    crashed[ranks] = t.file("crashed-" + std::to_string(ranks));
    const std::string job = steps + "--set parallel.spatial=[2,1]";
    run_ok(unet_job(ranks, whole[ranks], job));
    const auto crash = run_command("SQUALL_FAIL_AT=0:5 " + unet_job(ranks, crashed[ranks], job));
    REQUIRE(crash.exit_code != 0);
    // The replicas are saved per rank: a node file beside model.h5.
    REQUIRE(fs::exists(fs::path(crashed[ranks]) / "checkpoints/step-00000003/node-00000.h5"));
  }
  struct Case {
    int from_ranks, ranks;
    std::vector<int64_t> spatial;
    int64_t epoch, position;  // where step 3 left the run: one group read 6 samples of epoch 1,
                              // two groups epoch 1 and 4 of epoch 2
  };
  const Case cases[] = {
      {2, 1, {1, 1}, 1, 6}, {2, 4, {4, 1}, 1, 6}, {2, 4, {2, 2}, 1, 6},
      {4, 2, {1, 1}, 2, 4}, {4, 4, {4, 1}, 2, 4}, {4, 4, {2, 2}, 2, 4},
  };
  for (const Case& c : cases) {
    const std::string split = "[" + std::to_string(c.spatial[0]) + "," + std::to_string(c.spatial[1]) + "]";
    const int64_t from_groups = c.from_ranks / 2, groups = c.ranks / (c.spatial[0] * c.spatial[1]);
    INFO(algorithm << ": " << from_groups << " group(s) of [2,1] resumed on " << c.ranks << " rank(s) of " << split);
    const double loss_at_3 = squall::test::train_losses(crashed[c.from_ranks]).at(2).second;
    const std::string dir = t.file("resumed-" + std::to_string(&c - cases));
    fs::copy(crashed[c.from_ranks], dir, fs::copy_options::recursive);
    const auto r = run_command(unet_job(c.ranks, dir, steps + "--set parallel.spatial=" + split + " --resume auto"));
    INFO(output_tail(r));
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("resuming step 3 of a job of " + std::to_string(c.from_ranks) + " rank(s)") &&
                          Contains(split_words({2, 1})) && Contains(split_words(c.spatial)) &&
                          Contains("epoch " + std::to_string(c.epoch) + " goes on at sample " +
                                   std::to_string(c.position) + " of its 8"));
    if (groups < from_groups) CHECK_THAT(r.out, Contains("the replicas of group 1 are dropped"));
    // Training went on from step 3: the resumed records are steps 4 to 8, the first within a
    // quarter of the loss before the stop.
    const std::vector<std::pair<int64_t, double>> after = squall::test::train_losses(dir);
    REQUIRE(after.size() == 8);
    for (size_t i = 0; i < after.size(); ++i) CHECK(after[i].first == static_cast<int64_t>(i) + 1);
    CHECK(std::isfinite(after[3].second));
    CHECK(std::abs(after[3].second - loss_at_3) < 0.25 * loss_at_3);
    if (groups == from_groups) {
      check_close(train_losses(dir), train_losses(whole[c.from_ranks]));
      check_close(eval_losses(dir), eval_losses(whole[c.from_ranks]));
    }
    // The change of split, in summary.json and the resume record.
    const json s = read_json(fs::path(dir) / "summary.json");
    CHECK(s.at("steps") == 8);
    const json& change = s.at("attempt").at("shape_change");
    REQUIRE(change.is_object());
    CHECK(change.at("step") == 3);
    CHECK(change.at("from").at("ranks") == c.from_ranks);
    CHECK(change.at("to").at("ranks") == c.ranks);
    CHECK(change.at("from").at("spatial") == json::array({2, 1}));
    CHECK(change.at("to").at("spatial") == json(c.spatial));
    CHECK(change.at("epoch") == c.epoch);
    CHECK(change.at("epoch_position") == c.position);
    CHECK(resume_record(dir).value("shape_change", json()) == change);
  }
  // One group resumed as two on one node: sma's and local-sgd's new group starts from the
  // centre; outer's node would hold the checkpoint's node model and a new one: refused.
  const std::string dir = t.file("more-groups");
  fs::copy(crashed[2], dir, fs::copy_options::recursive);
  const auto more = run_command(unet_job(4, dir, steps + "--set parallel.spatial=[2,1] --resume auto"));
  INFO(output_tail(more));
  if (algorithm == "outer") {
    CHECK(more.exit_code == 2);
    CHECK_THAT(more.err, Contains("step-00000003") && Contains("model per node (outer)") &&
                             Contains("would mix the groups of its nodes") && Contains("(1 per node)"));
    return;
  }
  REQUIRE(more.exit_code == 0);
  CHECK_THAT(more.out, Contains("group 1 starts its replicas from the central model"));
  const std::vector<std::pair<int64_t, double>> after = squall::test::train_losses(dir);
  REQUIRE(after.size() == 8);
  const double loss_at_3 = squall::test::train_losses(crashed[2]).at(2).second;
  CHECK(std::abs(after[3].second - loss_at_3) < 0.25 * loss_at_3);
  CHECK(read_json(fs::path(dir) / "summary.json").at("attempt").at("shape_change").at("to").at("ranks") == 4);
}

}  // namespace

TEST_CASE("sma's replicas saved per rank resume on another split and another number of groups",
          "[launch][spatial][checkpoint][elastic]") {
  resume_parts_on_other_splits("sma");
}

TEST_CASE("local-sgd's replicas saved per rank resume on another split and another number of groups",
          "[launch][spatial][checkpoint][elastic]") {
  resume_parts_on_other_splits("local-sgd");
}

TEST_CASE("outer's node models saved per rank resume on another split and another number of groups",
          "[launch][spatial][checkpoint][elastic]") {
  resume_parts_on_other_splits("outer");
}

TEST_CASE("a split the job or the model cannot take is refused before training, naming the key",
          "[launch][spatial][bad-input]") {
  TempDir t("squall-spatial-bad");
  // A world size the groups do not divide.
  const auto odd = run_command(unet_job(3, t.file("odd"), "--set parallel.spatial=[2,1]"));
  CHECK(odd.exit_code != 0);
  CHECK_THAT(odd.err, Contains("parallel.spatial = [2, 1]") && Contains("3 ranks, not a multiple of 2"));
  CHECK_FALSE(fs::exists(fs::path(t.file("odd")) / "metrics.jsonl"));
  // Several learners per rank: both keys named.
  const auto learners = run_command(unet_job(2, t.file("learners"), "--set parallel.spatial=[2,1] "
                                                                  "--set parallel.replicas_per_device=2"));
  CHECK(learners.exit_code == 2);
  CHECK_THAT(learners.err, Contains("parallel.spatial") && Contains("parallel.replicas_per_device = 2"));
  // A node level of sma's averages: both keys.
  const auto periods = run_command(unet_job(2, t.file("periods"), "--set parallel.spatial=[2,1] "
                                                                 "--set parallel.algorithm=sma --set parallel.periods=[1,2]"));
  CHECK(periods.exit_code == 2);
  CHECK_THAT(periods.err, Contains("parallel.spatial = [2, 1]") && Contains("parallel.periods = [1, 2]"));
  // A model with a padded max pooling (no tile form yet): the layer, and no split that works.
  const auto resnet = run_command(unet_job(2, t.file("resnet"), "--set model.name=deeplabv3plus-resnet50 "
                                                                "--set model.width=0 --set model.depth=0 "
                                                                "--set parallel.spatial=[2,1]"));
  CHECK(resnet.exit_code != 0);
  CHECK_THAT(resnet.err, Contains("parallel.spatial = [2, 1] cannot split") && Contains("stem.pool") &&
                             Contains("no split within it works"));
  // Halos in GPU memory asked of a CPU job: the key, the backend and the ways out.
  const auto nccl = run_command(unet_job(2, t.file("nccl"), "--set parallel.spatial=[2,1] "
                                                            "--set parallel.halo_exchange=nccl"));
  CHECK(nccl.exit_code == 2);
  CHECK_THAT(nccl.err, Contains("parallel.halo_exchange = nccl exchanges GPU memory") && Contains("cpu backend") &&
                           Contains("parallel.halo_exchange = auto or host"));
  // A classifier's data: one label per sample.
  const auto lenet = run_command(mpiexec(2) + " " + squall_bin() + " train --config " + k_configs +
                                 "fashion-mnist-lenet5.toml --set train.max_steps=2 --set schedule.warmup_steps=0"
                                 " --set parallel.spatial=[2,1] --set run.dir=" + t.file("lenet"));
  CHECK(lenet.exit_code != 0);
  CHECK_THAT(lenet.err, Contains("one label per sample"));
}

namespace {

// The bytes of "a rank needs 5.0 GiB to train" in a memory refusal.
double stated_need(const std::string& err) {
  const std::string key = "a rank needs ";
  const size_t at = err.find(key);
  REQUIRE(at != std::string::npos);
  size_t end = 0;
  const double value = std::stod(err.substr(at + key.size()), &end);
  const std::string unit = err.substr(at + key.size() + end + 1, 3);
  const double scale = unit == "GiB" ? 1024.0 * 1024 * 1024 : unit == "MiB" ? 1024.0 * 1024 : unit == "KiB" ? 1024.0 : 1.0;
  return value * scale;
}

}  // namespace

TEST_CASE("a 1440 x 2880 x 16 field no rank can hold under a limit trains on 4 ranks under it",
          "[launch][spatial][memory]") {
  TempDir t("squall-spatial-memory");
  const std::string raw = t.file("raw"), data = t.file("data");
  run_ok(squall_bin() + " data climate --out " + raw + " --samples 1 --height 1440 --width 2880 --seed 5");
  run_ok(squall_bin() + " data label --in " + raw + " --out " + data);
  // The U-Net of configs/climate-tiny.toml (width 16, depth 4), one sample a step, one step.
  auto job = [&](int ranks, const std::string& dir, const std::string& extra) {
    return mpiexec(ranks) + " " + squall_bin() + " train --config " + k_configs +
           "climate-tiny.toml --set train.batch_size=1 --set train.max_steps=1 --set schedule.warmup_steps=0"
           " --set data.test_samples=1 --set data.workers=1 --set run.threads=1 --set data.train=" + data +
           " --set data.test=" + data + " --set run.dir=" + dir + " " + extra;
  };
  // What one rank, and each of 4, would need: stated by the refusals under a limit of 1 byte.
  const auto one_tiny = run_command(job(1, t.file("probe1"), "--set run.memory_limit=1"));
  REQUIRE(one_tiny.exit_code == 2);
  const double whole = stated_need(one_tiny.err);
  const auto four_tiny = run_command(job(4, t.file("probe4"), "--set run.memory_limit=1 --set parallel.spatial=[4,1]"));
  REQUIRE(four_tiny.exit_code == 2);
  const double quarter = stated_need(four_tiny.err);
  INFO("stated need: whole sample " << whole << " bytes, a rank of [4, 1] " << quarter);
  REQUIRE(quarter < whole / 2);
  const auto limit = static_cast<int64_t>((whole + quarter) / 2);
  // Refused on one rank, naming the key, the figure and a split that fits.
  const auto one = run_command(job(1, t.file("one"), "--set run.memory_limit=" + std::to_string(limit)));
  CHECK(one.exit_code == 2);
  CHECK_THAT(one.err, Contains("run.memory_limit") && Contains("1440 x 2880") && Contains("parallel.spatial = [") &&
                          Contains("would fit"));
  CHECK_FALSE(fs::exists(fs::path(t.file("one")) / "metrics.jsonl"));
  // Trains on 4 ranks under the same limit; each rank's measured peak (its growth once the
  // group was built) within 1.15 x a quarter of the whole sample's need plus its halos.
  const std::string four = t.file("four");
  const auto r = run_command(job(4, four, "--set parallel.spatial=[4,1] --set run.memory_limit=" + std::to_string(limit)));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("memory: per rank:"));
  const json m = read_json(fs::path(four) / "summary.json").at("memory");
  CHECK(m.at("limit_bytes").get<int64_t>() == limit);
  // Rank 0's halos (summary.json's need is rank 0's: one neighbour); the middle ranks have two.
  const double halos = 2 * m.at("need").at("halos").get<double>();
  CHECK(halos > 0);
  const json& growth = m.at("peak_growth_bytes");
  REQUIRE(growth.size() == 4);
  for (const json& g : growth) {
    INFO("rank peak growth " << g.get<double>() << ", a quarter of the whole need plus halos " << whole / 4 + halos);
    CHECK(g.get<double>() <= 1.15 * (whole / 4 + halos));
    CHECK(g.get<double>() <= static_cast<double>(limit));
  }
}
