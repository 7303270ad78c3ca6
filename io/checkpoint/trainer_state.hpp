#pragma once
// The trainer's part of a checkpoint's model.h5 (docs/formats.md, "Checkpoints"): where the
// loop stood and what the run was. The one place that knows these entries' names: the trainer
// writes and restores them, and `squall eval`, `predict` and `export` read the config, the
// model and the sizes from here. The learner group's entries (src/parallel/learners_checkpoint.cpp)
// and the named model (io/checkpoint/named_weights.hpp) sit beside them in the same file.
#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"

namespace squall::checkpoint {

struct TrainerState {
  // The loop's position.
  int64_t step = 0;                 // steps done
  int64_t epoch = 1;                // the epoch the last step was in
  int64_t epoch_batches = 0;        // ... and the batches of it used (this rank's)
  // Where the epoch's reading stands (docs/training.md, "Elastic resume"): with data.sampling =
  // global, the samples of the epoch's order the job had read (-1: not positional, local
  // sampling or a checkpoint of an earlier version); and where this job's lists of the epoch
  // began: at that position of the order, counted as that many batches already used (a job
  // that resumed inside the epoch on another shape; 0 and 0 otherwise).
  int64_t epoch_position = -1;
  int64_t epoch_start_position = 0;
  int64_t epoch_start_batches = 0;
  int64_t samples_done = 0;         // samples trained on over the job
  int64_t learners = 1;             // learners per rank (written by the learner group; read here)
  bool tuner_done = false;          // the auto-tuner had stopped
  double window_loss_sum = 0;       // the logging window's running mean of the loss
  double window_loss_weight = 0;
  double last_train_loss = 0;
  int64_t metrics_lines = 0;        // metrics.jsonl's lines at the checkpoint (a resume keeps them)
  // The run's clock (docs/metrics.md): the attempt that wrote the checkpoint and the seconds of
  // training of all attempts until it. Absent from checkpoints of earlier versions: 1 and 0.
  int64_t attempt = 1;
  double elapsed_s = 0;
  double eval_elapsed_s = 0;        // ... of which evaluating
  bool target_reached = false;      // train.target was reached: the run is complete
  // The job and the model.
  int64_t world_size = 1;
  int64_t nodes = 0;                // 0: not recorded (an earlier version)
  std::string rank_nodes;           // each rank's node, "0 0 1 1" ("": not recorded)
  // The learning-rate schedule's frame (train/step_plan.hpp): kept across a change of shape,
  // so that warm-up, milestones and the cosine stay where they were in samples. 0: recompute.
  int64_t schedule_steps = 0;
  int64_t schedule_step_samples = 0;
  int64_t schedule_steps_per_epoch = 0;  // ... its steps per epoch (milestones in epochs); 0: not recorded
  // Where the schedule started again (docs/training.md, "Extending a finished run"): the
  // segments' first steps after the first segment's (in the frame's steps), ascending, as text
  // ("384 1920"); "" for one segment (and in checkpoints of earlier versions).
  std::string schedule_segments;
  // The steps the run had planned when it wrote the checkpoint (its end: a checkpoint at that
  // step is of a finished run); 0: not recorded (an earlier version).
  int64_t planned_steps = 0;
  int64_t last_eval_step = -1;      // the step after which the model was last evaluated (-1: none or not recorded)
  // The batch and the learning rate under an elastic resume (docs/training.md, "Elastic
  // resume"): the batch per learner the job trained at (0: train.batch_size of `config`, which
  // holds the batch the user asked for), and the factor its learning rate was scaled by since
  // the first attempt (elastic.batch; 1 in checkpoints of earlier versions).
  int64_t learner_batch = 0;
  double lr_factor = 1;
  bool per_rank_parts = false;      // node-NNNNN.h5 files (a part per rank) beside model.h5
  int64_t train_samples = 0;        // the training set's size it was trained on
  int64_t param_count = 0, state_count = 0;
  std::string config;               // the resolved config (TOML)
  std::string config_origin;        // the file it came from
  std::string model;                // model.name
  std::string algorithm;            // parallel.algorithm
};

// Adds the state's entries to `out` (model.h5's data); learners is the group's to write.
void write_trainer_state(const TrainerState& state, CheckpointData& out);

// The state from model.h5's data. Throws squall::Error naming the file and the entry when one
// is missing or a count is negative (another program's HDF5 file, a file cut short by hand).
TrainerState read_trainer_state(const CheckpointData& in);

// rank_nodes from each rank's node, and back. The checkpoint's ranks' nodes: as recorded, or,
// for a checkpoint that records only the counts, world_size / nodes ranks per node in rank
// order where that divides; empty when they are not known.
std::string rank_nodes_text(const std::vector<int>& node_of_rank);
std::vector<int> rank_nodes_of(const TrainerState& state);

// schedule_segments as numbers, and back. Throws squall::Error naming `origin` for text that is
// not ascending positive integers.
std::vector<int64_t> schedule_segments_of(const std::string& text, const std::string& origin);
std::string schedule_segments_text(const std::vector<int64_t>& starts);

// Whether what a checkpoint keeps per node (outer's node models, sma's node centres under
// parallel.periods) carries over node by node to a job whose ranks are on `node_of_rank`: every
// node of the new job holds ranks that were on one node of the checkpoint's job, or only ranks
// the checkpoint's job did not have (they start from the centre). `then`: rank_nodes_of.
bool nodes_carry_over(const std::vector<int>& then, const std::vector<int>& node_of_rank);

}  // namespace squall::checkpoint
