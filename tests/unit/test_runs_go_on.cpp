// Runs that go on, the pure parts (docs/training.md, "Extending a finished run" and
// "Fine-tuning from another run"): the schedule's segments (optim/schedule.hpp), where a plan ends
// in the schedule's frame (train/step_plan.hpp), the segments as a checkpoint keeps them, and
// train.init_from's mapping of a checkpoint's tensors onto a model (train/init_weights.hpp).
// tests/mpi/launch_runs_go_on.cpp runs them end to end.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "io/checkpoint/trainer_state.hpp"
#include "src/core/error.hpp"
#include "src/optim/schedule.hpp"
#include "src/train/init_weights.hpp"
#include "src/train/step_plan.hpp"

using namespace squall;
using Catch::Matchers::Contains;

namespace {

optim::ScheduleConfig cosine(int64_t warmup) {
  optim::ScheduleConfig c;
  c.kind = optim::ScheduleKind::cosine;
  c.warmup_steps = warmup;
  return c;
}

// A checkpoint of `spec` on `input` whose tensor values are their own positions (tensor k's
// value i is k * 1000 + i), so that a value read back says where it came from.
checkpoint::ModelCheckpoint checkpoint_of(const nn::ModelSpec& spec, nn::Shape input,
                                          std::vector<std::string> channels = {}) {
  auto graph = nn::make_model(spec, input);
  graph->setup(1);
  checkpoint::ModelCheckpoint ck;
  ck.origin = "runs/source/checkpoints/step-00000024/model.h5";
  ck.step = 24;
  ck.spec = spec;
  ck.input = input;
  ck.channel_names = std::move(channels);
  float k = 0;
  for (const auto* infos : {&graph->param_info(), &graph->state_info()})
    for (const nn::ParamInfo& p : *infos) {
      checkpoint::NamedTensor& t = ck.tensors[p.name];
      t.shape.assign(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank);
      for (size_t i = 0; i < p.count; ++i) t.values.push_back(k * 1000 + static_cast<float>(i));
      k += 1;
    }
  return ck;
}

data::DatasetInfo data_of(nn::Shape sample, std::vector<std::string> channels = {}) {
  data::DatasetInfo info;
  info.sample = sample;
  info.classes = 2;
  info.per_pixel_labels = true;
  info.channel_names = std::move(channels);
  return info;
}

nn::ModelSpec unet(int64_t width, int64_t classes = 2) {
  nn::ModelSpec s;
  s.name = "unet";
  s.width = width;
  s.depth = 1;
  s.classes = classes;
  return s;
}

// The packed values of tensor `name` in `w` (graph order, as map_init_weights packs them).
std::vector<float> packed(const nn::Graph& g, const train::InitWeights& w, const std::string& name) {
  size_t at = 0;
  for (const nn::ParamInfo& p : g.param_info()) {
    if (p.name == name) return {w.params.begin() + static_cast<std::ptrdiff_t>(at),
                                w.params.begin() + static_cast<std::ptrdiff_t>(at + p.count)};
    at += p.count;
  }
  FAIL("no parameter " << name);
  return {};
}

std::string refusal(const checkpoint::ModelCheckpoint& ck, const nn::ModelSpec& spec, const data::DatasetInfo& info) {
  auto g = nn::make_model(spec, info.sample);
  g->setup(1);
  try {
    (void)train::map_init_weights(ck, *g, spec, info);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(not refused)";
}

}  // namespace

TEST_CASE("a schedule segment runs the schedule over its own steps", "[schedule][runs-go-on]") {
  const optim::Schedule s(cosine(4), 0.01, 0);
  // Steps 24..48 of a run extended from 24 steps: the schedule of 24 steps again.
  for (int64_t step = 24; step < 48; ++step) {
    INFO("step " << step);
    CHECK(s.lr_in_segment(step, 24, 48) == s.lr_at(step - 24, 24));
  }
  CHECK(s.lr_in_segment(24, 24, 48) == Approx(0.0025));  // the warm-up's first step
  CHECK(s.lr_in_segment(27, 24, 48) == Approx(0.01));    // its peak
  CHECK(s.lr_in_segment(47, 24, 48) < 1e-4);             // the cosine's end
  // The first segment is the schedule as it was.
  for (int64_t step = 0; step < 24; ++step) CHECK(s.lr_in_segment(step, 0, 24) == s.lr_at(step, 24));

  // Multistep milestones count from the segment's start too.
  optim::ScheduleConfig m;
  m.kind = optim::ScheduleKind::multistep;
  m.milestones = {10};
  m.gamma = 0.5;
  const optim::Schedule ms(m, 1.0, 0);
  CHECK(ms.lr_in_segment(105, 100, 200) == 1.0);
  CHECK(ms.lr_in_segment(110, 100, 200) == 0.5);

  CHECK(s.describe(24) == "warm-up 4 step(s) to 0.01, then cosine to 0");
  CHECK(optim::Schedule(cosine(0), 0.01, 0).describe(24) == "cosine from 0.01 to 0");
  CHECK(optim::Schedule({}, 0.1, 0).describe(24) == "constant 0.1");
  CHECK(ms.describe(100) == "1, x 0.5 at step(s) 10");
}

TEST_CASE("a plan ends in the schedule's frame where its samples do", "[step_plan][runs-go-on]") {
  train::StepPlan p = train::plan_steps(8, 1, 1, 8, 6, 0);  // 8 steps an epoch, 6 epochs
  REQUIRE(p.total_steps == 48);
  CHECK(train::schedule_start(p) == 0);
  // One shape throughout: its total steps, whatever step it stands at.
  CHECK(train::schedule_end(p, 24, 24 * 8, 8) == 48);
  CHECK(train::schedule_end(p, 0, 0, 8) == 48);
  // Resumed at step 12 with twice the samples a step (the frame counts steps of 8), which
  // replan makes 18 steps more: 18 of 16 samples are 36 of the frame's.
  p.total_steps = 30;
  CHECK(train::schedule_end(p, 12, 96, 16) == 48);
  p.total_steps = 48;
  // Three samples over a frame step: a part of a step is a step.
  CHECK(train::schedule_end(p, 47, 47 * 8 + 3, 8) == 49);
  p.schedule_segments = {24, 40};
  CHECK(train::schedule_start(p) == 40);
}

TEST_CASE("a checkpoint keeps the schedule's segments as text and refuses text that is not theirs",
          "[trainer_state][runs-go-on]") {
  CHECK(checkpoint::schedule_segments_text({}).empty());
  CHECK(checkpoint::schedule_segments_text({384, 1920}) == "384 1920");
  CHECK(checkpoint::schedule_segments_of("384 1920", "x").size() == 2);
  CHECK(checkpoint::schedule_segments_of("", "x").empty());
  for (const char* bad : {"1920 384", "0", "-3", "12a", "5 5"}) {
    INFO(bad);
    CHECK_THROWS_WITH(checkpoint::schedule_segments_of(bad, "runs/x/model.h5"),
                      Contains("runs/x/model.h5") && Contains("schedule_segments"));
  }
}

TEST_CASE("init_from takes every tensor of the same model by name", "[init_from][runs-go-on]") {
  const nn::Shape input(1, 3, 16, 16);
  const checkpoint::ModelCheckpoint ck = checkpoint_of(unet(4), input);
  auto g = nn::make_model(unet(4), input);
  g->setup(1);
  const train::InitWeights w = train::map_init_weights(ck, *g, unet(4), data_of(input));
  CHECK_FALSE(w.channels_mapped);
  CHECK_FALSE(w.grid_changed);
  REQUIRE(w.params.size() == g->parameter_count());
  REQUIRE(w.state.size() == g->state_value_count());
  REQUIRE(g->state_value_count() > 0);  // BatchNorm's statistics come too
  CHECK(packed(*g, w, "classifier.weight") == ck.tensors.at("classifier.weight").values);
  size_t at = 0;
  for (const nn::ParamInfo& p : g->state_info()) {
    const std::vector<float>& v = ck.tensors.at(p.name).values;
    CHECK(std::equal(v.begin(), v.end(), w.state.begin() + static_cast<std::ptrdiff_t>(at)));
    at += p.count;
  }
  // Another grid: the convolutions' weights carry over.
  const nn::Shape wider(1, 3, 32, 16);
  auto g2 = nn::make_model(unet(4), wider);
  g2->setup(1);
  const train::InitWeights w2 = train::map_init_weights(ck, *g2, unet(4), data_of(wider));
  CHECK(w2.grid_changed);
  CHECK(w2.params == w.params);
  const std::vector<std::string> lines = train::init_weights_lines(ck, w2, data_of(wider), "runs/source/x");
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Contains("runs/source/x (step 24, unet)"));
  CHECK_THAT(lines[1], Contains("16 x 16 grid, data.train's is 32 x 16"));
}

