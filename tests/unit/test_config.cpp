// The run configuration: strict loading, --set overrides, round trip through to_toml, finite
// numbers only, and no key that does not apply to the chosen model, optimizer or algorithm.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <algorithm>

#include "src/core/error.hpp"
#include "src/config/config.hpp"
#include "src/config/setup.hpp"

using Catch::Contains;
using squall::config::Config;
using squall::config::load_config;
using squall::optim::OptimizerKind;
using Overrides = std::vector<std::string>;

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

TEST_CASE("an unknown model.name is refused where it was set, with the nearest model", "[config]") {
  TempConfig f("[model]\nname = \"resnet2O\"\n");
  REQUIRE_THROWS_WITH(load_config(f.path, {}), Catch::StartsWith(f.path + " (line 2): model.name = \"resnet2O\"") &&
                                                   Catch::Contains("did you mean 'resnet20'?") &&
                                                   Catch::Contains("(models: lenet5 | resnet20 | unet"));
  REQUIRE_THROWS_WITH(load_config(f.path, {"model.name=deeplabv3pluss"}),
                      Catch::StartsWith("--set model.name=deeplabv3pluss: model.name = \"deeplabv3pluss\"") &&
                          Catch::Contains("did you mean 'deeplabv3plus'?"));
  // Far from every model: the list, no guess. A known name set on the command line mends the file's.
  REQUIRE_THROWS_WITH(load_config("", {"model.name=vgg"}), !Catch::Contains("did you mean") && Catch::Contains("unet"));
  CHECK(load_config(f.path, {"model.name=resnet20"}).model.name == "resnet20");
}

TEST_CASE("an empty config is the documented defaults and is valid", "[config]") {
  TempConfig f("");
  const Config c = load_config(f.path, {});
  CHECK(c == Config{});
  CHECK(c.optimizer.name == squall::optim::OptimizerKind::sgd);
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
larc = true
larc_clip = false
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
  CHECK(c.optimizer.name == squall::optim::OptimizerKind::lamb);
  CHECK(c.optimizer.lr == 2.0);
  CHECK(c.optimizer.larc);
  CHECK_FALSE(c.optimizer.larc_clip);
  CHECK(c.schedule.milestones == std::vector<int64_t>{100, 200});
  CHECK(c.data.class_weights == std::vector<double>{1, 2.5, 3});
  CHECK(c.parallel.algorithm == squall::parallel::Algorithm::local_sgd);
}

TEST_CASE("to_toml round-trips through load_config", "[config]") {
  Config c;
  c.run.dir = "runs/with \"quotes\" and \\ backslash";
  c.run.seed = 123456789012;
  c.optimizer.name = squall::optim::OptimizerKind::adamw;
  c.optimizer.lr = 0.1 + 0.2;  // not exactly representable in short decimal
  c.optimizer.eps = 1e-8;
  c.optimizer.weight_decay = 5e-4;
  c.schedule.kind =
      squall::optim::ScheduleKind::multistep;  // every key set below applies (else loading would refuse it)
  c.schedule.milestones = {3, 5};
  c.schedule.gamma = 1.0 / 3.0;
  c.model.name = "deeplabv3plus";
  c.model.aspp_rates = {};
  c.data.class_weights = {0.1, 1.0, 1e10};
  c.parallel.algorithm = squall::parallel::Algorithm::sma;
  c.parallel.alpha = 1.0;
  c.checkpoint.keep = 9;
  TempConfig f(squall::config::to_toml(c));
  const Config back = load_config(f.path, {});
  CHECK(back == c);
  CHECK(squall::config::to_toml(back) == squall::config::to_toml(c));
}

