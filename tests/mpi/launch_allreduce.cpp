// `squall bench allreduce` under mpiexec: results for both algorithms on one node and on
// emulated nodes (equal and unequal; the bench itself fails when hier differs from
// MPI_Allreduce), the cross-node algorithms side by side, the stall watchdog ending a job whose
// rank never joins, and bad flags.
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <map>
#include <set>

#include "tests/support/process.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::run_command;
using squall::test::squall_bin;

namespace {

json bench(int np, const std::string& flags) {
  const auto r = run_command(mpiexec(np) + " " + squall_bin() + " bench allreduce --json " + flags);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

void check_results(const json& doc, int np, int nodes, const std::set<int64_t>& sizes) {
  CHECK(doc.at("ranks") == np);
  CHECK(doc.at("nodes") == nodes);
  std::set<std::pair<std::string, int64_t>> seen;
  for (const json& r : doc.at("results")) {
    INFO(r.dump());
    seen.insert({r.at("algo").get<std::string>(), r.at("bytes").get<int64_t>()});
    CHECK(r.at("ranks") == np);
    const double t = r.at("time_us"), algbw = r.at("algbw_GBps"), busbw = r.at("busbw_GBps");
    CHECK(t > 0);
    CHECK(t < 1e7);
    CHECK(algbw == Approx(r.at("bytes").get<double>() / t / 1e3));
    CHECK(busbw == Approx(algbw * 2.0 * (np - 1) / np));
  }
  for (const char* algo : {"mpi", "hier"})
    for (int64_t bytes : sizes) CHECK(seen.count({algo, bytes}) == 1);
  CHECK(seen.size() == 2 * sizes.size());
}

}  // namespace

TEST_CASE("bench allreduce on one node of 2 ranks", "[launch][allreduce]") {
  const auto doc = bench(2, "--sizes 1K,1M");
  check_results(doc, 2, 1, {1024, 1 << 20});
  CHECK(doc.at("modes").at("hier") == "flat");
}

TEST_CASE("bench allreduce on 2 emulated nodes of 2 ranks", "[launch][allreduce]") {
  const auto doc = bench(4, "--sizes 1K,1M --ranks-per-node 2");
  check_results(doc, 4, 2, {1024, 1 << 20});
  CHECK(doc.at("modes").at("hier") == "pipeline");
}

TEST_CASE("bench allreduce on unequal emulated nodes checks hier against MPI", "[launch][allreduce]") {
  // 5 ranks: nodes of 3 and 2 (6 parts per chunk), and of 2, 2 and 1; sizes below the rank
  // count, not divisible by it, and over several chunks.
  for (int k : {3, 2}) {
    INFO("K=" << k);
    const auto doc =
        bench(5, "--sizes 4,1028,1M --chunk 64K --iters 3 --warmup 1 --ranks-per-node " + std::to_string(k));
    check_results(doc, 5, k == 3 ? 2 : 3, {4, 1028, 1 << 20});
  }
}

TEST_CASE("bench allreduce runs each cross-node algorithm side by side and says which ran", "[launch][allreduce][cross]") {
  // 5 emulated nodes of one rank, pipelined in 16K chunks: halving-doubling folds one extra
  // owner. On the default link (20 us, 10 Gbit/s) auto takes halving-doubling for parts below
  // 26 KB; at 1 Gbit/s the ring from 2.6 KB on.
  const auto doc = bench(5, "--algos mpi,hier-pipeline --cross-node auto,ring,halving-doubling --ranks-per-node 1 "
                            "--sizes 4,256K --chunk 16K --iters 2 --warmup 1");
  CHECK(doc.at("nodes") == 5);
  CHECK(doc.at("cross_node") == json({"auto", "ring", "halving-doubling"}));
  for (const char* algo : {"hier-pipeline:auto", "hier-pipeline:ring", "hier-pipeline:halving-doubling"}) {
    INFO(algo);
    CHECK(doc.at("modes").at(algo) == "pipeline");
    CHECK_THAT(doc.at("cross_rules").at(algo).get<std::string>(), Catch::Contains("among 5 nodes"));
  }
  std::map<std::pair<std::string, int64_t>, std::string> crossed;
  for (const json& r : doc.at("results"))
    crossed[{r.at("algo").get<std::string>(), r.at("bytes").get<int64_t>()}] = r.value("cross_node", "-");
  CHECK(crossed.size() == 2 * 4);
  // 4 bytes take the blocking path: nothing crosses through the pipeline.
  CHECK(crossed[{"hier-pipeline:ring", 4}] == "-");
  CHECK(crossed[{"hier-pipeline:halving-doubling", 4}] == "-");
  CHECK(crossed[{"mpi", 256 << 10}] == "-");
  CHECK(crossed[{"hier-pipeline:ring", 256 << 10}] == "ring");
  CHECK(crossed[{"hier-pipeline:halving-doubling", 256 << 10}] == "halving-doubling");
  CHECK(crossed[{"hier-pipeline:auto", 256 << 10}] == "halving-doubling");

  // One value keeps the plain name; the link flags reach auto.
  const auto slow = bench(5, "--algos hier-pipeline --ranks-per-node 1 --sizes 256K --chunk 16K --link-gbit 1 "
                             "--iters 1 --warmup 0");
  CHECK(slow.at("link").at("gbit") == 1.0);
  CHECK(slow.at("results").at(0).at("algo") == "hier-pipeline");
  CHECK(slow.at("results").at(0).at("cross_node") == "ring");
}

TEST_CASE("a rank that never joins a collective ends the job, named by the watchdog", "[launch][allreduce][stall]") {
  // One node (the flat sum behind its arrival barrier) and two emulated nodes (the pipeline).
  for (const std::string extra : {"", "--ranks-per-node 2 "}) {
    INFO(extra);
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = run_command("SQUALL_STALL_AT=1:2 " + mpiexec(3) + " " + squall_bin() + " bench allreduce " + extra +
                               "--sizes 1K --stall-warn 1 --stall-abort 3");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.err);
    CHECK(r.exit_code != 0);
    CHECK(seconds < 60);
    CHECK_THAT(r.err, Catch::Contains("squall: warning: rank 0 on "));
    CHECK_THAT(r.err, Catch::Contains("stall: collective 2 (bench allreduce 1024 B) waited"));
    CHECK_THAT(r.err, Catch::Contains("rank 1 (host "));
    CHECK_THAT(r.err, Catch::Contains("has not joined; ending the job"));
  }
}

