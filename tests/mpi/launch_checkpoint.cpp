// Checkpoints, restart and failures under a real mpiexec (docs/training.md, "Checkpoints and
// restart"): a run crashed or stopped and resumed ends with the same model, bit for bit, as one
// that ran through; a killed rank ends the job; a full or read-only disk stops the run with a
// clear error and leaves the last checkpoint usable; a failure on some ranks only ends all.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
#include "tests/support/json_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::output_tail;
using squall::test::train_losses;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
using squall::test::read_json;
using squall::test::read_records;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string k_configs = std::string(SQUALL_SOURCE_DIR) + "/configs/";

// 60 steps of 2 ranks x 2 sma learners (per-rank checkpoint parts), or ssgd LeNet-5, on a
// slice of Fashion-MNIST; one thread per rank so that the arithmetic repeats exactly.
std::string sma_job(const std::string& dir, const std::string& extra = "") {
  return squall_bin() + " train --config " + k_configs + "fashion-mnist-sma.toml --set run.dir=" + dir +
         " --set data.train_samples=8192 --set data.test_samples=512 --set train.max_steps=60"
         " --set schedule.warmup_steps=0 --set checkpoint.every_steps=10 --set train.log_every_steps=10"
         " --set run.threads=1" + extra;
}
std::string ssgd_job(const std::string& dir, const std::string& extra = "") {
  return squall_bin() + " train --config " + k_configs + "fashion-mnist-lenet5.toml --set run.dir=" + dir +
         " --set data.train_samples=8192 --set data.test_samples=512 --set train.max_steps=60"
         " --set schedule.warmup_steps=0 --set checkpoint.every_steps=10 --set train.log_every_steps=10"
         " --set run.threads=1" + extra;
}

std::string checksum(const fs::path& dir) { return read_json(dir / "summary.json").at("model_checksum"); }

// Writes `script` to a file in `t` and runs it with sh under `prefix` (timeout, unshare):
// no quoting of the script's own quotes.
squall::test::ProcessResult run_script(const TempDir& t, const std::string& prefix, const std::string& script) {
  std::ofstream(t.file("script.sh")) << script << "\n";
  return run_command(prefix + " sh " + t.file("script.sh"));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.substr(text.size() > 3000 ? text.size() - 3000 : 0);
}

// Whether this machine can make a private mount namespace and mount a tmpfs in it (its mounts vanish with it); false when this
// machine cannot make one or mount a tmpfs there (the caller skips).
bool can_mount_tmpfs() {
  return run_command("unshare -m sh -c 'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs \"$d\" && umount \"$d\" "
                     "&& rmdir \"$d\"' >/dev/null 2>&1")
             .exit_code == 0;
}

}  // namespace