TEST_CASE("set overrides change keys of every type", "[config]") {
  TempConfig f("[optimizer]\nlr = 0.5\n");
  const Config c = load_config(f.path, {"optimizer.lr=0.01", "--set train.batch_size=128",
                                        "optimizer.nesterov=true", "run.dir=runs/unquoted/path",
                                        "model.name=\"resnet20\"", "schedule.kind=multistep",
                                        "schedule.milestones=[10, 20, 30]", "model.name=unet", "run.dir = runs/spaces ",
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
  // The learner group's options: the config's checks are the ones a user sees, naming the keys.
  REQUIRE_THROWS_WITH(load_config("", {"parallel.replicas_per_device=0"}),
                      Contains("parallel.replicas_per_device must be > 0"));
  REQUIRE_THROWS_WITH(load_config("", {"parallel.algorithm=sma", "parallel.period=0"}),
                      Contains("parallel.period must be > 0"));
  REQUIRE_THROWS_WITH(load_config("", {"parallel.algorithm=outer", "parallel.outer.period=0"}),
                      Contains("parallel.outer.period must be > 0"));
  REQUIRE_THROWS_WITH(load_config("", {"parallel.algorithm=outer", "parallel.outer.start_step=-1"}),
                      Contains("parallel.outer.start_step must be >= 0"));
  REQUIRE_THROWS_WITH(load_config("", {"parallel.algorithm=outer", "parallel.outer.async=true",
                                       "parallel.outer.max_staleness=-2"}),
                      Contains("parallel.outer.max_staleness = -2") && Contains(">= 0, or -1 for no bound"));
  REQUIRE_THROWS_WITH(load_config("", {"parallel.algorithm=sma", "parallel.alpha=0"}),
                      Contains("parallel.alpha = 0") && Contains("initial model"));
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
  const auto keys = squall::config::config_keys();
  CHECK(std::find(keys.begin(), keys.end(), "optimizer.larc_clip") != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "parallel.replicas_per_device") != keys.end());
  std::set<std::string> unique(keys.begin(), keys.end());
  CHECK(unique.size() == keys.size());
}

TEST_CASE("a config float that is not finite is refused, naming the key and the value", "[config]") {
  TempConfig f("[optimizer]\nweight_decay = inf\n");
  REQUIRE_THROWS_WITH(load_config(f.path, {}),
                      Contains(f.path + ": optimizer.weight_decay must be a finite number (got inf)") &&
                          Contains("line 2"));
  REQUIRE_THROWS_WITH(load_config("", {"optimizer.lr=nan"}),
                      Contains("--set optimizer.lr=nan: optimizer.lr must be a finite number (got nan)"));
  REQUIRE_THROWS_WITH(load_config("", {"schedule.kind=cosine", "schedule.min_lr=-inf"}),
                      Contains("schedule.min_lr must be a finite number (got -inf)"));
  REQUIRE_THROWS_WITH(load_config("", {"checkpoint.every_minutes=+inf"}),
                      Contains("checkpoint.every_minutes must be a finite number (got inf)"));
  // Every element of a float array, named by its index.
  TempConfig g("[data]\nclass_weights = [1.0, nan, 2.0]\n");
  REQUIRE_THROWS_WITH(load_config(g.path, {}),
                      Contains(g.path + ": data.class_weights[1] must be a finite number (got nan)") &&
                          Contains("line 2"));
  REQUIRE_THROWS_WITH(load_config("", {"data.class_weights=[1, 2, -inf]"}),
                      Contains("data.class_weights[2] must be a finite number (got -inf)"));
  // validate() on a config built in code says the same.
  Config c;
  c.parallel.bucket_mb = std::numeric_limits<double>::infinity();
  REQUIRE_THROWS_WITH(squall::config::validate(c, "code"),
                      Contains("code: parallel.bucket_mb must be a finite number (got inf)"));
}

TEST_CASE("a config key that does not apply is refused, naming it and what it applies to", "[config]") {
  struct Case {
    Overrides sets;  // the last one sets the key that does not apply
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"optimizer.name=adam", "optimizer.momentum=0.5"},
       "optimizer.momentum applies to optimizer.name = sgd, not adam"},
      {{"optimizer.name=lamb", "optimizer.nesterov=true"},
       "optimizer.nesterov applies to optimizer.name = sgd, not lamb"},
      {{"optimizer.beta1=0.8"}, "optimizer.beta1 applies to optimizer.name = adam, adamw or lamb, not sgd"},
      {{"optimizer.beta2=0.99"}, "optimizer.beta2 applies to optimizer.name = adam, adamw or lamb, not sgd"},
      {{"optimizer.eps=1e-6"}, "optimizer.eps applies to optimizer.name = adam, adamw or lamb, not sgd"},
      {{"optimizer.larc_eta=0.01"}, "optimizer.larc_eta applies to optimizer.larc = true, not false"},
      {{"optimizer.larc_clip=false"}, "optimizer.larc_clip applies to optimizer.larc = true, not false"},
      {{"schedule.milestones=[10]"}, "schedule.milestones applies to schedule.kind = multistep, not constant"},
      {{"schedule.kind=cosine", "schedule.gamma=0.5"},
       "schedule.gamma applies to schedule.kind = multistep, not cosine"},
      {{"schedule.milestone_unit=epochs"},
       "schedule.milestone_unit applies to schedule.kind = multistep, not constant"},
      {{"schedule.kind=multistep", "schedule.milestones=[5]", "schedule.min_lr=0.001"},
       "schedule.min_lr applies to schedule.kind = cosine, not multistep"},
      {{"schedule.reference_batch=512"},
       "schedule.reference_batch applies to schedule.scale_lr_with_batch = true, not false"},
      {{"train.precision=bf16", "train.loss_scale=1024"},
       "train.loss_scale applies to train.precision = fp16, not bf16"},
      {{"train.loss_scale_window=100"}, "train.loss_scale_window applies to train.precision = fp16, not fp32"},
      {{"model.aspp_rates=[1, 2]"}, "model.aspp_rates applies to model.name = deeplabv3plus*, not lenet5"},
      {{"model.name=unet", "model.aspp_rates=[1, 2]"},
       "model.aspp_rates applies to model.name = deeplabv3plus*, not unet"},
      {{"model.width=8"}, "model.width applies to model.name = resnet20, unet or deeplabv3plus, not lenet5"},
      {{"model.name=deeplabv3plus-resnet50", "model.depth=3"},
       "model.depth applies to model.name = resnet20, unet or deeplabv3plus, not deeplabv3plus-resnet50"},
      {{"parallel.alpha=0.5"}, "parallel.alpha applies to parallel.algorithm = sma, not ssgd"},
      {{"parallel.algorithm=local-sgd", "parallel.centre_rate=0.5"},
       "parallel.centre_rate applies to parallel.algorithm = sma, not local-sgd"},
      {{"parallel.momentum=0.5"}, "parallel.momentum applies to parallel.algorithm = sma, not ssgd"},
      {{"parallel.period=4"}, "parallel.period applies to parallel.algorithm = sma or local-sgd, not ssgd"},
      {{"parallel.algorithm=sma", "parallel.start_step=10"},
       "parallel.start_step applies to parallel.algorithm = local-sgd, not sma"},
      {{"parallel.autotune_threshold=0.1"},
       "parallel.autotune_threshold applies to parallel.autotune = true, not false"},
      {{"parallel.max_replicas_per_device=4"},
       "parallel.max_replicas_per_device applies to parallel.autotune = true, not false"},
      {{"run.backend=cuda", "parallel.device_allreduce=device-hier", "parallel.cross_node=halving-doubling"},
       "parallel.cross_node applies to parallel.device_allreduce = host, not device-hier"},
  };
  for (const auto& c : cases) {
    INFO(c.message);
    REQUIRE_THROWS_WITH(load_config("", c.sets), Contains("--set " + c.sets.back() + ": " + c.message) &&
                                                     Contains("remove it, or change"));
  }
  // From a file: the file and the line that set it.
  TempConfig f("[optimizer]\nname = \"sgd\"\nbeta1 = 0.8\n");
  REQUIRE_THROWS_WITH(load_config(f.path, {}),
                      Contains(f.path + ": optimizer.beta1 applies to optimizer.name = adam, adamw or lamb, not sgd "
                                        "(line 3): remove it, or change optimizer.name"));
  // Set in the file, made inapplicable by an override of its decider: still the file's line.
  TempConfig g("[optimizer]\nname = \"adam\"\nbeta2 = 0.99\n");
  REQUIRE_THROWS_WITH(load_config(g.path, {"optimizer.name=sgd"}),
                      Contains(g.path + ": optimizer.beta2 applies to optimizer.name = adam, adamw or lamb, not sgd "
                                        "(line 3)"));
}

