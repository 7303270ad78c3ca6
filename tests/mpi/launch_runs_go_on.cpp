// Runs that go on (docs/training.md, "Extending a finished run" and "Fine-tuning from another
// run"): a finished cosine run given more epochs trains the steps added at a new segment of the
// schedule, not at the decayed tail, and a resume inside that segment goes on with it bit for
// bit; a new run started from another run's weights (train.init_from) starts where that run
// ended, maps its input channels by name, and refuses a checkpoint of another model before it
// trains, naming the tensor, both shapes and the key.
//
// The data: shards of a few 16 x 16 samples labelled per pixel from one channel, and for the
// channels by name netCDF files of the 16 DeepCAM variables (the input whose channels have names
// on this version), written here; a U-Net of width 4 and one level, 8 steps an epoch: seconds a run.
#include <netcdf.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
#include "io/checkpoint/named_weights.hpp"
#include "io/formats/netcdf_file.hpp"
#include "io/formats/shard.hpp"
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
namespace checkpoint = squall::checkpoint;
namespace formats = squall::formats;

namespace {

struct DataSpec {
  std::vector<std::string> channels{"a", "b", "c"};
  int64_t h = 16, w = 16;
  int classes = 2;
  int64_t train = 64, test = 16;
  uint32_t seed = 7;
};

// A channel's noise for sample i: the same field for a name in every data set that has it.
std::vector<float> noise_field(const std::string& name, int64_t i, int64_t hw, uint32_t salt) {
  uint32_t seed = salt * 1000003u + static_cast<uint32_t>(i) * 31u;
  for (const char c : name) seed = seed * 131u + static_cast<uint32_t>(c);
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> field(static_cast<size_t>(hw));
  for (float& v : field) v = noise(rng);
  return field;
}

void nc_ok(int status) {
  INFO(nc_strerror(status));
  REQUIRE(status == NC_NOERR);
}

// A netCDF file of `steps` time steps on an h x w grid holding the 16 DeepCAM variables (the
// only input whose channels are named on this version: docs/data.md) and labels: 1 where TMQ
// is above 0, else 0.
void write_netcdf(const std::string& path, int64_t steps, int64_t h, int64_t w, uint32_t salt) {
  int nc = -1, dt = -1, dy = -1, dx = -1, vy = -1, vx = -1, vl = -1;
  nc_ok(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &nc));
  nc_ok(nc_def_dim(nc, "time", static_cast<size_t>(steps), &dt));
  nc_ok(nc_def_dim(nc, "lat", static_cast<size_t>(h), &dy));
  nc_ok(nc_def_dim(nc, "lon", static_cast<size_t>(w), &dx));
  nc_ok(nc_def_var(nc, "lat", NC_DOUBLE, 1, &dy, &vy));
  nc_ok(nc_def_var(nc, "lon", NC_DOUBLE, 1, &dx, &vx));
  const int dims[3] = {dt, dy, dx};
  std::vector<int> vars;
  for (const std::string& name : formats::deepcam_channel_names()) {
    vars.push_back(-1);
    nc_ok(nc_def_var(nc, name.c_str(), NC_FLOAT, 3, dims, &vars.back()));
  }
  nc_ok(nc_def_var(nc, "labels", NC_INT, 3, dims, &vl));
  nc_ok(nc_enddef(nc));
  std::vector<double> lat(static_cast<size_t>(h)), lon(static_cast<size_t>(w));
  for (int64_t y = 0; y < h; ++y) lat[static_cast<size_t>(y)] = -90.0 + (static_cast<double>(y) + 0.5) * 180.0 / static_cast<double>(h);
  for (int64_t x = 0; x < w; ++x) lon[static_cast<size_t>(x)] = (static_cast<double>(x) + 0.5) * 360.0 / static_cast<double>(w);
  nc_ok(nc_put_var_double(nc, vy, lat.data()));
  nc_ok(nc_put_var_double(nc, vx, lon.data()));
  const int64_t hw = h * w;
  for (int64_t t = 0; t < steps; ++t) {
    const size_t start[3] = {static_cast<size_t>(t), 0, 0}, count[3] = {1, static_cast<size_t>(h), static_cast<size_t>(w)};
    for (size_t c = 0; c < vars.size(); ++c)
      nc_ok(nc_put_vara_float(nc, vars[c], start, count,
                              noise_field(formats::deepcam_channel_names()[c], t, hw, salt).data()));
    const std::vector<float> tmq = noise_field("TMQ", t, hw, salt);
    std::vector<int> labels(static_cast<size_t>(hw));
    for (size_t p = 0; p < labels.size(); ++p) labels[p] = tmq[p] > 0 ? 1 : 0;
    nc_ok(nc_put_vara_int(nc, vl, start, count, labels.data()));
  }
  nc_ok(nc_close(nc));
}

