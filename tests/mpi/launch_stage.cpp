// `squall stage` under mpiexec with emulated nodes: every file a node reads arrives
// byte-identical, staging again skips what is already there, a damaged copy is replaced, and
// failures end every rank with one line naming the rank and the path.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::fresh_dir;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Six Fashion-MNIST training shards, made once for all cases of this file and removed at exit.
struct SourceShards {
  fs::path dir;
  ~SourceShards() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const fs::path& source_shards() {
  static const SourceShards shards{[] {
    char tmpl[] = "/tmp/squall-stage-src-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    const auto r = run_command(squall_bin() + " data fashion-mnist --out " + tmpl + " --shards 6 --compression 1");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return fs::path(tmpl);
  }()};
  return shards.dir;
}

std::vector<fs::path> train_shards() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(source_shards()))
    if (e.path().filename().string().rfind("train-", 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

json stage(const fs::path& to, const std::string& extra = "") {
  const auto r = run_command(mpiexec(4) + " " + squall_bin() + " stage --from " + source_shards().string() + " --to '" +
                             to.string() + "/node{node}' --ranks-per-node 2 --json " + extra);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

bool no_temporaries(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".tmp") return false;
  return true;
}

}  // namespace

TEST_CASE("stage copies every file to every node, verified, and skips them the second time", "[stage]") {
  const fs::path dst = fresh_dir("stage-global");
  const auto shards = train_shards();
  REQUIRE(shards.size() == 6);
  int64_t total = 0;
  for (const auto& s : shards) total += static_cast<int64_t>(fs::file_size(s));

  const json first = stage(dst);
  CHECK(first.at("nodes") == 2);
  CHECK(first.at("files_copied") == 12);  // global sampling: each node reads every shard
  CHECK(first.at("files_skipped") == 0);
  CHECK(first.at("bytes") == 2 * total);
  CHECK(first.at("seconds").get<double>() > 0);
  CHECK(first.at("GBps").get<double>() > 0);
  for (const char* node : {"node0", "node1"})
    for (const auto& s : shards) {
      const fs::path copy = dst / node / s.filename();
      INFO(copy);
      REQUIRE(fs::exists(copy));
      CHECK(read_all(copy) == read_all(s));
    }
  CHECK(no_temporaries(dst));

  const json second = stage(dst);
  CHECK(second.at("files_copied") == 0);
  CHECK(second.at("files_skipped") == 12);
  CHECK(second.at("bytes") == 0);

  // Same size, one byte changed: only the checksum tells, and the copy is replaced.
  const fs::path damaged = dst / "node1" / shards[2].filename();
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x5a' ^ read_all(damaged)[1000]);
  }
  fs::resize_file(dst / "node0" / shards[4].filename(), 100);  // and a truncated one
  const json third = stage(dst);
  CHECK(third.at("files_copied") == 2);
  CHECK(third.at("files_skipped") == 10);
  CHECK(read_all(damaged) == read_all(shards[2]));
  CHECK(read_all(dst / "node0" / shards[4].filename()) == read_all(shards[4]));
  fs::remove_all(dst);
}

TEST_CASE("local sampling stages only each node's own shards", "[stage]") {
  const fs::path dst = fresh_dir("stage-local");
  const json doc = stage(dst, "--sampling local");
  CHECK(doc.at("files_copied") == 6);  // six shards of nearly equal size: three whole ones per node
  std::set<std::string> seen;
  for (const char* node : {"node0", "node1"}) {
    int count = 0;
    for (const auto& e : fs::directory_iterator(dst / node)) {
      if (e.path().filename() == ".squall-stage.json") continue;  // the node's stage record
      seen.insert(e.path().filename().string());
      CHECK(read_all(e.path()) == read_all(source_shards() / e.path().filename()));
      ++count;
    }
    CHECK(count == 3);
    // The record a training run's MLPerf log reports the staging from (io/input/stage.hpp).
    const json record = json::parse(read_all(dst / node / ".squall-stage.json"));
    CHECK(record.at("files") == 3);
    CHECK(record.at("bytes").get<int64_t>() > 0);
    CHECK(record.at("start_ms").get<int64_t>() <= record.at("stop_ms").get<int64_t>());
    CHECK(record.at("source") == source_shards().string());
  }
  CHECK(seen.size() == 6);
  fs::remove_all(dst);
}

TEST_CASE("stage failures end every rank with one line naming the rank and the path", "[stage]") {
  const fs::path dst = fresh_dir("stage-fail");
  {
    const auto r = run_command(mpiexec(4) + " " + squall_bin() + " stage --from /nonexistent/shards --to " +
                               dst.string() + " --ranks-per-node 2");
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Catch::Contains("/nonexistent/shards"));
    CHECK_THAT(r.err, Catch::Contains("rank 0"));
  }
  {
    // Node 1's destination is a plain file: only ranks 2 and 3 fail, and everyone exits non-zero.
    fs::create_directories(dst);
    std::ofstream(dst / "node1") << "not a folder";
    const auto r = run_command(mpiexec(4) + " " + squall_bin() + " stage --from " + source_shards().string() +
                               " --to '" + dst.string() + "/node{node}' --ranks-per-node 2");
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Catch::Contains("stage failed on rank 2"));
    CHECK_THAT(r.err, Catch::Contains((dst / "node1").string()));
    std::string::size_type count = 0, pos = 0;
    while ((pos = r.err.find("stage failed", pos)) != std::string::npos) ++count, ++pos;
    CHECK(count == 1);
  }
  fs::remove_all(dst);
}
