// The trainer's checkpoint entries (io/checkpoint/trainer_state.hpp): they read back as written,
// also through an HDF5 file; checkpoints of the version before the run's clock read with its
// defaults; a missing entry or an impossible count is an error naming the file and the entry.
// The entries' names and kinds are pinned: a checkpoint written before must read the same.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "io/checkpoint/checkpoint_file.hpp"
#include "src/core/error.hpp"
#include "io/checkpoint/trainer_state.hpp"
#include "tests/support/temp_dir.hpp"

using namespace squall;
using namespace squall::checkpoint;

namespace {

TrainerState sample_state() {
  TrainerState s;
  s.step = 45;
  s.epoch = 3;
  s.epoch_batches = 12;
  s.epoch_position = 3200;  // none of these the default: a row dropped from the table would read it
  s.epoch_start_position = 1280;
  s.epoch_start_batches = 7;
  s.samples_done = 5760;
  s.learners = 2;
  s.tuner_done = true;
  s.window_loss_sum = 1.5;
  s.window_loss_weight = 3;
  s.last_train_loss = 0.42;
  s.metrics_lines = 17;
  s.attempt = 2;
  s.elapsed_s = 81.25;
  s.eval_elapsed_s = 4.5;
  s.target_reached = true;
  s.world_size = 4;
  s.nodes = 2;
  s.rank_nodes = "0 0 1 1";
  s.schedule_steps = 900;
  s.schedule_step_samples = 512;
  s.schedule_steps_per_epoch = 117;
  s.schedule_segments = "300 600";
  s.planned_steps = 900;
  s.last_eval_step = 40;
  s.learner_batch = 85;
  s.lr_factor = 0.75;
  s.per_rank_parts = true;
  s.train_samples = 60000;
  s.param_count = 61706;
  s.state_count = 3;  // not the default: a row dropped from the table would read 0
  s.config = "[run]\ndir = \"runs/x\"\n";
  s.config_origin = "configs/x.toml";
  s.model = "lenet5";
  s.algorithm = "sma";
  return s;
}

void check_equal(const TrainerState& a, const TrainerState& b) {
  CHECK(a.step == b.step);
  CHECK(a.epoch == b.epoch);
  CHECK(a.epoch_batches == b.epoch_batches);
  CHECK(a.epoch_position == b.epoch_position);
  CHECK(a.epoch_start_position == b.epoch_start_position);
  CHECK(a.epoch_start_batches == b.epoch_start_batches);
  CHECK(a.nodes == b.nodes);
  CHECK(a.rank_nodes == b.rank_nodes);
  CHECK(a.schedule_steps == b.schedule_steps);
  CHECK(a.schedule_step_samples == b.schedule_step_samples);
  CHECK(a.schedule_steps_per_epoch == b.schedule_steps_per_epoch);
  CHECK(a.schedule_segments == b.schedule_segments);
  CHECK(a.planned_steps == b.planned_steps);
  CHECK(a.last_eval_step == b.last_eval_step);
  CHECK(a.learner_batch == b.learner_batch);
  CHECK(a.lr_factor == b.lr_factor);
  CHECK(a.samples_done == b.samples_done);
  CHECK(a.learners == b.learners);
  CHECK(a.tuner_done == b.tuner_done);
  CHECK(a.window_loss_sum == b.window_loss_sum);
  CHECK(a.window_loss_weight == b.window_loss_weight);
  CHECK(a.last_train_loss == b.last_train_loss);
  CHECK(a.metrics_lines == b.metrics_lines);
  CHECK(a.attempt == b.attempt);
  CHECK(a.elapsed_s == b.elapsed_s);
  CHECK(a.eval_elapsed_s == b.eval_elapsed_s);
  CHECK(a.target_reached == b.target_reached);
  CHECK(a.world_size == b.world_size);
  CHECK(a.per_rank_parts == b.per_rank_parts);
  CHECK(a.train_samples == b.train_samples);
  CHECK(a.param_count == b.param_count);
  CHECK(a.state_count == b.state_count);
  CHECK(a.config == b.config);
  CHECK(a.config_origin == b.config_origin);
  CHECK(a.model == b.model);
  CHECK(a.algorithm == b.algorithm);
}

}  // namespace

TEST_CASE("the trainer's state reads back as written, through a checkpoint file", "[trainer_state]") {
  const TrainerState s = sample_state();
  checkpoint::CheckpointData d;
  write_trainer_state(s, d);
  d.ints["learners"] = s.learners;  // the learner group's entry
  check_equal(read_trainer_state(d), s);
  test::TempDir dir("squall-trainer-state");
  checkpoint::write_checkpoint_file(dir.file("model.h5"), d);
  check_equal(read_trainer_state(checkpoint::read_checkpoint_file(dir.file("model.h5"))), s);
}