// Shards train-00000-of-00001.h5 and test-00000-of-00001.h5 in `dir`. Every channel is N(0, 1)
// noise per pixel (noise_field); a pixel's class is where channel "a" lies (above 0, or in
// thirds for 3 classes).
void write_data(const std::string& dir, const DataSpec& d) {
  fs::create_directories(dir);
  const squall::nn::Shape sample(1, static_cast<int64_t>(d.channels.size()), d.h, d.w);
  formats::ShardMeta meta;
  for (int k = 0; k < d.classes; ++k) meta.class_names.push_back("class" + std::to_string(k));
  meta.channel_names = d.channels;
  for (size_t c = 0; c < d.channels.size(); ++c) {
    meta.mean.push_back(0.0f);
    meta.std.push_back(1.0f);
    meta.min.push_back(-5.0f);
    meta.max.push_back(5.0f);
  }
  meta.source = "tests/mpi/launch_runs_go_on.cpp";
  const int64_t hw = d.h * d.w;
  for (const auto& [split, n] : {std::pair<std::string, int64_t>{"train", d.train}, {"test", d.test}}) {
    formats::ShardWriter out(dir + "/" + formats::shard_name(split, 0, 1), sample, formats::SampleType::float32, true, 0,
                             meta);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> image(static_cast<size_t>(sample.per_sample()));
      std::vector<int32_t> labels(static_cast<size_t>(hw));
      const uint32_t salt = d.seed + (split == "test" ? 7919u : 0u);
      for (size_t c = 0; c < d.channels.size(); ++c) {
        const std::vector<float> field = noise_field(d.channels[c], i, hw, salt);
        std::copy(field.begin(), field.end(), image.begin() + static_cast<int64_t>(c) * hw);
      }
      const std::vector<float> a = noise_field("a", i, hw, salt);
      for (int64_t p = 0; p < hw; ++p) {
        const float v = a[static_cast<size_t>(p)];
        labels[static_cast<size_t>(p)] = d.classes == 2 ? (v > 0 ? 1 : 0) : (v < -0.43f ? 0 : v < 0.43f ? 1 : 2);
      }
      out.append(image.data(), labels.data());
    }
    out.close();
  }
}

// A run's config: the U-Net on `data` (and `test_data`, when not the same), Adam at 0.01 with 4 steps of warm-up into a cosine.
std::string write_config(const TempDir& t, const std::string& name, const std::string& data,
                         const std::string& test_data = "") {
  const std::string path = t.file(name + ".toml");
  std::ofstream(path) << "[run]\ndir = \"" << t.file(name) << "\"\nseed = 1\nthreads = 1\n"
                      << "[data]\ntrain = \"" << data << "\"\ntest = \"" << (test_data.empty() ? data : test_data)
                      << "\"\nworkers = 1\n"
                      << "[model]\nname = \"unet\"\nwidth = 4\ndepth = 1\n"
                      << "[train]\nepochs = 3\nbatch_size = 8\nlog_every_steps = 1\n"
                      << "[optimizer]\nname = \"adam\"\nlr = 0.01\nweight_decay = 0.0\n"
                      << "[schedule]\nkind = \"cosine\"\nwarmup_steps = 4\n"
                      << "[checkpoint]\nevery_steps = 8\n";
  return path;
}

std::string train(const std::string& config, const std::string& extra = "") {
  return squall_bin() + " train --config " + config + extra;
}

// The learning rate of each step, from metrics.jsonl (train.log_every_steps = 1).
std::vector<double> rates(const fs::path& run_dir) {
  std::vector<double> out;
  for (const json& r : read_records(run_dir / "metrics.jsonl", "train")) {
    REQUIRE(r.at("step").get<int64_t>() == static_cast<int64_t>(out.size()) + 1);
    out.push_back(r.at("lr").get<double>());
  }
  return out;
}

