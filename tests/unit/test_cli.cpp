// The squall binary as a user meets it: version, help, errors naming the flag, stubs that
// admit they are stubs, and the JSON of `info` in a job of one rank.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

using squall::test::run_command;
using squall::test::squall_bin;

TEST_CASE("version and help flags succeed", "[cli]") {
  const auto v = run_command(squall_bin() + " --version");
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.out, Catch::StartsWith("squall "));
  const auto h = run_command(squall_bin() + " --help");
  CHECK(h.exit_code == 0);
  for (const char* sub : {"info", "train", "eval", "export", "data", "stage", "bench", "report", "model"})
    CHECK_THAT(h.out, Catch::Contains(sub));
}

TEST_CASE("an unknown flag exits 2 and names the flag", "[cli]") {
  const auto top = run_command(squall_bin() + " --no-such-flag");
  CHECK(top.exit_code == 2);
  CHECK_THAT(top.err, Catch::Contains("--no-such-flag"));
  const auto sub = run_command(squall_bin() + " info --frobnicate");
  CHECK(sub.exit_code == 2);
  CHECK_THAT(sub.err, Catch::Contains("--frobnicate"));
}

TEST_CASE("a bad value exits 2 and names the flag or variable", "[cli]") {
  for (const char* bad : {"-1", "two", "2.5"}) {
    const auto r = run_command(squall_bin() + " info --ranks-per-node " + bad);
    INFO(bad << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--ranks-per-node"));
  }
  const auto env = run_command("SQUALL_RANKS_PER_NODE=lots " + squall_bin() + " info");
  CHECK(env.exit_code == 2);
  CHECK_THAT(env.err, Catch::Contains("SQUALL_RANKS_PER_NODE") && Catch::Contains("lots"));
}

TEST_CASE("an option of one value given twice exits 2 naming it in squall's words", "[cli]") {
  for (const char* command : {" info --ranks-per-node 1 --ranks-per-node 2", " train --ranks-per-node=1 --ranks-per-node 2"}) {
    const auto r = run_command(squall_bin() + command);
    INFO(command << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::StartsWith("squall: error: --ranks-per-node was given 2 times; it takes one value"));
    CHECK_THAT(r.err, !Catch::Contains("At Most"));
  }
}

TEST_CASE("no subcommand, or a group without its subcommand, is a usage error", "[cli]") {
  CHECK(run_command(squall_bin()).exit_code == 2);
  const auto r = run_command(squall_bin() + " data");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("subcommand"));
}

TEST_CASE("a misspelt command exits 2 with the nearest command and the list", "[cli]") {
  const auto top = run_command(squall_bin() + " trian --config x.toml");
  CHECK(top.exit_code == 2);
  CHECK_THAT(top.err, Catch::StartsWith("squall: error: unknown command 'trian'; did you mean 'train'?\n"));
  CHECK_THAT(top.err, Catch::Contains("squall commands: info, train, eval") && Catch::Contains("bench"));
  CHECK_THAT(top.err, !Catch::Contains("not expected"));  // not CLI11's word for it
  CHECK(top.out.empty());
  // Commands of a group.
  const auto data = run_command(squall_bin() + " data labl --in x");
  CHECK(data.exit_code == 2);
  CHECK_THAT(data.err, Catch::Contains("unknown command 'data labl'; did you mean 'data label'?") &&
                           Catch::Contains("squall data commands: ") && Catch::Contains("climate"));
  const auto bench = run_command(squall_bin() + " bench alreduce");
  CHECK(bench.exit_code == 2);
  CHECK_THAT(bench.err, Catch::Contains("unknown command 'bench alreduce'; did you mean 'bench allreduce'?") &&
                            Catch::Contains("squall bench commands: allreduce, loader, centre"));
  // Far from every command: no guess, still the list.
  const auto far = run_command(squall_bin() + " frobnicate");
  CHECK(far.exit_code == 2);
  CHECK_THAT(far.err, Catch::Contains("unknown command 'frobnicate'\n") && !Catch::Contains("did you mean"));
  CHECK_THAT(far.err, Catch::Contains("squall commands: "));
  // What follows a command's flags is the command's own (a value, a positional).
  CHECK(run_command(squall_bin() + " train --help").exit_code == 0);
  CHECK(run_command(squall_bin() + " data --help").exit_code == 0);
  const auto extra = run_command(squall_bin() + " info trian");
  CHECK(extra.exit_code == 2);
  CHECK_THAT(extra.err, !Catch::Contains("unknown command"));
}

TEST_CASE("info --json in a job of one rank", "[cli][info]") {
  const auto r = run_command("SQUALL_RANKS_PER_NODE= " + squall_bin() + " info --json");
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc.at("world_size") == 1);
  CHECK(doc.at("nodes") == 1);
  REQUIRE(doc.at("ranks").size() == 1);
  const auto& rank = doc["ranks"][0];
  CHECK(rank.at("rank") == 0);
  CHECK(rank.at("node") == 0);
  CHECK(rank.at("local_rank") == 0);
  CHECK_FALSE(rank.at("host").get<std::string>().empty());
  CHECK(rank.at("devices").is_array());
  const auto& build = doc.at("build");
  for (const char* key : {"cuda", "cudnn_version", "nccl_version", "mpi_library", "hdf5_version",
                          "hdf5_parallel", "cpu_dnn"})
    CHECK(build.contains(key));
  CHECK_THAT(build.at("mpi_library").get<std::string>(), Catch::Contains("MPI"));
  CHECK_THAT(build.at("cpu_dnn").get<std::string>(), Catch::Contains("oneDNN"));
  CHECK(build.at("hdf5_version").get<std::string>().find('.') != std::string::npos);
  if (build.at("cuda").get<bool>()) {
    CHECK_FALSE(build.at("cudnn_version").get<std::string>().empty());
    CHECK_FALSE(build.at("nccl_version").get<std::string>().empty());
  } else {
    CHECK(build.at("cudnn_version").is_null());
  }
}
