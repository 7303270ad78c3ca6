// The squall binary under mpiexec: topology reported by `info --json`, and failures that
// take the whole job down with one line naming the rank.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::run_command;
using squall::test::squall_bin;

namespace {

json info(int np, const std::string& extra, const std::string& env = "") {
  const auto r = run_command(env + " " + mpiexec(np) + " " + squall_bin() + " info --json " + extra);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("4 ranks with --ranks-per-node 2 are 2 nodes", "[launch]") {
  const auto doc = info(4, "--ranks-per-node 2");
  CHECK(doc.at("world_size") == 4);
  CHECK(doc.at("nodes") == 2);
  REQUIRE(doc.at("ranks").size() == 4);
  for (int r = 0; r < 4; ++r) {
    CHECK(doc["ranks"][r].at("rank") == r);
    CHECK(doc["ranks"][r].at("node") == r / 2);
    CHECK(doc["ranks"][r].at("local_rank") == r % 2);
  }
}

TEST_CASE("5 ranks with K=2 are 3 nodes, the last of one rank", "[launch]") {
  const auto doc = info(5, "--ranks-per-node 2");
  CHECK(doc.at("world_size") == 5);
  CHECK(doc.at("nodes") == 3);
  CHECK(doc["ranks"][4].at("node") == 2);
  CHECK(doc["ranks"][4].at("local_size") == 1);
}

TEST_CASE("SQUALL_RANKS_PER_NODE emulates nodes, and the flag wins over it", "[launch]") {
  CHECK(info(4, "", "SQUALL_RANKS_PER_NODE=3").at("nodes") == 2);
  CHECK(info(4, "--ranks-per-node 1", "SQUALL_RANKS_PER_NODE=3").at("nodes") == 4);
  CHECK(info(2, "", "SQUALL_RANKS_PER_NODE=").at("nodes") == 1);
}

TEST_CASE("text output has one line per rank", "[launch]") {
  const auto r = run_command(mpiexec(3) + " " + squall_bin() + " info");
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank) CHECK_THAT(r.out, Catch::Contains("rank " + std::to_string(rank) + " "));
  CHECK_THAT(r.out, Catch::Contains("3 rank(s) on 1 node(s)"));
}

TEST_CASE("a usage error under mpiexec exits 2 and is printed once", "[launch]") {
  const auto r = run_command(mpiexec(2) + " " + squall_bin() + " info --bogus");
  CHECK(r.exit_code != 0);
  std::string::size_type count = 0, pos = 0;
  while ((pos = r.err.find("--bogus", pos)) != std::string::npos) ++count, ++pos;
  CHECK(count == 1);
}

TEST_CASE("a failed call on one rank takes the whole job down with one clear line", "[launch][errors]") {
  struct Case { const char* mode; const char* call; };
  for (const Case c : {Case{"mpi", "MPI_Send"}, Case{"hdf5", "H5Fopen"}, Case{"check", "check failed"}}) {
    const auto r = run_command(mpiexec(2) + " " + SQUALL_FAULT_PROBE + " " + c.mode);
    INFO(c.mode << ": " << r.err);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Catch::Contains("squall: fatal: rank 1 on "));
    CHECK_THAT(r.err, Catch::Contains(c.call));
    CHECK_THAT(r.err, Catch::Contains("fault_probe.cpp:"));
  }
}
