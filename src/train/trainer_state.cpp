#include "src/train/trainer_state.hpp"

#include "src/core/error.hpp"

namespace squall::train {
namespace {

// Entries added after the first checkpoint format: a checkpoint without them reads as the
// state a run of that version had (one attempt, the clock unknown and so 0).
int64_t integer_or(const io::CheckpointData& in, const char* key, int64_t fallback) {
  const auto it = in.ints.find(key);
  return it == in.ints.end() ? fallback : it->second;
}

double real_or(const io::CheckpointData& in, const char* key, double fallback) {
  const auto it = in.reals.find(key);
  return it == in.reals.end() ? fallback : it->second;
}

}  // namespace

void write_trainer_state(const TrainerState& s, io::CheckpointData& out) {
  out.ints["step"] = s.step;
  out.ints["epoch"] = s.epoch;
  out.ints["epoch_batches"] = s.epoch_batches;
  out.ints["samples_done"] = s.samples_done;
  out.ints["tuner_done"] = s.tuner_done ? 1 : 0;
  out.reals["window_loss_sum"] = s.window_loss_sum;
  out.reals["window_loss_weight"] = s.window_loss_weight;
  out.reals["last_train_loss"] = s.last_train_loss;
  out.ints["metrics_lines"] = s.metrics_lines;
  out.ints["attempt"] = s.attempt;
  out.reals["elapsed_s"] = s.elapsed_s;
  out.reals["eval_elapsed_s"] = s.eval_elapsed_s;
  out.ints["target_reached"] = s.target_reached ? 1 : 0;
  out.ints["world_size"] = s.world_size;
  out.ints["per_rank_parts"] = s.per_rank_parts ? 1 : 0;
  out.ints["train_samples"] = s.train_samples;
  out.ints["param_count"] = s.param_count;
  out.ints["state_count"] = s.state_count;
  out.texts["config"] = s.config;
  out.texts["config_origin"] = s.config_origin;
  out.texts["model"] = s.model;
  out.texts["algorithm"] = s.algorithm;
}

TrainerState read_trainer_state(const io::CheckpointData& in) {
  TrainerState s;
  s.step = in.integer("step");
  s.epoch = in.integer("epoch");
  s.epoch_batches = in.integer("epoch_batches");
  s.samples_done = in.integer("samples_done");
  s.learners = in.integer("learners");
  s.tuner_done = in.integer("tuner_done") != 0;
  s.window_loss_sum = in.real("window_loss_sum");
  s.window_loss_weight = in.real("window_loss_weight");
  s.last_train_loss = in.real("last_train_loss");
  s.metrics_lines = in.integer("metrics_lines");
  s.attempt = integer_or(in, "attempt", 1);
  s.elapsed_s = real_or(in, "elapsed_s", 0.0);
  s.eval_elapsed_s = real_or(in, "eval_elapsed_s", 0.0);
  s.target_reached = integer_or(in, "target_reached", 0) != 0;
  s.world_size = in.integer("world_size");
  s.per_rank_parts = in.integer("per_rank_parts") != 0;
  s.train_samples = in.integer("train_samples");
  s.param_count = in.integer("param_count");
  s.state_count = in.integer("state_count");
  s.config = in.text("config");
  s.config_origin = in.text("config_origin");
  s.model = in.text("model");
  s.algorithm = in.text("algorithm");
  if (s.step < 0 || s.epoch < 1 || s.learners < 1 || s.param_count < 0 || s.state_count < 0 || s.world_size < 1)
    throw Error(in.origin + ": step = " + std::to_string(s.step) + ", epoch = " + std::to_string(s.epoch) +
                ", learners = " + std::to_string(s.learners) + ", param_count = " + std::to_string(s.param_count) +
                ", state_count = " + std::to_string(s.state_count) + ", world_size = " +
                std::to_string(s.world_size) + ": not a training run's state");
  return s;
}

}  // namespace squall::train