TEST_CASE("a 2-rank run crashed at step 45 and resumed with --resume auto ends bit for bit as one that ran through",
          "[launch][checkpoint]") {
  for (const bool sma : {true, false}) {
    INFO((sma ? "sma, 2 learners per rank: a checkpoint part per rank" : "ssgd: model.h5 only"));
    TempDir t("squall-resume");
    const std::string whole = t.file("whole"), crashed = t.file("crashed");
    auto job = [&](const std::string& dir, const std::string& extra = "") {
      return mpiexec(2) + " " + (sma ? sma_job(dir, extra) : ssgd_job(dir, extra));
    };
    const auto a = run_command(job(whole));
    INFO(output_tail(a));
    REQUIRE(a.exit_code == 0);
    // Every 10 steps and at the end; the newest checkpoint.keep = 3 are kept.
    std::vector<std::string> kept;
    for (const auto& e : fs::directory_iterator(fs::path(whole) / "checkpoints")) kept.push_back(e.path().filename());
    std::sort(kept.begin(), kept.end());
    CHECK(kept == std::vector<std::string>{"step-00000040", "step-00000050", "step-00000060"});

    const auto b = run_command("SQUALL_FAIL_AT=0:45 " + job(crashed));
    INFO(output_tail(b));
    CHECK(b.exit_code != 0);
    CHECK_THAT(b.out + b.err, Contains("rank 0") && Contains("fails at step 45"));
    CHECK_FALSE(fs::exists(fs::path(crashed) / "summary.json"));
    CHECK(fs::exists(fs::path(crashed) / "checkpoints/step-00000040/model.h5"));
    // sma: one file for the node's parts, none per rank.
    CHECK(fs::exists(fs::path(crashed) / "checkpoints/step-00000040/node-00000.h5") == sma);
    CHECK_FALSE(fs::exists(fs::path(crashed) / "checkpoints/step-00000040/rank-00001.h5"));
    CHECK_FALSE(fs::exists(fs::path(crashed) / "checkpoints/step-00000050"));

    const auto c = run_command(job(crashed, " --resume auto"));
    INFO(output_tail(c));
    REQUIRE(c.exit_code == 0);
    CHECK_THAT(c.out, Contains("resuming from") && Contains("step-00000040"));
    CHECK(checksum(crashed) == checksum(whole));
    // The resumed run's log is the uninterrupted one's: the records after the checkpoint were
    // dropped and written again, the window of losses carried over.
    CHECK(train_losses(crashed) == train_losses(whole));
    // The summary and the closing line tell this attempt from the whole run.
    const json s = read_json(fs::path(crashed) / "summary.json");
    CHECK(s.at("steps") == 60);
    CHECK(s.at("attempt").at("number") == 2);
    CHECK(s.at("attempt").at("first_step") == 40);
    CHECK(s.at("attempt").at("steps") == 20);
    CHECK(s.at("run").at("attempts") == 2);
    CHECK(s.at("run").at("steps") == 60);
    CHECK(s.at("run").at("samples") == read_json(fs::path(whole) / "summary.json").at("run").at("samples"));
    CHECK(s.at("run").at("train_loop_s").get<double>() > s.at("attempt").at("train_loop_s").get<double>());
    CHECK_THAT(c.out, Contains("done: 20 steps in") && Contains("(the run: 60 steps over 2 attempts"));
    // The run's clock goes on across the resume: every record's elapsed_s is at least the one
    // before it, and the records after the resume are attempt 2's.
    std::ifstream in(fs::path(crashed) / "metrics.jsonl");
    double last = 0;
    int64_t attempt = 1;
    for (std::string line; std::getline(in, line);) {
      const json j = json::parse(line);
      INFO(line);
      CHECK(j.at("elapsed_s").get<double>() >= last);
      last = j.at("elapsed_s").get<double>();
      if (j.at("kind") == "resume") attempt = 2;
      CHECK(j.at("attempt") == attempt);
    }
    CHECK(attempt == 2);
    // squall report shows the resumed run as one run of two attempts, on the run's clock.
    const auto rep = run_command(squall_bin() + " report " + crashed + " --out " + t.file("report") + " --json");
    INFO(rep.err);
    REQUIRE(rep.exit_code == 0);
    const json row = json::parse(rep.out).at(0);
    CHECK(row.at("attempts") == 2);
    CHECK(row.at("steps") == 60);
    CHECK(row.at("train_loop_s").get<double>() == Approx(s.at("run").at("train_loop_s").get<double>()));
    std::ifstream svg(t.file("report") + "/loss.svg");
    const std::string loss((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
    size_t lines = 0;
    for (size_t at = loss.find("<polyline"); at != std::string::npos; at = loss.find("<polyline", at + 1)) ++lines;
    CHECK(lines == 1);  // one run, one line through the resume
  }
}

TEST_CASE("a corrupt or truncated newest checkpoint is reported and an older one is used", "[launch][checkpoint]") {
  TempDir t("squall-corrupt");
  const std::string whole = t.file("whole"), crashed = t.file("crashed");
  // Two nodes of one rank each: rank 1 leads node 1 and reads its file.
  const std::string nodes = "SQUALL_RANKS_PER_NODE=1 ";
  REQUIRE(run_command(nodes + mpiexec(2) + " " + sma_job(whole)).exit_code == 0);
  REQUIRE(run_command(nodes + "SQUALL_FAIL_AT=1:45 " + mpiexec(2) + " " + sma_job(crashed)).exit_code != 0);
  const fs::path ck = fs::path(crashed) / "checkpoints";
  // step 40: model.h5 cut in half; step 30: one byte of node 1's file (rank 1's part) flipped
  // in the middle of its data.
  fs::resize_file(ck / "step-00000040/model.h5", fs::file_size(ck / "step-00000040/model.h5") / 2);
  {
    const fs::path part = ck / "step-00000030/node-00001.h5";
    std::fstream f(part, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(part) / 2));
    char byte = 0;
    f.read(&byte, 1);
    f.seekp(static_cast<std::streamoff>(fs::file_size(part) / 2));
    byte = static_cast<char>(byte ^ 0x5a);
    f.write(&byte, 1);
  }
  const auto r = run_command(nodes + mpiexec(2) + " " + sma_job(crashed, " --resume auto"));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("step-00000040") && Contains("model.h5") && Contains("not usable"));
  CHECK_THAT(r.err, Contains("step-00000030") && Contains("rank 1") && Contains("node-00001.h5"));
  CHECK_THAT(r.out, Contains("resuming from") && Contains("step-00000020"));
  CHECK(checksum(crashed) == checksum(whole));
}

