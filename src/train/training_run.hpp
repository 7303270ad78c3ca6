#pragma once
// One training run on this rank (internal to src/train: run_training is the interface). The
// loop is trainer.cpp; the run directory, resuming and checkpoints are trainer_checkpoint.cpp.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpi/agreement.hpp"
#include "mpi/topology.hpp"
#include "src/core/clock.hpp"
#include "src/eval/evaluate.hpp"
#include "src/nn/metrics.hpp"
#include "src/train/batch_feed.hpp"
#include "io/checkpoint/named_weights.hpp"
#include "io/checkpoint/store.hpp"
#include "src/train/fault.hpp"
#include "src/train/pace.hpp"
#include "io/records/run_log.hpp"
#include "io/records/timeline.hpp"
#include "src/train/trainer.hpp"
#include "io/checkpoint/trainer_state.hpp"
#include "src/train/spatial_job.hpp"
#include "src/train/training_job.hpp"

namespace squall::train {

// Where the loop stands.
struct LoopPosition {
  int64_t step = 0;                  // steps done
  EpochPosition at;                  // the epoch of the last step, and its batches used
  EpochPosition start;               // where this attempt started
  // In the start epoch, where this attempt's lists began (global sampling): at this sample of
  // the epoch's order, counted as this many of its batches used. 0 and 0 unless the attempt
  // resumed inside an epoch on another shape (or from an attempt that did).
  int64_t start_position = 0;
  int64_t start_batches = 0;
  int64_t first_step = 0;            // the step this attempt started after
  int64_t samples_done = 0;          // samples trained on over the job, all attempts
  int64_t samples_at_start = 0;
  int64_t attempt = 1;
  double earlier_s = 0;              // the run's clock when this attempt started
  double earlier_eval_s = 0;         // ... of which evaluating
};

class TrainingRun {
 public:
  TrainingRun(const config::Config& cfg, const std::string& origin, const RunOptions& options);
  TrainResult run();

 private:
  // trainer.cpp: the loop.
  void train();
  void train_step(int64_t epoch, int64_t used);
  void log_step(int64_t epoch, double lr, const std::vector<float>& losses, double step_s);
  // `exchange`: this step is one at which the job agrees on its flags (every step, or under
  // rounds that do not hold the nodes together each step, the last step of each round).
  bool after_step(bool exchange = true);
  // train.epoch_quorum < 1 (pace.hpp): a step this node lets pass, and the round's bookkeeping.
  void setup_pace();
  bool round_step(int64_t epoch, int64_t used);
  void idle_step(int64_t epoch, int64_t used, double lr);
  void start_paced_epoch(int64_t epoch, int64_t used, bool first);
  // `ended`: the epoch's steps are all taken (not a stop or a target inside it).
  void end_paced_epoch(int64_t epoch, bool ended);
  // After a step or a resume: the run's end where it trains its samples (fit_end_to_samples).
  void fit_paced_end();
  std::vector<int64_t> sampler_list(int64_t epoch, int64_t from) const;
  void gather_pace_records();
  // `final_model`: the evaluation after the synchronisation that follows a target reached
  // between two (complete_at_target): recorded as such, and not in the MLPerf log, whose run
  // ended with the evaluation that reached the target.
  void evaluate(int64_t epoch, bool final_model = false);
  void complete_at_target(int64_t epoch);
  [[noreturn]] void diverged(const parallel::NonFiniteStep& e, int64_t epoch, double lr);
  std::string divergence_hint() const;
  void reshape(int change);
  void watch_classes(const std::vector<parallel::LearnerBatch>& inputs);
  void check_classes();
  double lr_at_samples(int64_t samples_done) const;
  nn::HaloTimes train_halo_times() const;  // a split's halo seconds in training passes (m_eval_halo)
  int64_t step_samples() const {  // samples one step trains on over the job, at today's learner count
    return m_cfg.train.batch_size * m_data.plan.learners * m_spatial.ranks;
  }
  records::RunFacts run_facts() const;
  TrainResult finish();
  TrainResult stopped();
  TrainResult already_complete();

  // trainer_checkpoint.cpp: the run directory, resuming, checkpoints. A resume loads its
  // checkpoint before the model is built (load_checkpoint: a new shape may change the batch,
  // fit_shape) and restores it after (restore). An earlier run's outputs that this run replaces
  // (--overwrite, or --resume auto that finds no checkpoint) are removed only once every check
  // before training has passed (clear_earlier_run): a config that fails leaves them as they were.
  void prepare_run_dir();
  void load_checkpoint();
  void clear_earlier_run();
  void check_resumable(const checkpoint::LoadedCheckpoint& ck, const checkpoint::TrainerState& then) const;
  void fit_shape(const checkpoint::TrainerState& then);
  int64_t trained_batch(const checkpoint::TrainerState& then) const;
  void restore(const checkpoint::LoadedCheckpoint& ck, const checkpoint::TrainerState& then);
  void restore_pace(const checkpoint::LoadedCheckpoint& ck, bool other_shape);
  void continue_schedule(const checkpoint::TrainerState& s);
  void place_synchronous_start();
  bool target_still_reached(const checkpoint::TrainerState& s) const;
  // trainer_init_from.cpp: train.init_from (docs/training.md, "Fine-tuning from another run"). Every
  // rank reads the checkpoint's model (rank 0 reads, the others receive) before the model is
  // built, and starts the built model from it, by name, before anything trains.
  void read_init_weights();
  void start_from_init_weights();
  void write_checkpoint();
  checkpoint::TrainerState trainer_state() const;
  std::string central_checksum();