// optim/schedule.hpp's formula: 0-based step k of a schedule of `total` steps, peak 0.01,
// 4 steps of warm-up, cosine to 0.
double schedule_lr(int64_t k, int64_t total) {
  const double peak = 0.01;
  if (k < 4) return peak * static_cast<double>(k + 1) / 4.0;
  const double t = std::clamp(static_cast<double>(k - 4) / static_cast<double>(total - 4), 0.0, 1.0);
  return peak * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

std::string checksum(const fs::path& dir) { return read_json(dir / "summary.json").at("model_checksum"); }

// The checkpoint's tensors whose name has (or, with `has` false, lacks) `part`.
std::vector<std::string> tensors(const checkpoint::ModelCheckpoint& m, const std::string& part, bool has) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.tensors)
    if ((name.find(part) != std::string::npos) == has) out.push_back(name);
  return out;
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double most = 0;
  for (size_t i = 0; i < a.size(); ++i) most = std::max(most, static_cast<double>(std::abs(a[i] - b[i])));
  return most;
}

double sum_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(static_cast<double>(a[i]) - b[i]);
  return sum;
}

double first_loss(const fs::path& run_dir) {
  return read_records(run_dir / "metrics.jsonl", "train").front().at("loss").get<double>();
}

}  // namespace

TEST_CASE("a finished cosine run given more epochs trains the steps added at a new schedule segment",
          "[launch][runs-go-on]") {
  TempDir t("squall-extend");
  const std::string data = t.file("data");
  write_data(data, {});
  const std::string cfg = write_config(t, "run", data);
  const fs::path run = t.file("run");
  const auto first = run_command(train(cfg));
  INFO(output_tail(first));
  REQUIRE(first.exit_code == 0);
  REQUIRE(read_json(run / "summary.json").at("steps") == 24);
  // The same config again: nothing to do, and the message says what more epochs would do.
  const auto again = run_command(train(cfg, " --resume auto"));
  INFO(output_tail(again));
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.out, Contains("is at step 24 of 24") && Contains("raise train.epochs or train.max_steps") &&
                            Contains("run the schedule again, its warm-up and its decay, over themselves alone"));
  // Copies of the finished run: one to be preempted inside the new segment, one whose final
  // checkpoint is made to look like an earlier version's (no planned_steps, no segments).
  fs::copy(run, t.file("preempted"), fs::copy_options::recursive);
  fs::copy(run, t.file("old"), fs::copy_options::recursive);

  const auto longer = run_command(train(cfg, " --set train.epochs=6 --resume auto"));
  INFO(output_tail(longer));
  REQUIRE(longer.exit_code == 0);
  CHECK_THAT(longer.out, Contains("resuming a finished run at step 24 of 24: a new schedule segment over steps 24..48 "
                                  "(24 steps): warm-up 4 step(s) to 0.01, then cosine to 0"));
  const std::vector<double> lr = rates(run);
  REQUIRE(lr.size() == 48);
  // Steps 1..24 as they were; steps 25..48 the schedule over the 24 steps added alone.
  for (int64_t s = 0; s < 24; ++s) CHECK(lr[static_cast<size_t>(s)] == Approx(schedule_lr(s, 24)));
  for (int64_t s = 24; s < 48; ++s) {
    INFO("step " << s + 1);
    CHECK(lr[static_cast<size_t>(s)] == Approx(schedule_lr(s - 24, 24)).epsilon(1e-12));
  }
  // The new warm-up from a quarter of the peak to the peak, where the old schedule's frame would
  // have held every added step at its last rate (6.2e-5).
  CHECK(lr[23] < 1e-4);
  CHECK(lr[24] == Approx(0.0025));
  CHECK(lr[27] == Approx(0.01));
  // The evaluation of epoch 3 was done before: the extension does not repeat it.
  int64_t evals_at_24 = 0;
  for (const json& r : read_records(run / "metrics.jsonl", "eval")) evals_at_24 += r.at("step") == 24 ? 1 : 0;
  CHECK(evals_at_24 == 1);

  // Preempted inside the new segment (after its checkpoint at step 32), then resumed: it goes on
  // with the segment, to the same model bit for bit.
  const std::string set_dir = " --set run.dir=" + t.file("preempted");
  const auto crashed = run_command("SQUALL_FAIL_AT=0:37 " + train(cfg, set_dir + " --set train.epochs=6 --resume auto"));
  INFO(output_tail(crashed));
  REQUIRE(crashed.exit_code != 0);
  CHECK_THAT(crashed.out + crashed.err, Contains("fails at step 37"));
  const auto resumed = run_command(train(cfg, set_dir + " --set train.epochs=6 --resume auto"));
  INFO(output_tail(resumed));
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("step-00000032"));
  CHECK_THAT(resumed.out, !Contains("a new schedule segment") && !Contains("now spans"));
  CHECK(rates(t.file("preempted")) == lr);
  CHECK(checksum(t.file("preempted")) == checksum(run));

  // A checkpoint of an earlier version, without the entries: its spent schedule says it is finished.
  const fs::path old_final = fs::path(t.file("old")) / "checkpoints/step-00000024/model.h5";
  checkpoint::CheckpointData d = checkpoint::read_checkpoint_file(old_final.string());
  REQUIRE(d.ints.erase("planned_steps") == 1);
  REQUIRE(d.ints.erase("last_eval_step") == 1);
  REQUIRE(d.texts.erase("schedule_segments") == 1);
  checkpoint::write_checkpoint_file(old_final.string(), d);
  const auto old = run_command(train(cfg, " --set run.dir=" + t.file("old") + " --set train.epochs=6 --resume auto"));
  INFO(output_tail(old));
  REQUIRE(old.exit_code == 0);
  CHECK_THAT(old.out, Contains("a new schedule segment over steps 24..48"));
  CHECK(rates(t.file("old")) == lr);
}