TEST_CASE("an sma checkpoint resumes bit for bit on another node layout, and from an earlier version's rank files",
          "[launch][checkpoint]") {
  TempDir t("squall-layouts");
  const std::string whole = t.file("whole"), crashed = t.file("crashed"), legacy = t.file("legacy");
  REQUIRE(run_command(mpiexec(2) + " " + sma_job(whole)).exit_code == 0);
  // Written on two nodes of one rank each: model.h5 and two node files.
  const auto b = run_command("SQUALL_RANKS_PER_NODE=1 SQUALL_FAIL_AT=0:45 " + mpiexec(2) + " " + sma_job(crashed));
  INFO(output_tail(b));
  REQUIRE(b.exit_code != 0);
  const fs::path step40 = fs::path(crashed) / "checkpoints/step-00000040";
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(step40)) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"model.h5", "node-00000.h5", "node-00001.h5"});
  // The same checkpoint as an earlier squall wrote it: a rank-RRRRR.h5 per rank, each part
  // recording its rank (parts now record their group of parallel.spatial, here the rank).
  fs::copy(crashed, legacy, fs::copy_options::recursive);
  const fs::path old = fs::path(legacy) / "checkpoints/step-00000040";
  for (const int node : {0, 1}) {
    const std::string file = (old / ("node-0000" + std::to_string(node) + ".h5")).string();
    const std::string group = "rank-0000" + std::to_string(node);
    REQUIRE(squall::checkpoint::read_checkpoint_group_names(file) == std::vector<std::string>{group});
    squall::checkpoint::CheckpointData part = squall::checkpoint::read_checkpoint_groups(file, {group}).at(0);
    CHECK(part.integer("group") == node);
    part.ints.erase("group");
    part.ints["rank"] = node;
    squall::checkpoint::write_checkpoint_file((old / (group + ".h5")).string(), part);
    fs::remove(file);
  }
  // Resumed on one node (this machine's physical layout): both ranks' parts come from the two files.
  const auto c = run_command(mpiexec(2) + " " + sma_job(crashed, " --resume auto"));
  INFO(output_tail(c));
  REQUIRE(c.exit_code == 0);
  CHECK_THAT(c.out, Contains("resuming from") && Contains("step-00000040") && Contains("written by a job of 2 node(s)"));
  CHECK(checksum(crashed) == checksum(whole));
  const auto d = run_command(mpiexec(2) + " " + sma_job(legacy, " --resume auto"));
  INFO(output_tail(d));
  REQUIRE(d.exit_code == 0);
  CHECK_THAT(d.out, Contains("resuming from") && Contains("step-00000040"));
  CHECK(checksum(legacy) == checksum(whole));
  // Its later checkpoints are in the new layout.
  CHECK(fs::exists(fs::path(legacy) / "checkpoints/step-00000060/node-00000.h5"));
  CHECK_FALSE(fs::exists(fs::path(legacy) / "checkpoints/step-00000060/rank-00000.h5"));
}