TEST_CASE("config keys that apply, and keys at their default, are accepted", "[config]") {
  const std::vector<Overrides> applying = {
      {"optimizer.name=adamw", "optimizer.beta1=0.8", "optimizer.beta2=0.99", "optimizer.eps=1e-6"},
      {"optimizer.momentum=0.5", "optimizer.nesterov=true"},
      {"optimizer.larc=true", "optimizer.larc_eta=0.01", "optimizer.larc_clip=false"},
      {"schedule.kind=multistep", "schedule.milestones=[2]", "schedule.gamma=0.5", "schedule.milestone_unit=epochs"},
      {"schedule.kind=cosine", "schedule.min_lr=0.001"},
      {"schedule.scale_lr_with_batch=true", "schedule.reference_batch=512"},
      {"train.precision=fp16", "train.loss_scale=1024", "train.loss_scale_window=100"},
      {"model.name=deeplabv3plus", "model.aspp_rates=[1, 2]", "model.width=8", "model.depth=3"},
      {"model.name=deeplabv3plus-resnet50", "model.aspp_rates=[1, 2]"},
      {"model.name=resnet20", "model.width=8", "model.depth=2"},
      {"model.name=unet", "model.width=8", "model.depth=2"},
      {"parallel.algorithm=sma", "parallel.period=4", "parallel.alpha=0.5", "parallel.centre_rate=0.5",
       "parallel.momentum=0.5"},
      {"parallel.algorithm=local-sgd", "parallel.period=4", "parallel.start_step=10"},
      {"parallel.autotune=true", "parallel.autotune_threshold=0.1", "parallel.max_replicas_per_device=4"},
      // Without the auto-tuner the learner count is replicas_per_device, uncapped; the cap set
      // equal to it (what validation used to ask for) says nothing new and is accepted.
      {"parallel.replicas_per_device=12"},
      {"parallel.replicas_per_device=12", "parallel.max_replicas_per_device=12"},
      {"parallel.cross_node=ring"},
      {"run.backend=cuda", "parallel.device_allreduce=nccl", "parallel.cross_node=auto"},
      // Set, then set back to the default.
      {"optimizer.beta1=0.8", "optimizer.beta1=0.9"},
  };
  for (const auto& sets : applying) {
    INFO(sets.back());
    CHECK_NOTHROW(load_config("", sets));
  }
  // Keys that do not apply, at their default values.
  TempConfig f("[optimizer]\nname = \"adam\"\nmomentum = 0.9\nnesterov = false\n"
               "[parallel]\nalpha = 0.1\nperiod = 1\nmax_replicas_per_device = 8\n"
               "[model]\naspp_rates = [6, 12, 18]\nwidth = 0\n");
  CHECK_NOTHROW(load_config(f.path, {}));
  // The auto-tuner's cap is still checked against the starting learner count.
  REQUIRE_THROWS_WITH(load_config("", {"parallel.autotune=true", "parallel.replicas_per_device=12"}),
                      Contains("parallel.max_replicas_per_device must be >= parallel.replicas_per_device"));
}