TEST_CASE("an unfinished run resumed with more epochs stretches its schedule and says how the rate changes",
          "[launch][runs-go-on]") {
  TempDir t("squall-stretch");
  const std::string data = t.file("data");
  write_data(data, {});
  const std::string cfg = write_config(t, "run", data);
  const auto crashed = run_command("SQUALL_FAIL_AT=0:12 " + train(cfg));
  INFO(output_tail(crashed));
  REQUIRE(crashed.exit_code != 0);
  const auto longer = run_command(train(cfg, " --set train.epochs=6 --resume auto"));
  INFO(output_tail(longer));
  REQUIRE(longer.exit_code == 0);
  char line[160];
  std::snprintf(line, sizeof(line), "the learning rate at step 9 goes from %.4g to %.4g", schedule_lr(8, 24),
                schedule_lr(8, 48));
  CHECK_THAT(longer.out, Contains("resuming step 8 with train.epochs 3 -> 6: the schedule now spans 48 steps (was 24)") &&
                             Contains(line));
  const std::vector<double> lr = rates(t.file("run"));
  REQUIRE(lr.size() == 48);
  for (int64_t s = 8; s < 48; ++s) CHECK(lr[static_cast<size_t>(s)] == Approx(schedule_lr(s, 48)).epsilon(1e-12));
}

TEST_CASE("train.init_from starts a new run from another run's weights", "[launch][runs-go-on]") {
  TempDir t("squall-init-from");
  const std::string data = t.file("data");
  write_data(data, {});
  const std::string cfg = write_config(t, "source", data);
  // Trained well past a fresh model's loss: 6 epochs at a higher rate.
  const auto source = run_command(train(cfg, " --set train.epochs=6 --set optimizer.lr=0.05"));
  INFO(output_tail(source));
  REQUIRE(source.exit_code == 0);
  const fs::path source_dir = t.file("source");
  const checkpoint::ModelCheckpoint trained =
      checkpoint::load_model_checkpoint(source_dir / "checkpoints/step-00000048");

  // One step at a learning rate of 1e-30 (Adam moves a weight by about the rate, far below a
  // float's resolution): the parameters after it are the ones the run started from. BatchNorm's
  // running statistics move a tenth of the way to the batch's at any rate.
  const std::string one_step = " --set train.max_steps=1 --set optimizer.lr=1e-30 --set schedule.warmup_steps=0 "
                               "--set schedule.kind=constant";
  const auto fresh = run_command(train(cfg, one_step + " --set run.dir=" + t.file("fresh")));
  INFO(output_tail(fresh));
  REQUIRE(fresh.exit_code == 0);
  const auto tuned = run_command(train(cfg, one_step + " --set run.dir=" + t.file("tuned") + " --set train.init_from=" +
                                                source_dir.string()));
  INFO(output_tail(tuned));
  REQUIRE(tuned.exit_code == 0);
  CHECK_THAT(tuned.out, Contains("train.init_from: starting from the weights of " +
                                 (source_dir / "checkpoints/step-00000048").string() + " (step 48, unet)"));
  const checkpoint::ModelCheckpoint start = checkpoint::load_model_checkpoint(fs::path(t.file("tuned")) / "checkpoints/step-00000001");
  const checkpoint::ModelCheckpoint base = checkpoint::load_model_checkpoint(fs::path(t.file("fresh")) / "checkpoints/step-00000001");
  REQUIRE(start.tensors.size() == trained.tensors.size());
  REQUIRE_FALSE(tensors(trained, "running_", true).empty());
  for (const std::string& name : tensors(trained, "running_", false)) {
    INFO(name);
    CHECK(max_difference(start.tensors.at(name).values, trained.tensors.at(name).values) < 1e-6);
  }
  // A fresh start's differ (the comparison above is not of two alike models).
  CHECK(max_difference(base.tensors.at("down0.a.conv.weight").values,
                       trained.tensors.at("down0.a.conv.weight").values) > 1e-2);
  for (const std::string& name : tensors(trained, "running_", true)) {
    INFO(name);
    CHECK(sum_difference(start.tensors.at(name).values, trained.tensors.at(name).values) <
          0.5 * sum_difference(base.tensors.at(name).values, trained.tensors.at(name).values));
  }
  // Its loss starts where the source run ended, far below a fresh start's.
  const double source_last = read_records(source_dir / "metrics.jsonl", "train").back().at("loss").get<double>();
  const double tuned_first = first_loss(t.file("tuned")), fresh_first = first_loss(t.file("fresh"));
  INFO("source's last loss " << source_last << ", fine-tune's first " << tuned_first << ", fresh start's first "
                             << fresh_first);
  CHECK(tuned_first < 0.5 * fresh_first);
  CHECK(std::abs(tuned_first - source_last) < 0.25 * (fresh_first - source_last));
  CHECK(read_json(fs::path(t.file("tuned")) / "summary.json").at("attempt").at("first_step") == 0);

  // A fine-tune preempted and resumed goes on from its own checkpoint, not the source's weights.
  const auto resumed = run_command(train(cfg, one_step + " --set train.max_steps=2 --set run.dir=" + t.file("tuned") +
                                                  " --set train.init_from=" + source_dir.string() + " --resume auto"));
  INFO(output_tail(resumed));
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("train.init_from = '" + source_dir.string() + "' is not applied: the run resumes "
                                   "from its own checkpoint"));
  CHECK_THAT(resumed.out, !Contains("starting from the weights of"));
  CHECK(read_json(fs::path(t.file("tuned")) / "summary.json").at("steps") == 2);
}