TEST_CASE("kill -9 of one rank ends the 2-rank job, non-zero, within 60 seconds, naming the rank",
          "[launch][checkpoint][failure]") {
  TempDir t("squall-kill");
  const std::string dir = t.file("run");
  // The job runs for minutes unless stopped; the newest process on the run dir's name is a rank.
  const std::string script = mpiexec(2) + " " + ssgd_job(dir, " --set train.max_steps=100000 --set data.train_samples=0") +
                             " > " + t.file("log") + " 2>&1 & mp=$!; i=0; while [ ! -s " + dir +
                             "/metrics.jsonl ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; "
                             "pkill -9 -n -f 'run.dir=" + dir + "'; s=$(date +%s); wait $mp; rc=$?; "
                             "echo \"rc=$rc seconds=$(( $(date +%s) - s ))\"";
  const auto r = run_script(t, "timeout 180", script);
  const std::string printed = read_text(t.file("log"));
  INFO(r.out << r.err << printed);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("rc=") && !Contains("rc=0 "));
  const auto at = r.out.find("seconds=");
  REQUIRE(at != std::string::npos);
  CHECK(std::stoi(r.out.substr(at + 8)) <= 60);
  CHECK_THAT(printed, Contains("rank 1") && Contains("signal 9"));
}

TEST_CASE("SQUALL_FAIL_AT=1:20:kill: a rank that dies ends the job, naming it", "[launch][checkpoint][failure]") {
  TempDir t("squall-killed");
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_command("SQUALL_FAIL_AT=1:20:kill timeout 120 " + mpiexec(2) + " " + ssgd_job(t.file("run")));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(output_tail(r));
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);  // not the timeout
  CHECK(secs < 60);
  CHECK_THAT(r.out + r.err, Contains("rank 1") && Contains("signal 9"));
}

TEST_CASE("SIGUSR1 and SIGTERM stop a run after a checkpoint with exit 75: --resume auto finishes it",
          "[launch][checkpoint][signal]") {
  TempDir t("squall-signal");
  const std::string whole = t.file("whole");
  const std::string job = " --set train.max_steps=1500 --set checkpoint.every_steps=100 --set train.log_every_steps=100";
  REQUIRE(run_command(mpiexec(2) + " " + ssgd_job(whole, job)).exit_code == 0);
  // SIGUSR1 to mpiexec (Open MPI forwards it to every rank, as Slurm's --signal does to its
  // tasks); SIGTERM to the ranks themselves, as a batch system's time limit sends it.
  for (const std::string how : {"kill -USR1 $mp", "pkill -TERM -P $mp"}) {
    INFO(how);
    const std::string dir = t.file(how[0] == 'k' ? "usr1" : "term");
    const std::string script = mpiexec(2) + " " + ssgd_job(dir, job) + " > " + t.file("log") +
                               " 2>&1 & mp=$!; i=0; while [ ! -d " + dir +
                               "/checkpoints/step-00000100 ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; " +
                               how + "; wait $mp; echo rc=$?";
    const auto r = run_script(t, "timeout 240", script);
    const std::string printed = read_text(t.file("log"));
    INFO(r.out << r.err << printed);
    CHECK_THAT(r.out, Contains("rc=75"));
    CHECK_THAT(printed, Contains(how[0] == 'k' ? "stopped by SIGUSR1" : "stopped by SIGTERM") &&
                            Contains("requeue the job with --resume auto"));
    CHECK_FALSE(fs::exists(fs::path(dir) / "summary.json"));
    const auto resumed = run_command(mpiexec(2) + " " + ssgd_job(dir, job + " --resume auto"));
    INFO(output_tail(resumed));
    REQUIRE(resumed.exit_code == 0);
    CHECK(checksum(dir) == checksum(whole));
  }
}

