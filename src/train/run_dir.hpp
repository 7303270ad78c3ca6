#pragma once
// The run directory before training starts (docs/training.md, "Checkpoints and restart"):
// a run's outputs are never overwritten silently, and a resumed run checks that the
// checkpoint belongs to the same job.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "src/config/config.hpp"

namespace squall::train {

// What a run directory already holds: "metrics.jsonl", "summary.json", "2 checkpoint(s) up to
// step 40", ... (empty: nothing of a run).
std::vector<std::string> run_outputs(const std::filesystem::path& dir);

// Makes `dir` (run.dir) and checks that files can be written in it; throws squall::Error
// naming it and the system's reason.
void ensure_writable_dir(const std::filesystem::path& dir);

// Removes a run's outputs from `dir` (--overwrite): metrics, summary, config, timeline, the
// MLPerf log, predictions, TensorBoard's event files, checkpoints. Anything else in the folder
// stays.
void remove_run_outputs(const std::filesystem::path& dir);


// Why a run configured as `now` may not continue from a checkpoint written with `then` (the
// keys that must match, with both values), or "" when it may. `changed` receives the keys that
// differ and may (optimizer.lr, train.epochs, data paths, ...), as "key: old -> new".
std::string resume_incompatibility(const config::Config& now, const config::Config& then,
                                   std::vector<std::string>& changed);

// Every key whose value differs between `a` and `b`, as "key: a-value -> b-value".
std::vector<std::string> config_differences(const config::Config& a, const config::Config& b);

}  // namespace squall::train