TEST_CASE("train.init_from maps the input channels by name across a change of channels and grid, on two ranks",
          "[launch][runs-go-on]") {
  TempDir t("squall-init-channels");
  write_netcdf(t.file("train.nc"), 64, 16, 16, 1);
  write_netcdf(t.file("test.nc"), 16, 16, 16, 2);
  const std::string cfg = write_config(t, "source", t.file("train.nc"), t.file("test.nc"));
  const std::string raw = " --set data.normalize=false";
  const auto source = run_command(train(cfg, raw + " --set train.epochs=1"));
  INFO(output_tail(source));
  REQUIRE(source.exit_code == 0);
  const fs::path source_h5 = fs::path(t.file("source")) / "checkpoints/step-00000008/model.h5";
  const checkpoint::ModelCheckpoint trained = checkpoint::load_model_checkpoint(source_h5);
  const std::vector<std::string>& names = formats::deepcam_channel_names();
  REQUIRE(trained.channel_names == names);

  // The checkpoint as a run on other channels would have written it: 15 channels, without PSL
  // (channel 7), and ZBOT (channel 15) under another name, HGT.
  checkpoint::CheckpointData d = checkpoint::read_checkpoint_file(source_h5.string());
  const std::string first = "model/down0.a.conv.weight";
  REQUIRE(d.shapes.at(first) == std::vector<int64_t>{4, 16, 3, 3});
  const std::vector<float>& all = d.arrays.at(first);
  std::vector<float> kept;
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t c = 0; c < 16; ++c)
      if (c != 7) kept.insert(kept.end(), all.begin() + (o * 16 + c) * 9, all.begin() + (o * 16 + c + 1) * 9);
  d.arrays[first] = kept;
  d.shapes[first] = {4, 15, 3, 3};
  std::string then_names, units;
  for (int64_t c = 0; c < 16; ++c) {
    if (c == 7) continue;
    then_names += (then_names.empty() ? "" : "\n") + (c == 15 ? std::string("HGT") : names[static_cast<size_t>(c)]);
    units += c == 0 ? "" : "\n";
  }
  d.texts["input/channel_names"] = then_names;
  d.texts["input/channel_units"] = units;
  d.ints["input/channels"] = 15;
  fs::create_directories(t.file("edited"));
  checkpoint::write_checkpoint_file(t.file("edited") + "/model.h5", d);

  // The 16 channels on a 32 x 16 grid; rank 0 reads the checkpoint, rank 1 receives it.
  write_netcdf(t.file("train32.nc"), 64, 32, 16, 3);
  write_netcdf(t.file("test32.nc"), 16, 32, 16, 4);
  const auto tuned = run_command(mpiexec(2) + " " +
                                 train(cfg, raw + " --set data.train=" + t.file("train32.nc") + " --set data.test=" +
                                                t.file("test32.nc") + " --set run.dir=" + t.file("tuned") +
                                                " --set train.init_from=" + t.file("edited") +
                                                " --set train.max_steps=1 --set optimizer.lr=1e-30"
                                                " --set schedule.warmup_steps=0 --set schedule.kind=constant"));
  INFO(output_tail(tuned));
  REQUIRE(tuned.exit_code == 0);
  CHECK_THAT(tuned.out, Contains("train.init_from: input channels by name: reused TMQ, U850, V850, UBOT, VBOT, QREFHT, "
                                 "PS, T200, T500, PRECT, TS, TREFHT, Z1000, Z200; new to this run, with zero weights: "
                                 "PSL, ZBOT; dropped: HGT"));
  CHECK_THAT(tuned.out, Contains("the checkpoint was trained on a 16 x 16 grid, data.train's is 32 x 16"));
  const checkpoint::ModelCheckpoint start =
      checkpoint::load_model_checkpoint(fs::path(t.file("tuned")) / "checkpoints/step-00000001");
  const checkpoint::NamedTensor& was = trained.tensors.at("down0.a.conv.weight");
  const checkpoint::NamedTensor& now = start.tensors.at("down0.a.conv.weight");
  REQUIRE(now.shape == std::vector<int64_t>{4, 16, 3, 3});
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t c = 0; c < 16; ++c)
      for (int64_t k = 0; k < 9; ++k) {
        const float v = now.values[static_cast<size_t>((o * 16 + c) * 9 + k)];
        INFO("output " << o << ", channel " << names[static_cast<size_t>(c)] << ", tap " << k);
        if (c == 7 || c == 15) CHECK(std::abs(v) < 1e-20);  // new: zero
        else CHECK(v == Approx(was.values[static_cast<size_t>((o * 16 + c) * 9 + k)]).margin(1e-6));
      }
  // Every other parameter as the source's.
  CHECK(max_difference(start.tensors.at("classifier.weight").values, trained.tensors.at("classifier.weight").values) <
        1e-6);
}