TEST_CASE("a run dir that fills up stops the run with a clear error: its last checkpoint resumes",
          "[launch][checkpoint][disk]") {
  if (!can_mount_tmpfs()) SQUALL_SKIP("cannot mount a tmpfs in a private mount namespace here (needs root and unshare)");
  // ssgd: model.h5 alone; sma on two nodes of one rank: model.h5 and a node file per node,
  // the second written by rank 1, so that the disk may fill under either writer.
  for (const bool sma : {false, true}) {
    INFO((sma ? "sma, 2 nodes" : "ssgd"));
    TempDir t("squall-full");
    const std::string whole = t.file("whole"), mnt = t.file("mnt"), copy = t.file("copy");
    const std::string env = sma ? "SQUALL_RANKS_PER_NODE=1 " : "";
    auto job = [&](const std::string& dir, const std::string& extra) {
      return env + mpiexec(2) + " " + (sma ? sma_job(dir, extra) : ssgd_job(dir, extra));
    };
    REQUIRE(run_command(job(whole, "")).exit_code == 0);
    // LeNet-5's ssgd checkpoint (weights and momentum) is about 0.5 MB; three are kept: 1.8 MB
    // of space fills while the fourth is written. An sma checkpoint is larger: room for two
    // and a half.
    uintmax_t one = 0;
    for (const auto& e : fs::directory_iterator(fs::path(whole) / "checkpoints/step-00000060")) one += fs::file_size(e);
    const std::string size = sma ? std::to_string(one * 5 / 2 / 1024) + "k" : "1800k";
    fs::create_directories(mnt);
    const std::string script = "mount -t tmpfs -o size=" + size + " tmpfs " + mnt + " && " +
                               job(mnt + "/run", " --set checkpoint.keep=3") + " > " + t.file("log") +
                               " 2>&1; echo rc=$?; cp -a " + mnt + "/run " + copy;
    const auto r = run_script(t, "timeout 240 unshare -m", script);
    // The whole log: what a rank prints as it ends may follow the error.
    std::ifstream in(t.file("log"));
    const std::string printed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(r.out << r.err << read_text(t.file("log")));
    // An error exit (1), not a crash: HDF5 writes the file in memory and squall writes its image,
    // so no HDF5 file is left half-closed for HDF5's exit to crash on (it did: 139).
    CHECK_THAT(r.out, Contains("rc=1"));
    CHECK_THAT(printed, Contains("No space left on device") && Contains("not written"));
    CHECK_THAT(printed, !Contains("Segmentation fault"));
    CHECK_FALSE(fs::exists(fs::path(copy) / "summary.json"));
    // Nothing half-written is left to be trusted: no partial folder, only whole checkpoints.
    for (const auto& e : fs::directory_iterator(fs::path(copy) / "checkpoints"))
      CHECK(e.path().filename().string().find("partial") == std::string::npos);
    const auto resumed = run_command(job(copy, " --resume auto"));
    INFO(output_tail(resumed));
    REQUIRE(resumed.exit_code == 0);
    CHECK(checksum(copy) == checksum(whole));
  }
}

TEST_CASE("a checkpoints folder that becomes read-only stops the run with a clear error: the last checkpoint resumes",
          "[launch][checkpoint][disk]") {
  if (!can_mount_tmpfs()) SQUALL_SKIP("cannot mount a tmpfs in a private mount namespace here (needs root and unshare)");
  TempDir t("squall-readonly");
  const std::string run = t.file("run");
  // The folder must turn read-only between the checkpoints of steps 100 and 200 (the resume
  // is checked to start from step 100), so the run fails at step 200 whatever its length: 300
  // steps leave the resume 200 to train.
  const std::string job = " --set data.train_samples=0 --set train.max_steps=300 --set checkpoint.every_steps=100";
  // Once the first checkpoint is written, its folder is bound read-only onto itself (in a
  // private mount namespace): what a file system remounted read-only after an error does.
  const std::string ck = run + "/checkpoints";
  const std::string script = mpiexec(2) + " " + ssgd_job(run, job) + " > " + t.file("log") +
                             " 2>&1 & mp=$!; i=0; while [ ! -d " + ck + "/step-00000100 ] && [ $i -lt 1200 ]; do "
                             "sleep 0.05; i=$((i+1)); done; mount --bind " + ck + " " + ck + " && mount -o remount,bind,ro " +
                             ck + " " + ck + "; wait $mp; echo rc=$?";
  const auto r = run_script(t, "timeout 240 unshare -m", script);
  const std::string printed = read_text(t.file("log"));
  INFO(r.out << r.err << printed);
  CHECK_THAT(r.out, Contains("rc=1"));
  CHECK_THAT(printed, Contains("not written") && Contains("Read-only file system") &&
                          Contains(", is intact"));
  REQUIRE(fs::exists(fs::path(ck) / "step-00000100/model.h5"));
  CHECK_FALSE(fs::exists(fs::path(run) / "summary.json"));
  const auto resumed = run_command(mpiexec(2) + " " + ssgd_job(run, job + " --resume auto"));
  INFO(output_tail(resumed));
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("step-00000100"));
  CHECK(read_json(fs::path(run) / "summary.json").at("steps") == 300);
}

