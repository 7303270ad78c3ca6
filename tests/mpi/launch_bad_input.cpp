// Bad input, one table: every row makes what it needs in a folder of its own, runs one
// command (the squall binary, alone or under mpiexec) under `timeout 120`, and checks the
// exact exit status and the words a user needs to fix it: the key, the file, the value, the
// rank. Exit statuses (docs/training.md, "Bad input"): 0 done, 1 a failure at run time (a
// damaged file), 2 a usage error (a flag, key, value or file to fix); 124 is `timeout`'s: the
// command hung. Every refusal must come before training starts, so most rows take well under
// a second; the few that train keep it to 20 steps of LeNet-5 on 2048 samples. Two rows run
// at a time: much of a row is a process starting (MPI's start-up waits on its daemon), which
// one at a time left a core idle for.
//
// In a command or an expected text: {squall} the binary, {mpiexec2}/{mpiexec3} mpiexec with
// 2 or 3 ranks, {lenet5} configs/fashion-mnist-lenet5.toml, {dir} the row's own folder, {fm}
// Debian's Fashion-MNIST, {train} a tiny `squall train` of LeNet-5 into {dir}/run with a
// checkpoint every 10 steps, {shared} the folder of the data and runs the rows share.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
#include "io/input/open_dataset.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using squall::test::mpiexec;
using squall::test::ProcessResult;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string k_fm = squall::input::k_debian_fashion_mnist_dir;