TEST_CASE("a resolved config (every key written) loads back", "[config]") {
  // to_toml writes the keys that do not apply too, at their defaults.
  for (const auto optimizer : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::lamb})
    for (const auto& [algorithm_name, algorithm] : squall::parallel::k_algorithms.entries()) {
      Config c;
      c.optimizer.name = optimizer;
      c.parallel.algorithm = algorithm;
      TempConfig f(squall::config::to_toml(c));
      INFO(squall::optim::k_optimizer_kinds.name(optimizer) << " " << algorithm_name);
      CHECK(load_config(f.path, {}) == c);
    }
  // A config built in code with a key that does not apply is written, but not read back.
  Config c;
  c.optimizer.beta1 = 0.5;
  TempConfig f(squall::config::to_toml(c));
  REQUIRE_THROWS_WITH(load_config(f.path, {}), Contains(f.path + ": optimizer.beta1 applies to optimizer.name"));
}

TEST_CASE("parallel.bucket_mb: 0 takes the backend's default, a size is kept, a negative one refused", "[config]") {
  Config c;
  CHECK(c.parallel.bucket_mb == 0.0);
  CHECK(squall::config::bucket_mb_for(c.parallel, false) == 1.0);
  CHECK(squall::config::bucket_mb_for(c.parallel, true) == 25.0);
  c.parallel.bucket_mb = 4.0;
  CHECK(squall::config::bucket_mb_for(c.parallel, false) == 4.0);
  CHECK(squall::config::bucket_mb_for(c.parallel, true) == 4.0);
  REQUIRE_THROWS_WITH(load_config("", {"parallel.bucket_mb=-1"}), Contains("parallel.bucket_mb"));
}