TEST_CASE("init_from maps the first layer's channels by name, and only the first layer's", "[init_from][runs-go-on]") {
  // Width 16 on 16 channels: the second convolution reads 16 channels too, and must not be
  // taken for one that reads the input.
  std::vector<std::string> then, now;
  for (int c = 0; c < 16; ++c) then.push_back("ch" + std::to_string(c));
  now = then;
  std::swap(now[0], now[1]);  // another order
  now[15] = "new";            // ch15 gone, "new" added
  const nn::Shape input(1, 16, 16, 16);
  const checkpoint::ModelCheckpoint ck = checkpoint_of(unet(16), input, then);
  auto g = nn::make_model(unet(16), input);
  g->setup(1);
  const train::InitWeights w = train::map_init_weights(ck, *g, unet(16), data_of(input, now));
  CHECK(w.channels_mapped);
  CHECK(w.added == std::vector<std::string>{"new"});
  CHECK(w.dropped == std::vector<std::string>{"ch15"});
  CHECK(w.reused.size() == 15);
  CHECK(w.reused.front() == "ch1");
  const std::vector<float> first = packed(*g, w, "down0.a.conv.weight");
  const std::vector<float>& was = ck.tensors.at("down0.a.conv.weight").values;
  for (int64_t o = 0; o < 16; ++o)
    for (int64_t j = 0; j < 16; ++j)
      for (int64_t k = 0; k < 9; ++k) {
        const int64_t from = j == 0 ? 1 : j == 1 ? 0 : j;
        const float v = first[static_cast<size_t>((o * 16 + j) * 9 + k)];
        if (j == 15) CHECK(v == 0.0f);
        else CHECK(v == was[static_cast<size_t>((o * 16 + from) * 9 + k)]);
      }
  CHECK(packed(*g, w, "down0.b.conv.weight") == ck.tensors.at("down0.b.conv.weight").values);
  const std::vector<std::string> lines = train::init_weights_lines(ck, w, data_of(input, now), "x");
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[1], Contains("reused ch1, ch0, ch2") && Contains("zero weights: new; dropped: ch15"));

  // 17 channels: the first layer grows by the new one.
  std::vector<std::string> more = then;
  more.insert(more.begin() + 3, "extra");
  const nn::Shape bigger(1, 17, 16, 16);
  auto g3 = nn::make_model(unet(16), bigger);
  g3->setup(1);
  const train::InitWeights w3 = train::map_init_weights(ck, *g3, unet(16), data_of(bigger, more));
  CHECK(w3.added == std::vector<std::string>{"extra"});
  CHECK(w3.dropped.empty());
  const std::vector<float> grown = packed(*g3, w3, "down0.a.conv.weight");
  REQUIRE(grown.size() == 16 * 17 * 9);
  CHECK(grown[(0 * 17 + 3) * 9] == 0.0f);
  CHECK(grown[(0 * 17 + 4) * 9] == was[(0 * 16 + 3) * 9]);
}