std::string expand(std::string text, const std::map<std::string, std::string>& vars) {
  // {train} holds other placeholders: expand until nothing is left.
  for (bool again = true; again;) {
    again = false;
    for (const auto& [name, value] : vars)
      for (size_t at; (at = text.find(name)) != std::string::npos;) {
        text.replace(at, name.size(), value);
        again = true;
      }
  }
  return text;
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

std::string tail(const std::string& s, size_t n = 4000) { return s.size() > n ? s.substr(s.size() - n) : s; }

// A setup step that runs squall must succeed, or the row would test the wrong thing.
void must_run(const std::string& command) {
  const ProcessResult r = run_command("timeout 120 " + command);
  INFO(command << "\n" << tail(r.out) << tail(r.err));
  REQUIRE(r.exit_code == 0);
}

const std::string k_tiny = " --set train.max_steps=20 --set schedule.warmup_steps=0 --set checkpoint.every_steps=10"
                           " --set data.train_samples=2048 --set data.test_samples=256";

// What several rows use, made on first use under one folder.
class Shared {
 public:
  explicit Shared(fs::path root) : m_root(std::move(root)) {}
  const fs::path& root() const { return m_root; }

  // A finished run of 20 steps with checkpoints at steps 10 and 20 (one rank).
  fs::path trained_run() {
    const fs::path run = m_root / "trained";
    if (!fs::exists(run / "summary.json"))
      must_run(squall_bin() + " train --config " + config() + " --set run.dir=" + run.string() + k_tiny);
    REQUIRE(fs::exists(run / "checkpoints" / "step-00000010" / "model.h5"));
    REQUIRE(fs::exists(run / "checkpoints" / "step-00000020" / "model.h5"));
    return run;
  }
  // Fashion-MNIST as 2 train and 2 test shards.
  fs::path fm_shards() {
    const fs::path d = m_root / "fm-shards";
    if (!fs::exists(d / "train-00001-of-00002.h5"))
      must_run(squall_bin() + " data fashion-mnist --out " + d.string() + " --shards 2");
    return d;
  }
  // 4 synthetic climate samples of 16x16 in DeepCAM's layout (16 channels, 3 classes).
  fs::path climate() {
    const fs::path d = m_root / "climate";
    if (!fs::exists(d / "stats.h5"))
      must_run(squall_bin() + " data climate --out " + d.string() + " --samples 4 --height 16 --width 16");
    return d;
  }
  static std::string config() { return std::string(SQUALL_SOURCE_DIR) + "/configs/fashion-mnist-lenet5.toml"; }

 private:
  fs::path m_root;
};

struct Row {
  std::string name;
  std::function<void(const fs::path& dir, Shared& shared)> setup;  // may be empty
  std::string command;
  int exit_code;
  std::vector<std::string> expect;  // each must appear in stdout + stderr
};

// Setup steps.
auto toml(const std::string& file, const std::string& text) {
  return [file, text](const fs::path& dir, Shared&) { write_file(dir / file, text); };
}
auto copy_trained_run() {
  return [](const fs::path& dir, Shared& shared) {
    fs::copy(shared.trained_run(), dir / "run", fs::copy_options::recursive);
  };
}

std::vector<Row> rows() {
  return {
      // ---- config: keys, types, syntax ----
      {"config: unknown key in a file (typo) suggests the key", toml("typo.toml", "[train]\nepocs = 1\n"),
       "{squall} train --config {dir}/typo.toml", 2,
       {"{dir}/typo.toml", "unknown key 'train.epocs'", "(line 2)", "did you mean 'train.epochs'?"}},
      {"config: unknown key in --set (typo) suggests the key", {}, "{train} --set optimizer.lrr=0.1", 2,
       {"--set optimizer.lrr=0.1", "unknown key 'optimizer.lrr'", "did you mean 'optimizer.lr'?"}},
      {"config: unknown section", toml("section.toml", "[run]\nseed = 1\n\n[trainn]\nepochs = 1\n"),
       "{squall} train --config {dir}/section.toml", 2,
       {"{dir}/section.toml", "unknown section '[trainn]'", "(line 4)", "did you mean 'train'?"}},
      {"config: a string for an integer", toml("type.toml", "[train]\nbatch_size = \"64\"\n"),
       "{squall} train --config {dir}/type.toml", 2,
       {"{dir}/type.toml", "train.batch_size must be an integer", "string \"64\"", "(line 2)"}},
      {"config: an integer for a boolean", {}, "{train} --set data.shuffle=1", 2,
       {"data.shuffle must be a boolean", "integer 1"}},
      {"config: TOML syntax error names file:line",
       toml("syntax.toml", "[train]\nepochs = 1\nbatch_size = 64\n[optimizer\nlr = 0.1\n"),
       "{squall} train --config {dir}/syntax.toml", 2, {"{dir}/syntax.toml:4:", "TOML syntax error"}},
      {"config: optimizer.lr = nan", toml("nan.toml", "[optimizer]\nlr = nan\n"),
       "{squall} train --config {dir}/nan.toml", 2,
       {"{dir}/nan.toml", "optimizer.lr must be a finite number (got nan)", "(line 2)"}},
      {"config: optimizer.weight_decay = inf", {}, "{train} --set optimizer.weight_decay=inf", 2,
       {"optimizer.weight_decay must be a finite number (got inf)"}},
      {"config: inf in a float array names the element", {}, "{train} --set data.class_weights=[1,2,inf]", 2,
       {"data.class_weights[2] must be a finite number (got inf)"}},
      {"config: negative batch size", {}, "{train} --set train.batch_size=-64", 2,
       {"{lenet5}", "train.batch_size must be > 0 (got -64)"}},
      {"config: parallel.alpha > 1", {}, "{train} --set parallel.algorithm=sma --set parallel.alpha=1.5", 2,
       {"parallel.alpha must be in [0, 1] (got 1.5)"}},
      {"config: model.dropout = 1", {}, "{train} --set model.dropout=1", 2,
       {"model.dropout must be in [0, 1) (got 1.0)"}},
      {"config: bad optimizer.name", {}, "{train} --set optimizer.name=sgdd", 2,
       {"optimizer.name must be one of", "sgd | adam | adamw | lamb", "\"sgdd\"", "did you mean 'sgd'?"}},
      {"config: bad parallel.algorithm", {}, "{train} --set parallel.algorithm=allreduce", 2,
       {"parallel.algorithm must be one of", "ssgd | sma | local-sgd", "\"allreduce\""}},
      {"config: bad train.nonfinite", {}, "{train} --set train.nonfinite=ignore", 2,
       {"train.nonfinite must be one of", "stop | skip", "\"ignore\""}},
      {"config: unknown model.name lists the models", {}, "{train} --set model.name=lenet6", 2,
       {"--set model.name=lenet6: model.name = \"lenet6\" is not a model squall knows", "did you mean 'lenet5'?",
        "resnet20"}},
      {"config: optimizer.beta1 with sgd does not apply", {}, "{train} --set optimizer.beta1=0.8", 2,
       {"--set optimizer.beta1=0.8", "optimizer.beta1 applies to optimizer.name", "not sgd"}},
      {"config: model.aspp_rates with lenet5 does not apply", {}, "{train} --set model.aspp_rates=[1,2]", 2,
       {"model.aspp_rates applies to model.name", "deeplabv3plus", "not lenet5"}},
      {"config: parallel.alpha with ssgd does not apply", {}, "{train} --set parallel.alpha=0.5", 2,
       {"parallel.alpha applies to parallel.algorithm = sma", "not ssgd"}},
      {"config: a warm-up longer than train.max_steps", {}, "{train} --set schedule.warmup_steps=21", 2,
       {"{lenet5}", "schedule.warmup_steps = 21 is longer than the whole run (train.max_steps = 20)"}},
      {"config: an evaluation interval longer than the run's epochs", {},
       "{squall} train --config {lenet5} --set run.dir={dir}/run --set data.train_samples=2048 --set train.epochs=1"
       " --set schedule.warmup_steps=0 --set train.eval_every_steps=100",
       2, {"train.eval_every_steps = 100 is longer than the whole run (train.epochs = 1: 32 steps)"}},
      {"config: [train.target] with a typo", toml("target.toml", "[train.target]\nmetrc = \"accuracy\"\n"),
       "{squall} train --config {dir}/target.toml", 2,
       {"{dir}/target.toml", "unknown key 'train.target.metrc'", "(line 2)", "did you mean 'train.target.metric'?"}},
      {"config: sma period longer than the run", {}, "{train} --set parallel.algorithm=sma --set parallel.period=50",
       2, {"parallel.period = 50", "longer than the run", "20 steps"}},
      {"config: --set without '='", {}, "{train} --set optimizer.lr", 2,
       {"--set optimizer.lr", "expected section.key=value"}},
      {"config: --set of an unknown key", {}, "{train} --set foo.bar=1", 2, {"--set foo.bar=1", "unknown key 'foo.bar'"}},
      {"config: the file does not exist", {}, "{squall} train --config {dir}/missing.toml", 2,
       {"--config", "{dir}/missing.toml", "does not exist"}},
      {"config: a directory given as the config", {}, "{squall} train --config {dir}", 2,
       {"--config", "{dir}", "directory"}},
      {"config: a typo under mpiexec, said once", {}, "{mpiexec2} {train} --set optimizer.lrr=0.1", 2,
       {"unknown key 'optimizer.lrr'", "did you mean 'optimizer.lr'?"}},

      // ---- flags ----
      {"flags: unknown flag", {}, "{train} --bogus", 2, {"--bogus"}},
      {"flags: unknown flag under mpiexec", {}, "{mpiexec2} {train} --bogus", 2, {"--bogus"}},
      {"flags: --resume without a value", {}, "{squall} train --config {lenet5} --resume", 2,
       {"--resume", "required", "missing"}},
      {"flags: bad --ranks-per-node", {}, "{train} --ranks-per-node -1", 2,
       {"--ranks-per-node", "must be an integer >= 0", "'-1'"}},
      {"flags: no subcommand", {}, "{squall}", 2, {"a subcommand is required"}},
      {"flags: unknown subcommand", {}, "{squall} trian --config {lenet5}", 2,
       {"unknown command 'trian'; did you mean 'train'?", "squall commands: info, train"}},
      {"flags: unknown subcommand of a group, under mpiexec", {}, "{mpiexec2} {squall} data labl --in {dir}", 2,
       {"unknown command 'data labl'; did you mean 'data label'?", "squall data commands:"}},
      {"flags: a command group without its subcommand", {}, "{squall} data", 2, {"subcommand is required"}},

      // ---- data ----
      {"data: data.train a missing folder", {}, "{train} --set data.train={dir}/nowhere", 1,
       {"data.train", "{dir}/nowhere", "does not exist"}},
      {"data: data.train an empty folder",
       [](const fs::path& dir, Shared&) { fs::create_directories(dir / "empty"); },
       "{train} --set data.train={dir}/empty", 1, {"data.train", "{dir}/empty", "holds no", "docs/formats.md"}},
      {"data: a corrupt shard (garbage bytes)",
       [](const fs::path& dir, Shared&) {
         std::string garbage(8192, '\0');
         for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 2654435761u) >> 13);
         write_file(dir / "garbage" / "train-00000-of-00001.h5", garbage);
       },
       "{train} --set data.train={dir}/garbage", 1,
       {"data.train", "{dir}/garbage/train-00000-of-00001.h5", "not an HDF5 file"}},
      {"data: a truncated shard",
       [](const fs::path& dir, Shared& shared) {
         fs::create_directories(dir / "cut");
         for (const char* name : {"train-00000-of-00002.h5", "train-00001-of-00002.h5"})
           fs::copy_file(shared.fm_shards() / name, dir / "cut" / name);
         const fs::path victim = dir / "cut" / "train-00001-of-00002.h5";
         fs::resize_file(victim, fs::file_size(victim) / 2);
       },
       "{train} --set data.train={dir}/cut", 1, {"data.train", "{dir}/cut/train-00001-of-00002.h5", "truncated"}},
      {"data: model.in_channels = 3 on Fashion-MNIST", {}, "{train} --set model.in_channels=3", 2,
       {"model.in_channels = 3", "{fm}", "has 1 channels"}},
      {"data: model.classes = 5 on Fashion-MNIST", {}, "{train} --set model.classes=5", 2,
       {"model.classes = 5", "{fm}", "has 10 classes"}},
      {"data: data.class_weights with the wrong count", {}, "{train} --set data.class_weights=[1,2,3]", 2,
       {"data.class_weights has 3 entries", "10 classes"}},
      {"data: Fashion-MNIST train with a climate test folder",
       [](const fs::path&, Shared& shared) { shared.climate(); }, "{train} --set data.test={shared}/climate", 2,
       {"data.test ({shared}/climate", "3 classes", "does not match data.train ({fm}", "10 classes"}},

      // ---- the job's shape ----
      {"job: more ranks than samples", {},
       "{mpiexec3} {train} --set data.train_samples=64 --set train.batch_size=64", 2,
       {"64 x 1 x 3", "more than an epoch's 64 training samples", "train.batch_size"}},
      {"job: SQUALL_FAIL_AT malformed", {}, "env SQUALL_FAIL_AT=abc {train}", 2, {"SQUALL_FAIL_AT", "'abc'"}},
      {"job: SQUALL_FAIL_AT malformed under mpiexec", {}, "env SQUALL_FAIL_AT=1:0 {mpiexec2} {train}", 2,
       {"SQUALL_FAIL_AT", "'1:0'"}},

      // ---- run dirs and checkpoints ----
      {"run dir: already holds a run", copy_trained_run(), "{train}", 2,
       {"run.dir = '{dir}/run' already holds a run", "--resume auto", "--overwrite"}},
      {"run dir: --overwrite replaces the run", copy_trained_run(), "{train} --overwrite", 0,
       {"--overwrite: removed the earlier run's outputs from {dir}/run", "done: 20 steps"}},
      {"run dir: a regular file in the way of run.dir", toml("file", "not a folder\n"),
       "{squall} train --config {lenet5} --set run.dir={dir}/file" + k_tiny, 1,
       {"run.dir = '{dir}/file'", "cannot create it"}},
      {"resume: a checkpoint path that does not exist", copy_trained_run(),
       "{train} --resume {dir}/run/checkpoints/step-00000099", 2,
       {"--resume {dir}/run/checkpoints/step-00000099", "does not exist"}},
      {"resume: auto where every checkpoint is truncated",
       [](const fs::path& dir, Shared& shared) {
         copy_trained_run()(dir, shared);
         for (const char* step : {"step-00000010", "step-00000020"}) {
           const fs::path model = dir / "run" / "checkpoints" / step / "model.h5";
           fs::resize_file(model, fs::file_size(model) / 3);
         }
       },
       "{train} --resume auto", 1,
       {"--resume auto: no usable checkpoint in {dir}/run/checkpoints", "step-00000010", "step-00000020",
        "truncated"}},
      {"resume: a checkpoint of another model", copy_trained_run(),
       "{train} --resume auto --set model.name=resnet20", 2,
       {"{dir}/run/checkpoints/step-00000020", "checkpoint of another run", "model.name", "\"lenet5\"",
        "\"resnet20\""}},
      {"resume: a checkpoint of an earlier version (no epoch position) of 1 rank resumed by 2",
       [](const fs::path& dir, Shared& shared) {
         copy_trained_run()(dir, shared);
         for (const char* step : {"step-00000010", "step-00000020"}) {
           const std::string model = (dir / "run" / "checkpoints" / step / "model.h5").string();
           squall::checkpoint::CheckpointData d = squall::checkpoint::read_checkpoint_file(model);
           REQUIRE(d.ints.erase("epoch_position") == 1);
           squall::checkpoint::write_checkpoint_file(model, d);
         }
       },
       "{mpiexec2} {train} --resume auto", 2,
       {"{dir}/run/checkpoints/step-00000020", "was written by a job of 1 rank(s)",
        "before squall recorded where an epoch's reading stands", "resume it with 1 rank(s)"}},
      {"resume: a model.h5 that is not HDF5", toml("bogus/model.h5", "these bytes are not HDF5\n"),
       "{train} --resume {dir}/bogus/model.h5", 1, {"--resume {dir}/bogus/model.h5", "not an HDF5 file"}},
      {"resume: an HDF5 file that is not a checkpoint",
       [](const fs::path& dir, Shared& shared) {
         fs::create_directories(dir / "shard");
         fs::copy_file(shared.climate() / "data-000000.h5", dir / "shard" / "model.h5");
       },
       "{train} --resume {dir}/shard", 1, {"{dir}/shard/model.h5", "not a squall checkpoint"}},
      {"resume: a file that is not a checkpoint folder", toml("notes.txt", "hello\n"),
       "{train} --resume {dir}/notes.txt", 2, {"--resume {dir}/notes.txt", "is not a checkpoint"}},
  };
}

