// The config's enumerated keys read, listed and written through their tables; [train.target];
// keys that contradict each other, from the config alone (validate, load_config) and against
// the run's step plan (check_against_plan). Every refusal names both keys and their values.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include "src/core/enum_table.hpp"
#include "src/core/error.hpp"
#include "src/core/suggest.hpp"
#include "src/config/config.hpp"

using Catch::Contains;
using squall::config::Config;
using squall::config::load_config;
using Overrides = std::vector<std::string>;
namespace optim = squall::optim;
namespace parallel = squall::parallel;
namespace config = squall::config;

namespace {

struct TempConfig {
  std::filesystem::path dir;
  std::string path;
  explicit TempConfig(const std::string& text) {
    dir = std::filesystem::temp_directory_path() / ("squall-config-checks-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    path = (dir / "x.toml").string();
    std::ofstream(path) << text;
  }
  ~TempConfig() { std::filesystem::remove_all(dir); }
};

// "section.key" -> the value text to_toml wrote, sub-tables ([train.target]) included.
std::map<std::string, std::string> written(const std::string& toml) {
  std::map<std::string, std::string> out;
  std::istringstream in(toml);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) out[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

// Every enumerated key: its table's names, and the other keys a value needs to be valid and
// applicable (a milestone for multistep, a value for a target, a GPU backend for a device sum).
struct EnumKey {
  std::string key;
  std::vector<std::string> names;
  std::function<Overrides(const std::string& value)> needs = [](const std::string&) { return Overrides{}; };
};

std::vector<EnumKey> enum_keys() {
  return {
      {"run.backend", squall::nn::k_backend_kinds.names()},
      {"run.cpu_streams", squall::nn::k_cpu_stream_modes.names()},
      {"data.normalization", squall::data::k_normalization_kinds.names()},
      {"data.sampling", squall::input::k_sampling_modes.names()},
      {"model.layout", config::k_layout_choices.names()},
      {"train.precision", config::k_precisions.names()},
      {"train.nonfinite", config::k_nonfinite_policies.names()},
      {"train.target.metric", config::k_target_metrics.names(),
       [](const std::string& v) { return v == "none" ? Overrides{} : Overrides{"train.target.value=0.5"}; }},
      {"optimizer.name", optim::k_optimizer_kinds.names()},
      {"schedule.kind", optim::k_schedule_kinds.names(),
       [](const std::string& v) { return v == "multistep" ? Overrides{"schedule.milestones=[2]"} : Overrides{}; }},
      {"schedule.milestone_unit", optim::k_milestone_units.names(),
       [](const std::string&) { return Overrides{"schedule.kind=multistep", "schedule.milestones=[2]"}; }},
      {"parallel.algorithm", parallel::k_algorithms.names()},
      {"parallel.device_allreduce", squall::mpi::k_allreduce_kinds.names(),
       [](const std::string&) { return Overrides{"run.backend=cuda"}; }},
      {"parallel.comm_precision", config::k_comm_precisions.names()},
      {"parallel.cross_node", squall::mpi::k_cross_algorithms.names()},
  };
}

}  // namespace

TEST_CASE("suggestions: near misses only, case and a swap of neighbours are one edit", "[config][suggest]") {
  CHECK(squall::edit_distance("trian", "train") == 1);
  CHECK(squall::edit_distance("SGD", "sgd") == 0);
  CHECK(squall::edit_distance("alreduce", "allreduce") == 1);
  CHECK(squall::edit_distance("", "abc") == 3);
  CHECK(squall::nearest("adma", {"sgd", "adam", "adamw"}) == "adam");
  CHECK(squall::nearest("rmsprop", {"sgd", "adam", "adamw"}).empty());
  CHECK(squall::did_you_mean("lamp", {"sgd", "lamb"}) == "; did you mean 'lamb'?");
  CHECK(squall::did_you_mean("xyz", {"sgd", "lamb"}).empty());
}

TEST_CASE("an enum table parses its names, names its values, and refuses anything else helpfully", "[config][enum]") {
  enum class Colour { red, green };
  constexpr auto colours = squall::enum_table<Colour>({{"red", Colour::red}, {"green", Colour::green}});
  CHECK(colours.parse("green", "paint.colour", "x.toml") == Colour::green);
  CHECK(std::string(colours.name(Colour::red)) == "red");
  CHECK(std::string(colours.name(static_cast<Colour>(7))) == "?");
  CHECK(colours.names() == std::vector<std::string>{"red", "green"});
  CHECK(colours.list() == "red | green");
  CHECK(colours.find("Red") == nullptr);  // names are exact
  REQUIRE_THROWS_AS(colours.parse("gren", "paint.colour", "x.toml"), squall::UsageError);
  REQUIRE_THROWS_WITH(colours.parse("gren", "paint.colour", "x.toml", " (line 3)"),
                      "x.toml: paint.colour must be one of red | green (got \"gren\") (line 3); did you mean 'green'?");
  REQUIRE_THROWS_WITH(colours.parse("blue", "--colour", ""), "--colour must be one of red | green (got \"blue\")");
}

TEST_CASE("every enum key lists its values, suggests the near one, and round-trips every value", "[config][enum]") {
  for (const EnumKey& e : enum_keys()) {
    INFO(e.key);
    REQUIRE(e.names.size() >= 2);
    const std::string list = squall::join_names(e.names);
    // A value no table names: the key, the value and every allowed one.
    REQUIRE_THROWS_AS(load_config("", {e.key + "=bogus-value"}), squall::UsageError);
    REQUIRE_THROWS_WITH(load_config("", {e.key + "=bogus-value"}),
                        Contains("--set " + e.key + "=bogus-value: " + e.key + " must be one of " + list +
                                 " (got \"bogus-value\")"));
    for (const std::string& name : e.names) {
      INFO(name);
      // A near miss (the name in capitals: names are exact) gets it suggested.
      std::string upper = name;
      for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      REQUIRE_THROWS_WITH(load_config("", {e.key + "=" + upper}), Contains("did you mean '" + name + "'?"));
      // The value, from --set and from a file, written back by to_toml under its section.
      Overrides sets = e.needs(name);
      sets.push_back(e.key + "=" + name);
      const Config c = load_config("", sets);
      const std::string toml = config::to_toml(c);
      CHECK(written(toml).at(e.key) == "\"" + name + "\"");
      TempConfig f(toml);
      CHECK(load_config(f.path, {}) == c);
      CHECK(config::to_toml(load_config(f.path, {})) == toml);
    }
  }
}

TEST_CASE("an enum key in a file: the line, and a wrong type lists the values", "[config][enum]") {
  TempConfig f("[optimizer]\nlr = 0.1\nname = \"adma\"\n");
  REQUIRE_THROWS_WITH(load_config(f.path, {}),
                      Contains(f.path + ": optimizer.name must be one of sgd | adam | adamw | lamb (got \"adma\") "
                                        "(line 3); did you mean 'adam'?"));
  TempConfig g("[train]\nprecision = 16\n");
  REQUIRE_THROWS_WITH(load_config(g.path, {}), Contains(g.path + ": train.precision must be one of fp32 | bf16 | fp16 "
                                                               "(got integer 16) (line 2)"));
  // --set takes the text as it is: 16 is not a precision's name.
  REQUIRE_THROWS_WITH(load_config("", {"train.precision=16"}), Contains("(got \"16\")"));
  // Quoted or not, a name is a name.
  CHECK(load_config("", {"parallel.algorithm=\"local-sgd\""}).parallel.algorithm == parallel::Algorithm::local_sgd);
  CHECK(load_config("", {"run.backend=auto"}).run.backend == squall::nn::BackendKind::auto_);
}

TEST_CASE("the enum keys' defaults are written with the names an old config.toml holds", "[config][enum]") {
  const auto w = written(config::to_toml(Config{}));
  const std::map<std::string, std::string> expected = {
      {"run.backend", "\"cpu\""},           {"run.cpu_streams", "\"inline\""},   {"data.normalization", "\"zscore\""},
      {"data.sampling", "\"global\""},      {"model.layout", "\"auto\""},        {"train.precision", "\"fp32\""},
      {"train.nonfinite", "\"stop\""},      {"optimizer.name", "\"sgd\""},       {"schedule.kind", "\"constant\""},
      {"schedule.milestone_unit", "\"steps\""}, {"parallel.algorithm", "\"ssgd\""},
      {"parallel.device_allreduce", "\"host\""}, {"parallel.comm_precision", "\"fp32\""},
      {"parallel.cross_node", "\"auto\""},
      {"train.target.metric", "\"none\""},  {"train.target.value", "0.0"},       {"run.tensorboard", "true"},
      {"run.mllog", "false"}};
  for (const auto& [key, value] : expected) {
    INFO(key);
    CHECK(w.at(key) == value);
  }
}

TEST_CASE("run.tensorboard and run.mllog: booleans with their defaults", "[config]") {
  const Config d;
  CHECK(d.run.tensorboard);
  CHECK_FALSE(d.run.mllog);
  const Config c = load_config("", {"run.tensorboard=false", "run.mllog=true"});
  CHECK_FALSE(c.run.tensorboard);
  CHECK(c.run.mllog);
  REQUIRE_THROWS_WITH(load_config("", {"run.mllog=yes"}), Contains("run.mllog must be a boolean"));
  REQUIRE_THROWS_WITH(load_config("", {"run.tensorbord=false"}), Contains("did you mean 'run.tensorboard'?"));
}

TEST_CASE("[train.target]: a sub-table of [train], set by a file or --set, written after [train]", "[config][target]") {
  TempConfig f("[train]\nepochs = 2\n\n[train.target]\nmetric = \"miou\"\nvalue = 0.8\n");
  const Config c = load_config(f.path, {});
  CHECK(c.train.epochs == 2);
  CHECK(c.train.target.metric == config::TargetMetric::miou);
  CHECK(c.train.target.value == 0.8);
  // Dotted keys and inline tables are the same table to TOML.
  TempConfig dotted("[train]\ntarget.metric = \"accuracy\"\ntarget.value = 0.9\n");
  CHECK(load_config(dotted.path, {}).train.target.metric == config::TargetMetric::accuracy);
  TempConfig inline_table("[train]\ntarget = { metric = \"accuracy\", value = 0.9 }\n");
  CHECK(load_config(inline_table.path, {}).train.target.value == 0.9);
  const Config s = load_config("", {"train.target.metric=accuracy", "train.target.value=0.85"});
  CHECK(s.train.target.metric == config::TargetMetric::accuracy);
  CHECK(s.train.target.value == 0.85);

  const std::string toml = config::to_toml(c);
  const auto train_at = toml.find("\n[train]\n"), target_at = toml.find("\n[train.target]\n"),
             optimizer_at = toml.find("\n[optimizer]\n");
  REQUIRE(target_at != std::string::npos);
  CHECK(train_at < target_at);
  CHECK(target_at < optimizer_at);
  CHECK(toml.find("metric = \"miou\"\nvalue = 0.8\n") == target_at + std::string("\n[train.target]\n").size());
  TempConfig back(toml);
  CHECK(load_config(back.path, {}) == c);
  const auto keys = config::config_keys();
  CHECK(std::find(keys.begin(), keys.end(), "train.target.metric") != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "train.target.value") != keys.end());
}

TEST_CASE("[train.target]: unknown keys, wrong shapes and values out of range are refused", "[config][target]") {
  TempConfig typo("[train.target]\nmetrik = \"miou\"\n");
  REQUIRE_THROWS_WITH(load_config(typo.path, {}),
                      Contains(typo.path + ": unknown key 'train.target.metrik' (line 2)") &&
                          Contains("did you mean 'train.target.metric'?"));
  REQUIRE_THROWS_WITH(load_config("", {"train.target.valeu=0.5"}),
                      Contains("unknown key 'train.target.valeu'") && Contains("did you mean 'train.target.value'?"));
  TempConfig parent_typo("[train]\ntargte.metric = \"miou\"\n");
  REQUIRE_THROWS_WITH(load_config(parent_typo.path, {}),
                      Contains("unknown key 'train.targte'") && Contains("did you mean 'train.target'?"));
  TempConfig not_a_table("[train]\ntarget = 0.9\n");
  REQUIRE_THROWS_WITH(load_config(not_a_table.path, {}),
                      Contains("'train.target' must be a section ([train.target]) (line 2)"));
  REQUIRE_THROWS_WITH(load_config("", {"train.target.metric=mIoU"}),
                      Contains("train.target.metric must be one of none | accuracy | miou (got \"mIoU\")") &&
                          Contains("did you mean 'miou'?"));
  // A metric needs a value in (0, 1].
  for (const char* bad : {"0", "-0.1", "1.5"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(load_config("", {"train.target.metric=accuracy", std::string("train.target.value=") + bad}),
                        Contains("train.target.value must be in (0, 1] with train.target.metric = accuracy"));
  }
  REQUIRE_THROWS_WITH(load_config("", {"train.target.metric=miou"}),
                      Contains("train.target.value must be in (0, 1] with train.target.metric = miou (got 0.0)"));
  CHECK_NOTHROW(load_config("", {"train.target.metric=accuracy", "train.target.value=1"}));
  // A value without a metric does not apply.
  REQUIRE_THROWS_WITH(load_config("", {"train.target.value=0.5"}),
                      Contains("--set train.target.value=0.5: train.target.value applies to train.target.metric = "
                               "accuracy or miou, not none") &&
                          Contains("remove it, or change train.target.metric"));
  TempConfig stray("[train.target]\nvalue = 0.5\n");
  REQUIRE_THROWS_WITH(load_config(stray.path, {}), Contains(stray.path + ": train.target.value applies to") &&
                                                       Contains("(line 2)"));
}

TEST_CASE("keys that contradict each other are refused, naming both and their values", "[config][contradiction]") {
  struct Case {
    Overrides sets;
    std::vector<std::string> named;  // both keys with their values, and what to change
  };
  const std::vector<Case> cases = {
      {{"train.max_steps=100", "schedule.warmup_steps=150"},
       {"schedule.warmup_steps = 150 is longer than the whole run (train.max_steps = 100)", "never reach its peak",
        "make schedule.warmup_steps at most 100 steps"}},
      {{"train.max_steps=100", "train.eval_every_steps=101"},
       {"train.eval_every_steps = 101 is longer than the whole run (train.max_steps = 100)",
        "set train.eval_every_steps to at most 100, or 0"}},
      {{"train.max_steps=100", "checkpoint.every_steps=200", "checkpoint.at_end=false"},
       {"checkpoint.every_steps = 200 is longer than the whole run (train.max_steps = 100)",
        "checkpoint.at_end = false", "would write no checkpoint", "or checkpoint.at_end = true"}},
      {{"train.max_steps=100", "schedule.kind=multistep", "schedule.milestones=[50, 100]"},
       {"schedule.milestones = [50, 100] has 100, not before the end of the run (train.max_steps = 100)",
        "remove it, or train longer"}},
      {{"train.epochs=3", "schedule.kind=multistep", "schedule.milestone_unit=epochs", "schedule.milestones=[1, 3]"},
       {"schedule.milestones = [1, 3] has 3 (schedule.milestone_unit = epochs), not before the end of the run "
        "(train.epochs = 3)"}},
      {{"schedule.kind=cosine", "schedule.min_lr=0.1"},
       {"schedule.min_lr = 0.1 is above optimizer.lr = 0.05", "set schedule.min_lr below optimizer.lr"}},
      {{"parallel.device_allreduce=nccl"},
       {"parallel.device_allreduce = nccl sums GPU memory, but run.backend = cpu",
        "set run.backend = cuda (or auto), or parallel.device_allreduce = host"}},
      {{"parallel.algorithm=outer", "parallel.outer.async=true", "parallel.outer.streaming=true"},
       {"parallel.outer.streaming and parallel.outer.async are two ways of hiding the outer step", "set one of them"}},
      {{"parallel.algorithm=outer", "parallel.outer.max_staleness=2"},
       {"parallel.outer.max_staleness = 2 bounds the asynchronous outer steps, and parallel.outer.async = false",
        "set parallel.outer.async = true"}},
      {{"parallel.algorithm=outer", "parallel.outer.async=true", "parallel.spatial=[2, 1]"},
       {"parallel.outer.async with parallel.spatial = [2, 1]", "set parallel.spatial = [1, 1]"}},
  };
  for (const auto& c : cases) {
    INFO(c.named.front());
    REQUIRE_THROWS_AS(load_config("", c.sets), squall::UsageError);
    for (const auto& words : c.named) REQUIRE_THROWS_WITH(load_config("", c.sets), Contains(words));
    REQUIRE_THROWS_WITH(load_config("", c.sets), Contains("<defaults> with --set overrides: "));
    // validate() on the same config says the same; parse_config reads it (a stored config must
    // read again whatever a later squall checks).
    Config built = load_config("", {});
    for (const auto& s : c.sets) squall::config::apply_override(built, s);
    REQUIRE_THROWS_WITH(config::validate(built, "code"), Contains("code: " + c.named.front()));
    TempConfig stored(config::to_toml(built));
    std::ifstream in(stored.path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(config::parse_config(text, "stored") == built);
    REQUIRE_THROWS_WITH(load_config(stored.path, {}), Contains(stored.path + ": " + c.named.front()));
  }
}

TEST_CASE("settings at the edge of a contradiction are accepted", "[config][contradiction]") {
  const std::vector<Overrides> fine = {
      {"train.max_steps=100", "schedule.warmup_steps=100"},  // the peak at the last step
      {"train.max_steps=100", "train.eval_every_steps=100"},
      {"train.max_steps=100", "checkpoint.every_steps=100", "checkpoint.at_end=false"},
      {"train.max_steps=100", "checkpoint.every_steps=200"},  // at_end writes one
      {"train.max_steps=100", "checkpoint.every_steps=200", "checkpoint.at_end=false", "checkpoint.every_minutes=30"},
      {"train.max_steps=100", "schedule.kind=multistep", "schedule.milestones=[50, 99]"},
      {"train.epochs=3", "schedule.kind=multistep", "schedule.milestone_unit=epochs", "schedule.milestones=[1, 2]"},
      // Without train.max_steps the run's length is the plan's to know (check_against_plan).
      {"schedule.warmup_steps=100000", "train.eval_every_steps=100000"},
      {"schedule.kind=multistep", "schedule.milestones=[100000]"},
      {"schedule.kind=cosine", "schedule.min_lr=0.05"},
      // Under the linear scaling rule the peak depends on the job's size.
      {"schedule.kind=cosine", "schedule.min_lr=0.1", "schedule.scale_lr_with_batch=true"},
      {"parallel.device_allreduce=nccl", "run.backend=cuda"},
      {"parallel.device_allreduce=device-hier", "run.backend=auto"},
      {"parallel.algorithm=outer", "parallel.outer.async=true", "parallel.outer.max_staleness=0"},
      {"parallel.algorithm=outer", "parallel.outer.async=true", "parallel.outer.max_staleness=-1"},
  };
  for (const auto& sets : fine) {
    INFO(sets.back());
    CHECK_NOTHROW(load_config("", sets));
  }
}

TEST_CASE("check_against_plan: the run's real length against the warm-up, the intervals and the milestones",
          "[config][contradiction]") {
  using config::check_against_plan;
  Config c;  // 5 epochs, no train.max_steps
  CHECK_NOTHROW(check_against_plan(c, "run.toml", 4685, 937));

  Config warm = c;
  warm.schedule.warmup_steps = 5000;
  warm.train.epochs = 2;
  REQUIRE_THROWS_AS(check_against_plan(warm, "run.toml", 1874, 937), squall::UsageError);
  REQUIRE_THROWS_WITH(check_against_plan(warm, "run.toml", 1874, 937),
                      "run.toml: schedule.warmup_steps = 5000 is longer than the whole run (train.epochs = 2: 1874 "
                      "steps): the learning rate would never reach its peak; make schedule.warmup_steps at most "
                      "1874 steps (--set schedule.warmup_steps=0 for none), or train longer");
  CHECK_NOTHROW(check_against_plan(warm, "run.toml", 5001, 2501));
  // train.max_steps that ends the run early names itself.
  warm.train.max_steps = 1000;
  REQUIRE_THROWS_WITH(check_against_plan(warm, "run.toml", 1000, 937),
                      Contains("schedule.warmup_steps = 5000 is longer than the whole run (train.max_steps = 1000)"));

  Config eval = c;
  eval.train.eval_every_steps = 5000;
  REQUIRE_THROWS_WITH(check_against_plan(eval, "run.toml", 4685, 937),
                      Contains("run.toml: train.eval_every_steps = 5000 is longer than the whole run (train.epochs = "
                               "5: 4685 steps)") &&
                          Contains("at most 4685, or 0"));
  CHECK_NOTHROW(check_against_plan(eval, "run.toml", 5000, 1000));

  Config ckpt = c;
  ckpt.checkpoint.every_steps = 5000;
  CHECK_NOTHROW(check_against_plan(ckpt, "run.toml", 4685, 937));  // at_end writes one
  ckpt.checkpoint.at_end = false;
  REQUIRE_THROWS_WITH(check_against_plan(ckpt, "run.toml", 4685, 937),
                      Contains("checkpoint.every_steps = 5000 is longer than the whole run (train.epochs = 5: 4685 "
                               "steps) and checkpoint.at_end = false: the run would write no checkpoint"));
  ckpt.checkpoint.every_minutes = 10;  // timed checkpoints may still be written
  CHECK_NOTHROW(check_against_plan(ckpt, "run.toml", 4685, 937));

  Config steps = c;
  steps.schedule.kind = optim::ScheduleKind::multistep;
  steps.schedule.milestones = {1000, 4685};
  REQUIRE_THROWS_WITH(check_against_plan(steps, "run.toml", 4685, 937),
                      Contains("schedule.milestones = [1000, 4685] has 4685, not before the end of the run "
                               "(train.epochs = 5: 4685 steps)"));
  CHECK_NOTHROW(check_against_plan(steps, "run.toml", 4686, 938));

  Config epochs = c;
  epochs.schedule.kind = optim::ScheduleKind::multistep;
  epochs.schedule.milestone_unit = optim::MilestoneUnit::epochs;
  epochs.schedule.milestones = {2, 4};
  CHECK_NOTHROW(check_against_plan(epochs, "run.toml", 4685, 937));
  epochs.train.max_steps = 3500;  // 4 epochs are step 3748
  REQUIRE_THROWS_WITH(check_against_plan(epochs, "run.toml", 3500, 937),
                      Contains("schedule.milestones = [2, 4] has 4 (schedule.milestone_unit = epochs: step 3748 at 937 "
                               "steps per epoch), not before the end of the run (train.max_steps = 3500)"));
}
