// `squall bench centre` under mpiexec: both homes of the asynchronous centre run side by side and
// report their pushes, and the bench's own checks hold (every node ends with the same centre;
// the window's is the start plus every weighted delta it was sent). On one box the window is
// Open MPI's shared-memory one; where this MPI cannot open a window, the bench says so.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/support/process.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::output_tail;
using squall::test::run_command;
using squall::test::squall_bin;

TEST_CASE("bench centre pushes to a thread-served centre and to MPI windows, side by side", "[launch][outer][async]") {
  // 3 nodes, the last 3x slower; sizes that do not divide among the shards.
  const auto r = run_command("timeout 240 " + mpiexec(3) + " " + squall_bin() +
                             " bench centre --ranks-per-node 1 --floats 1000,40001 --rounds 6 --warmup 1 "
                             "--compute-ms 5 --slow-factor 3 --json");
  INFO(output_tail(r));
  REQUIRE(r.exit_code == 0);
  const json doc = json::parse(r.out);
  CHECK(doc.at("nodes") == 3);
  CHECK(doc.at("rounds") == 6);
  std::set<std::pair<std::string, size_t>> seen;
  for (const json& x : doc.at("results")) {
    INFO(x.dump());
    const std::string t = x.at("transport");
    seen.insert({t, x.at("floats").get<size_t>()});
    if (x.contains("unavailable")) {
      CHECK(t == "window");  // the threads need only point-to-point messages
      WARN("MPI windows unavailable here: " << x.at("unavailable").get<std::string>());
      continue;
    }
    CHECK(x.at("same_centre_everywhere") == true);
    CHECK(x.at("relative_error").get<double>() <= 1e-5);
    const double push = x.at("push_s_fast_median"), round = x.at("round_s_fast_median");
    CHECK(push > 0);
    CHECK(round >= 0.005);  // a round holds the fast node's 5 ms of compute
    CHECK(round >= push);
    CHECK(x.at("push_s_slow_median").get<double>() > 0);
    CHECK(x.at("staleness_mean").get<double>() >= 0);
    CHECK(x.at("staleness_max").get<double>() >= x.at("staleness_mean").get<double>());
  }
  const std::set<std::pair<std::string, size_t>> want{
      {"threads", 1000}, {"threads", 40001}, {"window", 1000}, {"window", 40001}};
  CHECK(seen == want);
}

TEST_CASE("bench centre on one rank is a usage error", "[launch][outer][async]") {
  const auto r = run_command("timeout 60 " + mpiexec(1) + " " + squall_bin() + " bench centre --floats 100");
  INFO(output_tail(r));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("bench centre: run it on 2 or more ranks"));
}
