#pragma once
// The training loop of one rank and one learner (the distributed learners of issue 5 build
// on it): data -> forward -> loss -> backward -> optimizer, evaluation on the test set,
// and the run outputs of DESIGN.md (metrics.jsonl, summary.json, config.toml).
#include <string>

#include "src/train/config.hpp"

namespace squall::train {

struct TrainResult {
  int64_t steps = 0;
  double train_loss = 0;       // mean over the last logging window
  double test_accuracy = 0;
  double test_loss = 0;
  double samples_per_s = 0;
  double wall_s = 0;
  std::string model_checksum;  // FNV-1a 64 of the parameter and state bytes, hex
};

// Runs the whole training described by `config`; writes into config.run.dir. Throws
// squall::Error on bad input, and when the loss becomes NaN or infinite (naming the step).
// `config_origin` names the config in messages and in the run directory.
TrainResult run_training(const Config& config, const std::string& config_origin);

// FNV-1a 64-bit over bytes, as 16 hex digits.
std::string fnv1a_hex(const void* data, size_t bytes, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace squall::train
