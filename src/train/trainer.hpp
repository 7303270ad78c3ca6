#pragma once
// The training loop of a job: every rank drives a LearnerGroup (src/parallel/learners.hpp)
// fed by its own loader, the groups synchronise through the hierarchical allreduce, rank 0
// writes the run outputs of docs/design.md (metrics.jsonl, summary.json, config.toml and, on
// request, timeline.json).
#include <string>

#include "src/config/config.hpp"

namespace squall::train {

struct TrainResult {
  int64_t steps = 0;
  double train_loss = 0;       // mean over the last logging window
  double test_accuracy = 0;
  double test_loss = 0;
  double samples_per_s = 0;
  double wall_s = 0;
  std::string model_checksum;  // FNV-1a 64 of the parameter and state bytes, hex
  std::string checkpoint;      // the last checkpoint written or resumed from ("" if none)
  bool stopped = false;        // a stop signal ended the run early, after a checkpoint
  int stop_signal = 0;         // ... which one (SIGTERM or SIGUSR1)
};

// How the job runs, from the command line rather than the config.
struct RunOptions {
  int ranks_per_node = 0;        // emulate nodes of K ranks (0: the physical nodes)
  double stall_warn_s = 60;      // collective watchdog (mpi/allreduce.hpp)
  double stall_abort_s = 1800;
  bool timeline = false;         // write <run dir>/timeline.json (Chrome trace)
  std::string resume;            // "" (a new run), "auto" (the newest usable checkpoint) or a checkpoint's path
  bool overwrite = false;        // replace an earlier run's outputs in run.dir
};

// Runs the whole training described by `config` on every rank of MPI_COMM_WORLD (collective;
// a plain process is a job of one rank); rank 0 writes into config.run.dir, every rank its part
// of the checkpoints. Throws squall::Error on bad input, when the loss becomes NaN or infinite
// (naming the step, rank and layer), and when the ranks' central models differ at the end;
// CollectiveError (every rank alike) for failures the ranks agreed on. A stop signal returns
// early with `stopped` set, after writing a checkpoint. `config_origin` names the
// config in messages and in the run directory.
TrainResult run_training(const config::Config& config, const std::string& config_origin,
                         const RunOptions& options = {});

// FNV-1a 64-bit over bytes, as 16 hex digits.
std::string fnv1a_hex(const void* data, size_t bytes, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace squall::train