TEST_CASE("when rank 0 is the one that never joins, the others end the job", "[launch][allreduce][stall]") {
  // Rank 0 cannot report itself: the others wait --stall-abort plus a grace of 10 s.
  const auto r = run_command("SQUALL_STALL_AT=0:2 " + mpiexec(3) + " " + squall_bin() +
                             " bench allreduce --sizes 1K --stall-warn 1 --stall-abort 1");
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("stall: collective 2 (bench allreduce 1024 B) waited"));
  CHECK_THAT(r.err, Catch::Contains("rank 0 did not report it"));
}

TEST_CASE("a late rank is warned about once and the job goes on", "[launch][allreduce][stall]") {
  const auto r = run_command("SQUALL_STALL_AT=2:3:2 " + mpiexec(3) + " " + squall_bin() +
                             " bench allreduce --sizes 1K --iters 2 --warmup 1 --stall-warn 0.3 --stall-abort 60");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  std::string::size_type count = 0, pos = 0;
  while ((pos = r.err.find("stall: collective", pos)) != std::string::npos) ++count, ++pos;
  CHECK(count == 1);
  CHECK_THAT(r.err, Catch::Contains("stall: collective 3 (bench allreduce 1024 B) waited"));
  CHECK_THAT(r.err, Catch::Contains("rank 2 (host "));
  CHECK_THAT(r.out, Catch::Contains("hier"));
}

