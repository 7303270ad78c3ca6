// `squall data fashion-mnist` and `squall data inspect`, run as a user would.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "io/input/open_dataset.hpp"
#include "tests/support/process.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using Catch::Contains;
using squall::test::run_command;
using squall::test::squall_bin;

namespace {

namespace fs = std::filesystem;

struct TempDir : squall::test::TempDir {
  TempDir() : squall::test::TempDir("squall-data-cli") {}
};

}  // namespace

TEST_CASE("data fashion-mnist writes shards that data inspect reads whole", "[io]") {
  const std::string src = squall::input::k_debian_fashion_mnist_dir;
  if (!fs::exists(src + "/train-images-idx3-ubyte.gz") && !fs::exists(src + "/train-images-idx3-ubyte"))
    SQUALL_SKIP(src << " missing (install dataset-fashion-mnist)");
  TempDir d;
  const std::string out = (d.path / "fm").string();
  const auto conv = run_command(squall_bin() + " data fashion-mnist --out " + out + " --shards 3");
  INFO(conv.out << conv.err);
  REQUIRE(conv.exit_code == 0);
  for (const char* split : {"train", "test"})
    for (int i = 0; i < 3; ++i) {
      const std::string name = std::string(split) + "-0000" + std::to_string(i) + "-of-00003.h5";
      CHECK(fs::exists(fs::path(out) / name));
    }

  const auto ins = run_command(squall_bin() + " data inspect --json " + out);
  INFO(ins.out << ins.err);
  REQUIRE(ins.exit_code == 0);
  const auto j = nlohmann::json::parse(ins.out);
  CHECK(j["format"] == "shards");
  CHECK(j["files"].size() == 6);
  CHECK(j["samples"] == 70000);
  CHECK(j["splits"]["train"] == 60000);
  CHECK(j["splits"]["test"] == 10000);
  CHECK(j["shape"] == nlohmann::json::array({1, 28, 28}));
  CHECK(j["dtype"] == "uint8");
  CHECK(j["classes"] == 10);
  CHECK(j["channels"] == 1);
  CHECK(j["errors"].empty());
  // Stored statistics are the training set's raw pixels: open_idx's 0.2860 and 0.3530 x 255.
  CHECK(j["statistics"]["stored"]["mean"][0].get<double>() == Approx(0.2860 * 255).epsilon(1e-3));
  CHECK(j["statistics"]["stored"]["std"][0].get<double>() == Approx(0.3530 * 255).epsilon(1e-3));
  for (int i = 0; i < 10; ++i) CHECK(j["label_counts"][i] == 7000);

  SECTION("a corrupted copy fails and is named") {
    const std::string bad = (d.path / "bad").string();
    fs::create_directories(bad);
    for (const auto& e : fs::directory_iterator(out)) fs::copy_file(e.path(), fs::path(bad) / e.path().filename());
    const fs::path victim = fs::path(bad) / "train-00001-of-00003.h5";
    fs::resize_file(victim, fs::file_size(victim) - 4096);
    const auto r = run_command(squall_bin() + " data inspect " + bad);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.out, Contains(victim.string()));
    const auto rj = run_command(squall_bin() + " data inspect --json " + bad);
    CHECK(rj.exit_code == 1);
    const auto jj = nlohmann::json::parse(rj.out);
    REQUIRE_FALSE(jj["errors"].empty());
    CHECK_THAT(jj["errors"][0].get<std::string>(), Contains(victim.string()));
  }
}

TEST_CASE("data inspect on nothing readable exits 1", "[io]") {
  TempDir d;
  const auto r = run_command(squall_bin() + " data inspect " + d.path.string() + " " + (d.path / "missing").string());
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Contains("missing: does not exist"));
  CHECK(run_command(squall_bin() + " data inspect").exit_code == 2);
  CHECK(run_command(squall_bin() + " data fashion-mnist --out " + d.path.string() + " --shards 0").exit_code == 2);
}