bool have_fashion_mnist() {
  for (const char* f : {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"})
    if (fs::exists(fs::path(k_fm) / f)) return true;
  return false;
}

}  // namespace

TEST_CASE("bad-input: every row gets a clear error naming the thing, its documented exit status, no hang",
          "[launch][bad-input]") {
  if (!have_fashion_mnist()) SQUALL_SKIP(k_fm << " missing (install dataset-fashion-mnist)");
  TempDir temp("squall-bad-input");
  Shared shared(temp.path / "shared");
  const std::vector<Row> table = rows();
  REQUIRE(table.size() >= 30);
  const auto start = std::chrono::steady_clock::now();
  // Each row's folder, setup and command first, in order (a setup may REQUIRE); then the
  // commands, two at a time; then the checks, in order.
  std::vector<std::map<std::string, std::string>> vars(table.size());
  std::vector<std::string> commands(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const Row& row = table[i];
    const fs::path dir = temp.path / ("row-" + std::to_string(i));
    fs::create_directories(dir);
    vars[i] = {
        {"{train}", "{squall} train --config {lenet5} --set run.dir={dir}/run" + k_tiny},
        {"{squall}", squall_bin()},
        {"{mpiexec2}", mpiexec(2)},
        {"{mpiexec3}", mpiexec(3)},
        {"{lenet5}", Shared::config()},
        {"{dir}", dir.string()},
        {"{fm}", k_fm},
        {"{shared}", shared.root().string()},
    };
    INFO("row " << i << ": " << row.name);
    if (row.setup) row.setup(dir, shared);
    commands[i] = "timeout 120 " + expand(row.command, vars[i]);
  }
  std::vector<ProcessResult> results(table.size());
  std::vector<double> seconds(table.size());
  std::atomic<size_t> next{0};
  auto run_rows = [&] {
    for (size_t i; (i = next++) < table.size();) {
      const auto t0 = std::chrono::steady_clock::now();
      results[i] = run_command(commands[i]);
      seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  std::thread other(run_rows);
  run_rows();
  other.join();
  for (size_t i = 0; i < table.size(); ++i) {
    const Row& row = table[i];
    const ProcessResult& r = results[i];
    INFO("row " << i << ": " << row.name);
    std::printf("bad input: %-58s exit %3d in %5.2f s\n", row.name.c_str(), r.exit_code, seconds[i]);
    const std::string said = r.out + r.err;
    INFO(commands[i] << "\n--- stdout + stderr (tail) ---\n" << tail(said));
    CHECK(r.exit_code != 124);  // timeout: the command hung
    CHECK(r.exit_code == row.exit_code);
    for (const auto& text : row.expect) CHECK_THAT(said, Catch::Contains(expand(text, vars[i])));
    // Refused, not crashed: no failed invariant, and under MPI no rank that aborted alone.
    CHECK_THAT(said, !Catch::Contains("squall: fatal") && !Catch::Contains("MPI_ABORT"));
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("bad input: %zu rows in %.1f s\n", table.size(), total);
}