TEST_CASE("the config fills the dataset's opening options and the run log's, one function each", "[config]") {
  const Config c = load_config("", {"data.normalization=minmax", "data.cache_mb=7",
                                    "data.netcdf_labels=masks", "data.channels=[\"PSL=msl\", \"U850=u@850\"]",
                                    "run.dir=runs/x",
                                    "run.tensorboard=false", "run.mllog=true", "train.log_every_steps=7"});
  squall::data::Normalization train_stats;
  train_stats.kind = "zscore";
  train_stats.source = "the training set";
  const squall::input::DatasetOptions d = squall::config::dataset_options(c.data, &train_stats, false);
  CHECK(d.normalize);
  CHECK(d.normalization == squall::data::NormalizationKind::minmax);
  CHECK(d.cache_mb == 7);
  REQUIRE(d.fixed.has_value());
  CHECK(d.fixed->source == "the training set");
  CHECK(d.netcdf_labels == "masks");
  CHECK(d.netcdf_channels == std::vector<std::string>{"PSL=msl", "U850=u@850"});
  // Raw: unnormalised and uncached, only to look at the data's shape; the netCDF keys still apply.
  const Config plain = load_config("", {"data.netcdf_variables=PSL=slp", "data.netcdf_labels=masks"});
  const squall::input::DatasetOptions raw = squall::config::dataset_options(plain.data, &train_stats, true);
  CHECK(!raw.normalize);
  CHECK(raw.cache_mb == 0);
  CHECK(!raw.fixed.has_value());
  CHECK(raw.netcdf_variables == "PSL=slp");
  CHECK(raw.netcdf_labels == "masks");
  const squall::input::DatasetOptions opened = squall::config::dataset_options(plain.data, nullptr, false);
  CHECK(opened.normalize);
  CHECK(opened.cache_mb == 1024);
  CHECK(!opened.fixed.has_value());

  const squall::records::RunLogOptions r = squall::config::run_log_options(c);
  CHECK(r.dir == std::filesystem::path("runs/x"));
  CHECK(r.config_toml == squall::config::to_toml(c));
  CHECK(!r.tensorboard);
  CHECK(r.mllog);
  CHECK(r.log_every == 7);
}