TEST_CASE("a checkpoint without the run's clock reads as a first attempt", "[trainer_state]") {
  checkpoint::CheckpointData d;
  write_trainer_state(sample_state(), d);
  d.ints["learners"] = 2;
  d.ints.erase("attempt");
  d.ints.erase("target_reached");
  d.reals.erase("elapsed_s");
  d.reals.erase("eval_elapsed_s");
  for (const char* key : {"epoch_position", "epoch_start_position", "epoch_start_batches", "nodes", "schedule_steps",
                          "schedule_step_samples", "schedule_steps_per_epoch", "learner_batch"})
    d.ints.erase(key);
  d.reals.erase("lr_factor");
  d.texts.erase("rank_nodes");
  d.ints.erase("planned_steps");
  d.ints.erase("last_eval_step");
  d.texts.erase("schedule_segments");
  const TrainerState s = read_trainer_state(d);
  // Before schedule segments (docs/training.md, "Extending a finished run"): one segment, the
  // plan and the last evaluation not recorded.
  CHECK(s.schedule_segments.empty());
  CHECK(s.planned_steps == 0);
  CHECK(s.last_eval_step == -1);
  // An earlier version's: the position and the frame unknown (it resumes on its own shape only).
  CHECK(s.epoch_position == -1);
  CHECK(s.epoch_start_position == 0);
  CHECK(s.epoch_start_batches == 0);
  CHECK(s.nodes == 0);
  CHECK(s.rank_nodes.empty());
  CHECK(s.schedule_steps == 0);
  CHECK(s.schedule_step_samples == 0);
  CHECK(s.schedule_steps_per_epoch == 0);
  CHECK(s.learner_batch == 0);  // the config's train.batch_size
  CHECK(s.lr_factor == 1.0);
  CHECK(s.attempt == 1);
  CHECK(s.elapsed_s == 0.0);
  CHECK(s.eval_elapsed_s == 0.0);
  CHECK_FALSE(s.target_reached);
  CHECK(s.step == 45);
}

TEST_CASE("a missing entry or an impossible count names the file", "[trainer_state]") {
  checkpoint::CheckpointData d;
  d.origin = "runs/x/checkpoints/step-00000045/model.h5";
  write_trainer_state(sample_state(), d);
  d.ints["learners"] = 2;
  checkpoint::CheckpointData no_config = d;
  no_config.texts.erase("config");
  REQUIRE_THROWS_AS(read_trainer_state(no_config), Error);
  CHECK_THROWS_WITH(read_trainer_state(no_config), Catch::Contains(d.origin) && Catch::Contains("config"));
  checkpoint::CheckpointData no_step = d;
  no_step.ints.erase("step");
  CHECK_THROWS_WITH(read_trainer_state(no_step), Catch::Contains(d.origin) && Catch::Contains("step"));
  checkpoint::CheckpointData negative = d;
  negative.ints["param_count"] = -1;
  CHECK_THROWS_WITH(read_trainer_state(negative), Catch::Contains(d.origin) && Catch::Contains("param_count = -1"));
  checkpoint::CheckpointData no_rate = d;
  no_rate.reals["lr_factor"] = 0;
  CHECK_THROWS_WITH(read_trainer_state(no_rate), Catch::Contains(d.origin) && Catch::Contains("lr_factor = 0"));
}

