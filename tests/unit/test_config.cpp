// The run configuration: strict loading, --set overrides, round trip through to_toml.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <algorithm>

#include "src/core/error.hpp"
#include "src/train/config.hpp"

using Catch::Contains;
using squall::train::Config;
using squall::train::load_config;

namespace {

// A config file in a fresh temporary folder, removed at the end of the test.
struct TempConfig {
  std::filesystem::path dir;
  std::string path;
  explicit TempConfig(const std::string& text, const std::string& name = "x.toml") {
    dir = std::filesystem::temp_directory_path() / ("squall-config-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    path = (dir / name).string();
    std::ofstream(path) << text;
  }
  ~TempConfig() { std::filesystem::remove_all(dir); }
};

}  // namespace

TEST_CASE("an empty config is the documented defaults and is valid", "[config]") {
  TempConfig f("");
  const Config c = load_config(f.path, {});
  CHECK(c == Config{});
  CHECK(c.optimizer.name == "sgd");
  CHECK(c.train.batch_size == 64);
  CHECK(c.optimizer.larc_eta == Approx(0.001));
  CHECK(c.schedule.reference_batch == 256);
}

TEST_CASE("a file sets keys of every type", "[config]") {
  TempConfig f(R"(
[run]
dir = "runs/fmnist"
seed = 7
[model]
name = "deeplabv3plus"
aspp_rates = [3, 6, 9]
dropout = 0.25
[train]
epochs = 2
batch_size = 32
[optimizer]
name = "lamb"
lr = 2       # an integer is accepted for a float key
nesterov = true
larc = true
[schedule]
kind = "multistep"
milestones = [100, 200]
[data]
class_weights = [1, 2.5, 3]
[parallel]
algorithm = "local-sgd"
)");
  const Config c = load_config(f.path, {});
  CHECK(c.run.dir == "runs/fmnist");
  CHECK(c.run.seed == 7);
  CHECK(c.model.name == "deeplabv3plus");
  CHECK(c.model.aspp_rates == std::vector<int64_t>{3, 6, 9});
  CHECK(c.model.dropout == 0.25);
  CHECK(c.train.epochs == 2);
  CHECK(c.train.batch_size == 32);
  CHECK(c.optimizer.name == "lamb");
  CHECK(c.optimizer.lr == 2.0);
  CHECK(c.optimizer.nesterov);
  CHECK(c.optimizer.larc);
  CHECK(c.schedule.milestones == std::vector<int64_t>{100, 200});
  CHECK(c.data.class_weights == std::vector<double>{1, 2.5, 3});
  CHECK(c.parallel.algorithm == "local-sgd");
}

TEST_CASE("to_toml round-trips through load_config", "[config]") {
  Config c;
  c.run.dir = "runs/with \"quotes\" and \\ backslash";
  c.run.seed = 123456789012;
  c.optimizer.name = "adamw";
  c.optimizer.lr = 0.1 + 0.2;  // not exactly representable in short decimal
  c.optimizer.eps = 1e-8;
  c.optimizer.weight_decay = 5e-4;
  c.schedule.kind = "cosine";
  c.schedule.min_lr = 1e-6;
  c.schedule.milestones = {3, 5};
  c.model.aspp_rates = {};
  c.data.class_weights = {0.1, 1.0, 1e10};
  c.parallel.alpha = 1.0;
  c.checkpoint.keep = 9;
  TempConfig f(squall::train::to_toml(c));
  const Config back = load_config(f.path, {});
  CHECK(back == c);
  CHECK(squall::train::to_toml(back) == squall::train::to_toml(c));
}

TEST_CASE("set overrides change keys of every type", "[config]") {
  TempConfig f("[optimizer]\nlr = 0.5\n");
  const Config c = load_config(f.path, {"optimizer.lr=0.01", "--set train.batch_size=128",
                                        "optimizer.nesterov=true", "run.dir=runs/unquoted/path",
                                        "model.name=\"resnet20\"", "schedule.milestones=[10, 20, 30]",
                                        "model.name=unet", "run.dir = runs/spaces ",
                                        "data.class_weights=[1, 0.5]", "optimizer.weight_decay=0"});
  CHECK(c.optimizer.lr == 0.01);
  CHECK(c.train.batch_size == 128);
  CHECK(c.optimizer.nesterov);
  CHECK(c.model.name == "unet");  // later overrides win
  CHECK(c.run.dir == "runs/spaces");
  CHECK(c.schedule.milestones == std::vector<int64_t>{10, 20, 30});
  CHECK(c.data.class_weights == std::vector<double>{1, 0.5});
  CHECK(c.optimizer.weight_decay == 0.0);
}

TEST_CASE("an unknown key or section is an error naming it and the file", "[config]") {
  TempConfig f("[train]\nbatchsize = 3\n");
  REQUIRE_THROWS_AS(load_config(f.path, {}), squall::Error);
  REQUIRE_THROWS_WITH(load_config(f.path, {}), Contains(f.path + ": unknown key 'train.batchsize'") &&
                                                   Contains("did you mean 'train.batch_size'"));
  TempConfig g("[optimiser]\nlr = 0.1\n");
  REQUIRE_THROWS_WITH(load_config(g.path, {}), Contains(g.path) && Contains("unknown section '[optimiser]'") &&
                                                   Contains("did you mean 'optimizer'"));
  TempConfig h("seed = 1\n");
  REQUIRE_THROWS_WITH(load_config(h.path, {}), Contains("unknown key 'seed'"));
  REQUIRE_THROWS_WITH(load_config("", {"train.batchsize=3"}),
                      Contains("--set train.batchsize=3: unknown key 'train.batchsize'"));
  REQUIRE_THROWS_WITH(load_config("", {"nosection=3"}), Contains("expected section.key=value"));
}

TEST_CASE("a value of the wrong type is an error naming the key", "[config]") {
  REQUIRE_THROWS_WITH(load_config("", {"optimizer.lr=abc"}),
                      Contains("--set optimizer.lr=abc: optimizer.lr must be a number"));
  REQUIRE_THROWS_WITH(load_config("", {"train.batch_size=1.5"}), Contains("train.batch_size must be an integer"));
  REQUIRE_THROWS_WITH(load_config("", {"optimizer.larc=yes"}), Contains("optimizer.larc must be a boolean"));
  REQUIRE_THROWS_WITH(load_config("", {"schedule.milestones=[1, 2.5]"}),
                      Contains("schedule.milestones must be an array of integers"));
  TempConfig f("[train]\nbatch_size = \"64\"\n");
  REQUIRE_THROWS_WITH(load_config(f.path, {}),
                      Contains(f.path + ": train.batch_size must be an integer") && Contains("line 2"));
  TempConfig g("[model]\nname = 5\n");
  REQUIRE_THROWS_WITH(load_config(g.path, {}), Contains("model.name must be a string"));
}

TEST_CASE("values out of range are rejected by validation", "[config]") {
  REQUIRE_THROWS_WITH(load_config("", {"train.batch_size=0"}), Contains("train.batch_size must be > 0"));
  REQUIRE_THROWS_WITH(load_config("", {"optimizer.lr=-1"}), Contains("optimizer.lr must be > 0"));
  REQUIRE_THROWS_WITH(load_config("", {"optimizer.name=rmsprop"}),
                      Contains("optimizer.name must be one of sgd | adam | adamw | lamb"));
  REQUIRE_THROWS_WITH(load_config("", {"schedule.kind=multistep"}), Contains("schedule.milestones"));
  REQUIRE_THROWS_WITH(load_config("", {"schedule.milestones=[5, 3]"}), Contains("must be increasing"));
  REQUIRE_THROWS_WITH(load_config("", {"parallel.algorithm=easgd"}), Contains("parallel.algorithm must be one of"));
  REQUIRE_THROWS_WITH(load_config("", {"train.epochs=0"}), Contains("nothing to train"));
  CHECK_NOTHROW(load_config("", {"train.epochs=0", "train.max_steps=10"}));
  TempConfig f("[optimizer]\nmomentum = 1.5\n");
  REQUIRE_THROWS_WITH(load_config(f.path, {}), Contains(f.path) && Contains("optimizer.momentum must be in [0, 1)"));
}

TEST_CASE("a missing file or a syntax error names the file", "[config]") {
  REQUIRE_THROWS_WITH(load_config("/nonexistent/squall.toml", {}), Contains("/nonexistent/squall.toml") &&
                                                                      Contains("not found"));
  TempConfig f("[train\nbatch_size = 3\n");
  REQUIRE_THROWS_WITH(load_config(f.path, {}), Contains(f.path + ":1:") && Contains("TOML syntax error"));
}

TEST_CASE("config_keys lists every section.key once", "[config]") {
  const auto keys = squall::train::config_keys();
  CHECK(std::find(keys.begin(), keys.end(), "optimizer.larc_clip") != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "parallel.replicas_per_device") != keys.end());
  std::set<std::string> unique(keys.begin(), keys.end());
  CHECK(unique.size() == keys.size());
}