TEST_CASE("ranks that start different sums end the job with one line naming both", "[launch][allreduce][sum-check]") {
  const auto r = run_command(mpiexec(3) + " " + SQUALL_FAULT_PROBE + " sums");
  INFO(r.err);
  CHECK(r.exit_code == 1);
  const std::string line = "sum check: rank 0 started sum 2 'probe sum 2' (1000 f32) where rank 1 started sum 2 "
                           "'probe sum 3' (1000 f32); ending the job";
  CHECK_THAT(r.err, Catch::Contains("squall: error: rank 0 on ") && Catch::Contains(line));
  std::string::size_type count = 0, pos = 0;
  while ((pos = r.err.find("sum check: rank 0 started", pos)) != std::string::npos) ++count, ++pos;
  CHECK(count == 1);  // said once, by the first rank of the two
}

TEST_CASE("a rank that stops starting sums ends the job through the sum check's limits",
          "[launch][allreduce][sum-check]") {
  // Rank 1 sleeps before its second sum: the others wait for its record past --stall-warn
  // (0.5 s) and --stall-abort (2 s), then end the job.
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_command(mpiexec(3) + " " + SQUALL_FAULT_PROBE + " sums-stop");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(seconds < 30);
  CHECK_THAT(r.err, Catch::Contains("squall: warning: rank 0 on ") &&
                        Catch::Contains("sum check: sum 2 'probe sum 2' (1000 f32) has waited"));
  CHECK_THAT(r.err, Catch::Contains("for the other ranks to start their sum 2; a rank has stopped starting sums: "
                                    "ending the job (--stall-abort 2 s)"));
}

TEST_CASE("bad bench allreduce flags exit 2 and name the flag", "[launch][allreduce]") {
  struct Case { const char* args; const char* named; };
  for (const Case c : {Case{"--sizes 12Q", "--sizes"}, Case{"--sizes 6", "--sizes"}, Case{"--sizes 2000G", "--sizes"},
                       Case{"--algos foo", "--algos"}, Case{"--algos mpi,nccl2", "--algos"},
                       Case{"--iters 0", "--iters"}, Case{"--stall-warn -1", "--stall-warn"},
                       Case{"--cross-node halving", "--cross-node"}, Case{"--link-gbit 0", "--link-gbit"}}) {
    INFO(c.args);
    const auto r = run_command(mpiexec(2) + " " + squall_bin() + " bench allreduce " + c.args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.named));
  }
  const auto r = run_command("SQUALL_STALL_AT=1 " + mpiexec(2) + " " + squall_bin() + " bench allreduce --sizes 4");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("SQUALL_STALL_AT"));
}

// The device algorithms (CUDA builds): on a GPU they match MPI_Allreduce (the bench fails
// otherwise) and name their mode; without one, every rank exits 1 naming why, and none
// hangs. device-hier on 2 emulated nodes of one rank: each node's NCCL communicator holds
// one rank, so both ranks may share the one GPU of a test machine (NCCL refuses two ranks of
// one communicator on one GPU); flat nccl therefore runs on one rank only.
TEST_CASE("bench allreduce on device buffers: nccl and device-hier, or a clear refusal", "[launch][allreduce][gpu]") {
  const auto info = run_command(squall_bin() + " info --json");
  REQUIRE(info.exit_code == 0);
  if (!json::parse(info.out).at("build").at("cuda").get<bool>()) {  // a build without CUDA
    const auto r = run_command(squall_bin() + " bench allreduce --algos nccl");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--algos"));
    return;
  }
  struct Case {
    int np;
    std::string flags;
  };
  for (const Case& c : {Case{1, "--algos mpi,nccl --sizes 4,1M,5M"},
                        Case{2, "--algos mpi,device-hier --ranks-per-node 1 --sizes 4,12,1M,5M --chunk 64K --inflight 4"}}) {
    INFO(c.flags);
    const auto r = run_command(mpiexec(c.np) + " " + squall_bin() + " bench allreduce --json --iters 3 --warmup 1 " + c.flags);
    if (r.exit_code == 0) {
      const json doc = json::parse(r.out);
      CHECK(doc.at("results").size() == 2 * (c.np == 1 ? 3 : 4));
      CHECK(doc.at("modes").size() == 1);
    } else {
      CHECK(r.exit_code == 1);
      CHECK_THAT(r.err, Catch::Contains("sums device buffers, but no GPU can be used here"));
    }
  }
}