TEST_CASE("the trainer writes exactly its 35 entries, by name and kind", "[trainer_state][checkpoint]") {
  checkpoint::CheckpointData d;
  write_trainer_state(sample_state(), d);
  auto keys = [](const auto& map) {
    std::set<std::string> out;
    for (const auto& [key, value] : map) out.insert(key);
    return out;
  };
  // learners is not here: the learner group writes it (src/parallel/learners_checkpoint.cpp).
  CHECK(keys(d.ints) == std::set<std::string>{"step", "epoch", "epoch_batches", "samples_done", "tuner_done",
                                              "metrics_lines", "attempt", "target_reached", "world_size",
                                              "per_rank_parts", "train_samples", "param_count", "state_count",
                                              "epoch_position", "epoch_start_position", "epoch_start_batches",
                                              "nodes", "schedule_steps", "schedule_step_samples",
                                              "schedule_steps_per_epoch", "learner_batch", "planned_steps",
                                              "last_eval_step"});
  CHECK(keys(d.reals) == std::set<std::string>{"window_loss_sum", "window_loss_weight", "last_train_loss",
                                               "elapsed_s", "eval_elapsed_s", "lr_factor"});
  CHECK(keys(d.texts) == std::set<std::string>{"config", "config_origin", "model", "algorithm", "rank_nodes",
                                               "schedule_segments"});
  CHECK(d.arrays.empty());
  // The flags as integers 1 and 0, as earlier versions wrote them.
  CHECK(d.ints.at("tuner_done") == 1);
  CHECK(d.ints.at("per_rank_parts") == 1);
  CHECK(d.ints.at("target_reached") == 1);
  TrainerState off = sample_state();
  off.tuner_done = off.per_rank_parts = off.target_reached = false;
  checkpoint::CheckpointData d_off;
  write_trainer_state(off, d_off);
  CHECK(d_off.ints.at("tuner_done") == 0);
  CHECK(d_off.ints.at("per_rank_parts") == 0);
  CHECK(d_off.ints.at("target_reached") == 0);
}

TEST_CASE("each required entry, when missing, is named with the file", "[trainer_state][checkpoint]") {
  checkpoint::CheckpointData d;
  d.origin = "runs/resume/checkpoints/latest/model.h5";
  write_trainer_state(sample_state(), d);
  d.ints["learners"] = 2;
  REQUIRE_NOTHROW(read_trainer_state(d));
  // Every entry but the four that checkpoints of earlier versions lack.
  const char* const required_ints[] = {"step",          "epoch",       "epoch_batches", "samples_done",
                                       "learners",      "tuner_done",  "metrics_lines", "world_size",
                                       "per_rank_parts", "train_samples", "param_count", "state_count"};
  const char* const required_reals[] = {"window_loss_sum", "window_loss_weight", "last_train_loss"};
  const char* const required_texts[] = {"config", "config_origin", "model", "algorithm"};
  auto check_missing = [&](auto& map_of, const char* key) {
    checkpoint::CheckpointData without = d;
    REQUIRE(map_of(without).erase(key) == 1);
    INFO("without " << key);
    CHECK_THROWS_WITH(read_trainer_state(without), d.origin + ": entry " + key + " is missing");
  };
  auto ints = [](checkpoint::CheckpointData& c) -> auto& { return c.ints; };
  auto reals = [](checkpoint::CheckpointData& c) -> auto& { return c.reals; };
  auto texts = [](checkpoint::CheckpointData& c) -> auto& { return c.texts; };
  for (const char* key : required_ints) check_missing(ints, key);
  for (const char* key : required_reals) check_missing(reals, key);
  for (const char* key : required_texts) check_missing(texts, key);
}

TEST_CASE("a checkpoint's nodes carry over node by node only where no node of the new job mixes them",
          "[trainer_state][elastic]") {
  TrainerState s;
  s.world_size = 4;
  s.nodes = 2;
  s.rank_nodes = rank_nodes_text({0, 0, 1, 1});
  CHECK(s.rank_nodes == "0 0 1 1");
  const std::vector<int> then = rank_nodes_of(s);
  CHECK(then == std::vector<int>{0, 0, 1, 1});
  CHECK(nodes_carry_over(then, {0, 0, 1, 1}));        // the same layout
  CHECK(nodes_carry_over(then, {0, 0, 1, 1, 2, 2}));  // a third node of new ranks
  CHECK(nodes_carry_over(then, {0, 0}));              // node 2 gone
  CHECK(nodes_carry_over(then, {0, 1, 2, 3}));        // each node's ranks split over two nodes
  CHECK_FALSE(nodes_carry_over(then, {0, 0, 0, 0}));  // one node of both
  CHECK_FALSE(nodes_carry_over(then, {0, 1, 1, 2}));  // ranks 1 and 2 of two nodes on one
  CHECK_FALSE(nodes_carry_over(then, {0, 0, 1, 1, 1}));  // rank 4 new beside node 1's ranks
  // Only the counts recorded: 2 per node in rank order; counts that do not divide: unknown.
  s.rank_nodes.clear();
  CHECK(rank_nodes_of(s) == then);
  s.world_size = 5;
  CHECK(rank_nodes_of(s).empty());
  CHECK_FALSE(nodes_carry_over(rank_nodes_of(s), {0, 0, 1, 1, 2}));
  // A recorded list of the wrong length is not believed.
  s.rank_nodes = "0 0 1";
  CHECK(rank_nodes_of(s).empty());
}