  // The job. m_cfg is the config as this attempt runs it: a resume on another shape may give it
  // another train.batch_size (elastic.batch = global), m_requested_batch is the config's.
  config::Config m_cfg;
  const int64_t m_requested_batch;
  double m_lr_factor = 1;            // the learning rate's factor under elastic.batch (step_plan.hpp)
  const std::string& m_origin;
  const RunOptions& m_options;
  const Stopwatch m_wall;            // since the run started on this rank
  const double m_init_start_s;       // the same moment on the system clock (MLPerf's init_start)
  const mpi::Topology m_topo;
  const mpi::Communicator& m_world;
  const int m_rank, m_ranks;
  const bool m_root;
  const parallel::Algorithm m_algorithm;
  FaultInjection m_fault;            // SQUALL_FAIL_AT, read with the data (any rank may refuse it)
  SampleTrace m_trace;               // SQUALL_TRACE_SAMPLES
  std::vector<int> m_node_of_rank;  // every rank's node
  SpatialJob m_spatial;              // parallel.spatial: the groups, and the job's data-parallel shape
  std::filesystem::path m_dir;
  bool m_clear_earlier = false;      // rank 0: remove the earlier run's outputs (clear_earlier_run)

  // What it is made of.
  TrainingData m_data;
  TrainingDevice m_device;
  std::unique_ptr<BatchFeed> m_feed;

  // Its records and checkpoints.
  records::Timeline m_timeline;
  std::unique_ptr<records::RunLog> m_log;
  std::unique_ptr<checkpoint::CheckpointStore> m_store;
  std::optional<checkpoint::LoadedCheckpoint> m_checkpoint;  // loaded, to restore once the model is built
  std::optional<checkpoint::CheckpointModel> m_init;  // train.init_from's model, until the model is built
  checkpoint::TrainerState m_checkpoint_state;
  std::unique_ptr<mpi::FlagAgreement> m_flags;  // stop signals and timed checkpoints, agreed per step
  static constexpr uint64_t k_flag_sigterm = 1, k_flag_sigusr1 = 2, k_flag_timed = 4;
  uint64_t m_stop_flags = 0;                    // the agreed flags that stopped the run (0: running)
  Stopwatch m_since_time_checkpoint;
  int64_t m_metrics_lines_at_resume = -1;       // -1: a new run
  std::optional<std::filesystem::path> m_resumed_from;
  std::optional<records::ShapeChange> m_reshaped_from;  // resumed on another number of ranks
  std::filesystem::path m_last_checkpoint;
  int64_t m_last_checkpoint_step = -1;

  // The loop's state.
  LoopPosition m_pos;
  int64_t m_group_steps = 0;  // steps this process ran
  records::SteadyRate m_steady;        // this attempt's steady rate (steady_rate.hpp)
  nn::RunningMean m_window_loss;
  // The classes of the labels in rank 0's first batches (watch_classes): one class alone is
  // warned about once.
  static constexpr int64_t k_class_batches = 16;
  std::vector<int64_t> m_class_counts;
  int64_t m_class_batches = 0;
  bool m_classes_checked = false;
  double m_last_train_loss = 0, m_last_eval_loss = 0, m_loop_s = 0;
  int64_t m_last_eval_step = -1;  // the step after which the central model was last evaluated
  eval::EvalPart m_last_eval{nn::ConfusionMatrix(1)};
  // A split's halo seconds spent in evaluations: the records and summary.json count the training
  // passes' only, as their compute seconds do (train_halo_times).
  nn::HaloTimes m_eval_halo;
  std::optional<records::TargetFacts> m_target;  // train.target, once reached

  // Rounds fitted to speed (train.epoch_quorum < 1, pace.hpp) and rounds that agree on the
  // job's flags once a round (those, and parallel.outer.async).
  struct Pace {
    bool on = false;              // train.epoch_quorum < 1
    bool flags_per_round = false;
    std::vector<double> forced;   // SQUALL_PACE_SECONDS: each node's seconds per step, for tests
    std::vector<double> node_seconds;  // the latest agreed seconds per trained step, per node
    std::vector<int64_t> node_ranks;   // ranks per node (the quorum's weights)
    int nodes = 1;
    // The steps each node trains in the current round (empty: not fitted yet), the same on every
    // rank: fitted from the agreed seconds.
    std::vector<int64_t> round_fit;
    int64_t step_trained = 0;     // the samples the job trains in the current step (round_fit's)
    int64_t planned_steps = 0;    // the plan's steps before the run went on to train its samples
    StepTimes step_times;         // this rank's seconds per trained step, its last ones
    SampleStream stream;          // this rank's samples not yet trained (carried first)
    int64_t carried = 0;          // of them, the ones carried: the clock's batches not trained
    bool restored = false;        // the stream came from a checkpoint (its epoch's list is in it)
    int64_t trained_steps = 0, idle_steps = 0;  // the run's (every attempt's), this rank
    double attempt_trained_s = 0;  // this attempt's seconds in the trained steps the pace measures, this rank
    int64_t attempt_trained = 0;   // and those steps
    int64_t carried_total = 0;    // the job's carried samples at the end (rank 0)
    int64_t epoch_trained = 0, epoch_idle = 0;
    std::vector<int64_t> node_trained, node_idle;  // the run's, per node (rank 0, at the end)
    std::vector<double> node_step_s;  // this attempt's mean seconds per trained step, per node (its slowest rank)
    nlohmann::json node_async;   // parallel.outer.async: each node's pushes and staleness (rank 0)
  } m_pace;
};

}  // namespace squall::train