TEST_CASE("a usage error on only some ranks ends the job on every rank, naming the rank", "[launch][failure]") {
  TempDir t("squall-some-ranks");
  // A config file that exists on rank 0's node only.
  fs::copy_file(k_configs + "fashion-mnist-lenet5.toml", t.file("config-0.toml"));
  const std::string per_rank = " sh -c 'exec " + squall_bin() + " train --config " + t.path.string() +
                               "/config-$OMPI_COMM_WORLD_RANK.toml --set run.dir=" + t.file("run") + "'";
  const auto missing = run_command("timeout 120 " + mpiexec(2) + per_rank);
  INFO(output_tail(missing));
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.out + missing.err, Contains("rank 1") && Contains("config-1.toml"));
  // The same file name on both nodes, with other contents on one: the ranks would train
  // different jobs. The difference is named.
  {
    std::ifstream in(k_configs + "fashion-mnist-lenet5.toml");
    std::ofstream out(t.file("config-1.toml"));
    for (std::string line; std::getline(in, line);) out << (line.rfind("batch_size", 0) == 0 ? "batch_size = 32" : line) << "\n";
  }
  const auto differ = run_command("timeout 120 " + mpiexec(2) + per_rank);
  INFO(output_tail(differ));
  CHECK(differ.exit_code == 2);
  CHECK_THAT(differ.out + differ.err, Contains("rank 1") && Contains("train.batch_size") && Contains("64 -> 32"));
}

TEST_CASE("train.nonfinite: stop names the step, rank and layer: skip drops and counts the steps",
          "[launch][checkpoint][nonfinite]") {
  TempDir t("squall-nonfinite");
  const std::string blow_up = " --set optimizer.lr=1e30 --set train.max_steps=20 --set checkpoint.every_steps=0";
  const auto stop = run_command("timeout 120 " + mpiexec(2) + " " + ssgd_job(t.file("stop"), blow_up));
  INFO(output_tail(stop));
  CHECK(stop.exit_code == 1);
  CHECK_THAT(stop.out + stop.err, Contains("training diverged") && Contains("at step") && Contains("rank ") &&
                                      Contains("learner 0") && (Contains("layer '") || Contains("the gradient of")));
  const auto skip = run_command("timeout 120 " + mpiexec(2) + " " +
                                ssgd_job(t.file("skip"), blow_up + " --set train.nonfinite=skip"));
  INFO(output_tail(skip));
  REQUIRE(skip.exit_code == 0);
  CHECK(read_json(fs::path(t.file("skip")) / "summary.json").at("skipped_steps").get<int64_t>() > 0);
}

TEST_CASE("checkpoint.every_minutes: rank 0's clock decides for the job", "[launch][checkpoint]") {
  TempDir t("squall-timed");
  const std::string dir = t.file("run");
  // Every 3 ms of rank 0's time: about every step, agreed one step later on both ranks.
  const auto r = run_command(mpiexec(2) + " " +
                             ssgd_job(dir, " --set checkpoint.every_steps=0 --set checkpoint.every_minutes=0.00005"
                                           " --set checkpoint.at_end=false --set checkpoint.keep=2"));
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  int checkpoints = 0, records = 0;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "checkpoints")) {
    ++checkpoints;
    CHECK(fs::exists(e.path() / "model.h5"));
  }
  std::ifstream in(fs::path(dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) records += json::parse(line).at("kind") == "checkpoint" ? 1 : 0;
  CHECK(checkpoints == 2);
  CHECK(records >= 5);
}