TEST_CASE("train.init_from refuses a checkpoint of another model before training, naming tensor, shapes and key",
          "[launch][runs-go-on]") {
  TempDir t("squall-init-refused");
  write_data(t.file("data"), {});
  const std::string cfg = write_config(t, "source", t.file("data"));
  REQUIRE(run_command(train(cfg, " --set train.epochs=1")).exit_code == 0);
  const fs::path model_h5 = fs::path(t.file("source")) / "checkpoints/step-00000008/model.h5";
  const std::string init = " --set train.init_from=" + t.file("source");

  const auto wider = run_command(train(cfg, init + " --set model.width=8 --set run.dir=" + t.file("wider")));
  INFO(output_tail(wider));
  CHECK(wider.exit_code == 2);
  CHECK_THAT(wider.err, Contains(model_h5.string()) && Contains("down0.a.conv.weight") &&
                            Contains("[4, 3, 3, 3]") && Contains("[8, 3, 3, 3]") &&
                            Contains("model.width (8 here, 4 in the checkpoint)"));
  CHECK_FALSE(fs::exists(fs::path(t.file("wider")) / "metrics.jsonl"));

  DataSpec three;
  three.classes = 3;
  write_data(t.file("three"), three);
  const auto classes = run_command(train(cfg, init + " --set data.train=" + t.file("three") + " --set data.test=" +
                                                  t.file("three") + " --set run.dir=" + t.file("classes")));
  INFO(output_tail(classes));
  CHECK(classes.exit_code == 2);
  CHECK_THAT(classes.err, Contains(model_h5.string()) && Contains("classifier.weight") && Contains("[2, 4, 1, 1]") &&
                              Contains("[3, 4, 1, 1]") && Contains("model.classes"));
  CHECK_FALSE(fs::exists(fs::path(t.file("classes")) / "metrics.jsonl"));

  const auto missing = run_command(train(cfg, " --set train.init_from=" + t.file("nothing") + " --set run.dir=" +
                                                  t.file("missing")));
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("train.init_from = '" + t.file("nothing") + "': no such file or folder"));
}