TEST_CASE("init_from refuses another model naming the checkpoint, the tensor, both shapes and the key",
          "[init_from][runs-go-on]") {
  const nn::Shape input(1, 3, 16, 16);
  const checkpoint::ModelCheckpoint ck = checkpoint_of(unet(4), input);
  CHECK_THAT(refusal(ck, unet(8), data_of(input)),
             Contains(ck.origin) && Contains("down0.a.conv.weight") && Contains("[4, 3, 3, 3]") &&
                 Contains("[8, 3, 3, 3]") && Contains("model.width (8 here, 4 in the checkpoint)"));
  CHECK_THAT(refusal(ck, unet(4, 3), data_of(input)),
             Contains("classifier.weight") && Contains("[2, 4, 1, 1]") && Contains("[3, 4, 1, 1]") &&
                 Contains("model.classes (3 here"));
  nn::ModelSpec deeper = unet(4);
  deeper.depth = 2;
  CHECK_THAT(refusal(ck, deeper, data_of(input)), Contains("model.depth (2 here, 1 in the checkpoint)"));
  nn::ModelSpec other;
  other.name = "resnet20";
  other.classes = 2;
  CHECK_THAT(refusal(ck, other, data_of(input)), Contains("model.name ('resnet20' here, 'unet' in the checkpoint)"));
  // Other channels that are not named on both sides: the first layer cannot be mapped.
  const nn::Shape four(1, 4, 16, 16);
  CHECK_THAT(refusal(ck, unet(4), data_of(four, {"a", "b", "c", "d"})),
             Contains("down0.a.conv.weight") && Contains("[4, 3, 3, 3]") && Contains("[4, 4, 3, 3]") &&
                 Contains("data.train's input channels (4 here, 3 in the checkpoint"));
}