TEST_CASE("parallel.periods [1, 3] on emulated nodes of 2, 2 and 1 ranks: a crash inside an across period resumes "
          "bit for bit",
          "[launch][checkpoint][periods]") {
  // The checkpoint of step 40 is one step after the job's average of step 39: the nodes' sma
  // centres differ there, and each rank's part carries its node's.
  TempDir t("squall-resume-periods");
  const std::string whole = t.file("whole"), crashed = t.file("crashed");
  auto job = [&](const std::string& dir, const std::string& extra = "") {
    return mpiexec(5) + " " + sma_job(dir, " --ranks-per-node 2 --set parallel.periods=[1,3]" + extra);
  };
  const auto a = run_command(job(whole));
  INFO(output_tail(a));
  REQUIRE(a.exit_code == 0);
  CHECK_THAT(a.out, Contains("sma by level, parallel.periods = [1, 3]") && Contains("the 3 node(s) every 3"));
  const json s = read_json(fs::path(whole) / "summary.json");
  CHECK(s.at("nodes") == 3);
  CHECK(s.at("parallel").at("periods") == json({1, 3}));
  CHECK(s.at("parallel").at("period") == 3);
  const auto b = run_command("SQUALL_FAIL_AT=4:45 " + job(crashed));
  INFO(output_tail(b));
  CHECK(b.exit_code != 0);
  // Rank 4 is node 3 of 2, 2 and 1 ranks: its part (with the node's centre) is node-00002.h5.
  CHECK(fs::exists(fs::path(crashed) / "checkpoints/step-00000040/node-00002.h5"));
  CHECK_FALSE(fs::exists(fs::path(crashed) / "checkpoints/step-00000040/rank-00004.h5"));
  const auto c = run_command(job(crashed, " --resume auto"));
  INFO(output_tail(c));
  REQUIRE(c.exit_code == 0);
  CHECK_THAT(c.out, Contains("resuming from") && Contains("step-00000040"));
  CHECK(checksum(crashed) == checksum(whole));
  // Today's sma on the same job is another model.
  const auto d = run_command(mpiexec(5) + " " + sma_job(t.file("today"), " --ranks-per-node 2"));
  REQUIRE(d.exit_code == 0);
  CHECK(checksum(t.file("today")) != checksum(whole));
}

TEST_CASE("outer on emulated nodes of 2, 2 and 1 ranks: the sums in one order, a crash inside an outer period "
          "resumes bit for bit",
          "[launch][checkpoint][outer]") {
  // Outer steps after steps 8, 16, ..., 56: the checkpoint of step 40 is one in which the
  // nodes' models (each rank's part) and the centre and its momentum (the shared part) differ.
  // Streamed, the job's sum of the outer step after step 40 is still in flight at the checkpoint
  // of step 40 (it runs under inner step 41 and the node sums of that step), and the resumed
  // run starts it again.
  const bool streamed = GENERATE(false, true);
  INFO((streamed ? "parallel.outer.streaming = true" : "parallel.outer.streaming = false"));
  TempDir t(streamed ? "squall-resume-outer-streamed" : "squall-resume-outer");
  const std::string whole = t.file("whole"), crashed = t.file("crashed");
  const std::string streaming = streamed ? " --set parallel.outer.streaming=true" : "";
  auto job = [&](const std::string& dir, const std::string& extra = "") {
    // parallel.check_sums: every rank starts the node's sums and the job's in the same order,
    // checked before each one runs.
    return mpiexec(5) + " " +
           ssgd_job(dir,
                    " --ranks-per-node 2 --set parallel.algorithm=outer --set parallel.outer.period=8"
                    " --set parallel.check_sums=true" +
                        streaming + extra);
  };
  const auto a = run_command(job(whole));
  INFO(output_tail(a));
  REQUIRE(a.exit_code == 0);
  CHECK_THAT(a.out, Contains("outer: ssgd inside each of the 3 node(s) every step, an outer step across them every 8"));
  if (streamed) CHECK_THAT(a.out, Contains("streamed: each outer sum runs under the next inner step"));
  const json s = read_json(fs::path(whole) / "summary.json");
  CHECK(s.at("algorithm") == "outer");
  CHECK(s.at("parallel").at("outer").at("period") == 8);
  CHECK(s.at("parallel").at("outer").at("lr") == 1.0);  // the default: the nodes' mean
  CHECK(s.at("parallel").at("outer").at("momentum") == 0.0);
  CHECK(s.at("parallel").at("outer").at("streaming") == streamed);
  CHECK(s.at("final").at("test_accuracy").get<double>() > 0.3);  // it learned: chance is 0.1
  const auto b = run_command("SQUALL_FAIL_AT=4:45 " + job(crashed));
  INFO(output_tail(b));
  CHECK(b.exit_code != 0);
  CHECK(fs::exists(fs::path(crashed) / "checkpoints/step-00000040/node-00002.h5"));
  const auto c = run_command(job(crashed, " --resume auto"));
  INFO(output_tail(c));
  REQUIRE(c.exit_code == 0);
  CHECK_THAT(c.out, Contains("resuming from") && Contains("step-00000040"));
  CHECK(checksum(crashed) == checksum(whole));
}
