#pragma once
// The records a training run leaves (docs/metrics.md, "Run records"): config.toml,
// metrics.jsonl, summary.json, the console, TensorBoard event files (run.tensorboard) and MLPerf log lines
// (run.mllog). This is the only code that writes their fields: the loop hands it typed facts,
// and it writes each fact to every record that carries it. The files' names and summary.json's
// fields are run_files.hpp's table, which the readers (run_records.hpp) share.
//
// Rank 0 keeps the records; on the other ranks every call does nothing. A file that cannot be
// written is a squall::Error naming it (metrics.jsonl, the event file, the MLPerf log); every
// record is written whole (one write a line, one flush an event), so a crashed run keeps what
// it logged up to the crash.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/core/clock.hpp"
#include "src/nn/metrics.hpp"
#include "io/records/progress.hpp"
#include "io/records/steady_rate.hpp"

namespace squall::records {

// Per-class IoU for metrics.jsonl, summary.json and `squall eval`'s result: null for a class
// absent from both the labels and the predictions (its IoU is undefined).
nlohmann::json iou_per_class_json(const nn::ConfusionMatrix& cm);
class MlLog;
class TensorBoardWriter;
}  // namespace squall::records

namespace squall {
class LineFile;
}  // namespace squall

namespace squall::records {

// The run's clock: seconds of training (the loops, evaluations included) of every attempt so
// far. An attempt starts it at the seconds its checkpoint recorded, so that a resumed run's
// records go on from where the checkpoint left them rather than from 0.
class RunClock {
 public:
  // `earlier_s`: the run's seconds before this attempt, `earlier_eval_s` those spent evaluating.
  void start(double earlier_s, double earlier_eval_s) {
    m_earlier = earlier_s;
    m_eval = earlier_eval_s;
    m_start = steady_seconds();
  }
  void add_eval(double seconds) { m_eval += seconds; }
  double attempt_s() const { return steady_seconds() - m_start; }
  double run_s() const { return m_earlier + attempt_s(); }
  double eval_s() const { return m_eval; }                 // the run's seconds of evaluation
  double train_s() const { return run_s() - m_eval; }      // ... and of the rest
  double earlier_s() const { return m_earlier; }

 private:
  double m_earlier = 0, m_eval = 0, m_start = 0;
};

// The run.* keys and the config come from config::run_log_options; the rest is where the run
// stands and what its data is.
struct RunLogOptions {
  std::filesystem::path dir;      // run.dir
  std::string config_toml;        // the resolved config, written as config.toml
  bool root = false;              // rank 0: the one that writes
  int64_t attempt = 1;            // 1, or the resumed checkpoint's attempt + 1
  int64_t keep_metrics_lines = -1;  // a resume: metrics.jsonl's lines up to the checkpoint (-1: a new run)
  bool tensorboard = true;        // run.tensorboard
  bool mllog = false;             // run.mllog
  double earlier_s = 0;           // the run's clock at the resumed checkpoint (RunClock::start)
  double earlier_eval_s = 0;      // ... of which evaluating
  bool live_progress = false;     // redraw one progress line (a terminal of a one-rank job)
  int64_t log_every = 50;         // train.log_every_steps
  bool per_pixel = false;         // segmentation: IoU per class is what matters
  std::vector<std::string> class_names;
};

// A resume on another number of ranks (docs/training.md, "Elastic resume"): the checkpoint's
// step and shape, this job's shape, and where the epoch's reading went on.
struct ShapeChange {
  int64_t step = 0;
  int64_t from_ranks = 0, from_nodes = 0;  // from_nodes 0: the checkpoint did not record it
  int64_t ranks = 0, nodes = 0;
  // parallel.spatial before and after, [rows, cols] ([1, 1]: whole samples): the groups, not
  // the ranks, are the data-parallel shape the batches below count.
  int64_t from_spatial_rows = 1, from_spatial_cols = 1;
  int64_t spatial_rows = 1, spatial_cols = 1;
  int64_t epoch = 0, epoch_position = 0;    // the sample of the epoch's order it went on at
  // elastic.batch: which batch it kept ("global", "learner"), the batches before and after,
  // and the factor this resume scaled the learning rate by.
  std::string keep = "global";
  int64_t from_learner_batch = 0, learner_batch = 0;
  int64_t from_global_batch = 0, global_batch = 0;
  double lr_scale = 1;
};

// What the run is, said once when training starts (the opening lines, MLPerf's run keys).
struct RunFacts {
  std::string model;
  int64_t parameters = 0;
  std::string data;               // the training set's description
  std::string backend, device;    // device: "" on the CPU
  int device_index = -1;
  int ranks = 1, nodes = 1, learners = 1;
  std::string algorithm;
  std::string sma_line;           // sma's coefficients in words ("" for other algorithms)
  std::string cross_line;         // the allreduce's cross-node rule in words ("" without a pipelined cross-node stage)
  std::string periods_line;       // parallel.periods' node level in words ("" without one)
  std::string spatial_line;       // parallel.spatial's split in words ("" without one)
  std::string memory_line;        // what a rank needs in memory ("" when not stated)
  int64_t batch = 0, global_batch = 0;
  int64_t total_steps = 0, steps_per_epoch = 0, epochs = 0;
  int64_t train_samples = 0, test_samples = 0;
  std::string optimizer, precision, run_dir;
  double base_lr = 0;             // the peak learning rate, as the schedule uses it
  int64_t warmup_steps = 0;
  double weight_decay = 0;
  int64_t seed = 0;
  std::string resumed_from;       // the checkpoint a resumed run continues ("" for a new run)
  int64_t first_step = 0;         // the step it continues after
  std::optional<ShapeChange> shape_change;  // it resumed on another number of ranks
  // squall stage's record of the training set, when it was staged (times in ms since the epoch).
  std::optional<std::pair<int64_t, int64_t>> staging_ms;
  double init_start_s = 0;        // when the process started (system clock, seconds since the epoch)
};

struct TrainWindow {
  int64_t step = 0, epoch = 0;
  double loss = 0, lr = 0;
  int learners = 1;
  double samples_per_s = 0;       // this attempt's, over its loop so far
  std::optional<double> steady_samples_per_s;  // this attempt's steady rate so far (nullopt: not yet)
  double compute_s = 0, allreduce_s = 0, io_wait_s = 0;  // this attempt's, so far
  std::optional<double> loss_scale;     // fp16's dynamic loss scale
  std::optional<int64_t> skipped_steps; // non-finite steps skipped
  // parallel.spatial: rank 0's halo seconds so far, exposed (its graph waited) and hidden
  // (under compute); nullopt without a split.
  std::optional<double> halo_exposed_s, halo_hidden_s;
};

struct EvalFacts {
  int64_t step = 0, epoch = 0;
  const nn::ConfusionMatrix* cm = nullptr;  // summed over the ranks
  double loss = 0;
  double eval_s = 0;
  double epochs_done = 0;         // samples trained on / training samples
  // The final model's evaluation after the job's last synchronisation, when train.target was
  // reached between two: metrics.jsonl's record says "final_model": true, and the MLPerf log,
  // whose run ended with the evaluation that reached the target, leaves it out.
  bool final_model = false;
};

struct TargetFacts {
  std::string metric;             // "accuracy" | "miou"
  double target = 0;              // train.target.value
  double value = 0;               // what the evaluation measured
  int64_t step = 0, epoch = 0;
  double run_s = 0;               // time to target on the run's clock
};

// What summary.json says of the run that ends; the loop fills it from the pieces it drives.
struct RunSummary {
  // This attempt.
  int64_t first_step = 0, steps = 0;  // steps is the run's last step
  double wall_s = 0, loop_s = 0, samples_per_s = 0;
  double compute_s = 0, allreduce_s = 0, overlapped_s = 0, io_wait_s = 0;
  SteadyRate steady;                  // the steady rate and what it measured
  // The whole run (its clock: the earlier attempts' seconds and loop_s).
  int64_t samples_done = 0;
  // The job.
  int ranks = 1, nodes = 1, learners = 1, threads = 1;
  std::string algorithm, backend, device, model, precision, layout, optimizer, data, config_origin;
  std::optional<std::string> cpu_streams;      // the CPU's streams as they ran (inline | async)
  std::optional<int64_t> cpu_stream_jitter_us;  // an integer, as SQUALL_CPU_STREAM_JITTER gives it
  int64_t parameters = 0, global_batch = 0, batch = 0, epochs = 0;
  int64_t input_c = 0, input_h = 0, input_w = 0, classes = 0;  // one sample's shape, the classes
  int64_t skipped_steps = 0, skipped_samples = 0;
  nlohmann::json parallel;                     // the algorithm's coefficients and the sums' shape
  nlohmann::json memory;                       // what a rank needs and what the ranks used (null: not stated)
  nlohmann::json normalization;
  // The result.
  double train_loss = 0, test_loss = 0;
  const nn::ConfusionMatrix* cm = nullptr;
  std::string model_checksum;
  std::optional<TargetFacts> target;           // train.target, when set
  std::optional<ShapeChange> shape_change;     // this attempt resumed on another number of ranks
  std::string target_metric;                   // ... its metric ("" when unset)
  double target_value = 0;
};

class RunLog {
 public:
  explicit RunLog(const RunLogOptions& options);
  ~RunLog();  // an MLPerf log not ended by finished() or stopped() ends with run_stop "aborted"
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // The opening lines, a resumed run's record, MLPerf's job keys and run_start.
  void opened(const RunFacts& facts);
  void epoch_started(int64_t epoch);
  void epoch_ended(int64_t epoch);
  // Every step: the console's progress (a line rewritten on a terminal, otherwise a plain line
  // every log_every steps).
  void progress(const ProgressSample& p);
  // Every log_every steps and after the last: the training loss and rates.
  void train_window(const TrainWindow& w);
  void eval_started(int64_t epoch);
  void evaluated(const EvalFacts& e);
  void target_reached(const TargetFacts& t);
  void checkpoint_written(int64_t step, const std::filesystem::path& path, double seconds);
  void autotuned(int64_t step, const nlohmann::json& decision, int learners, int64_t steps_per_epoch,
                 int64_t total_steps);
  // train.epoch_quorum: an epoch's steps trained and let pass per node, and the samples carried
  // (metrics.jsonl; a line when any were carried).
  void paced(int64_t epoch, int64_t step, const std::vector<int64_t>& node_trained,
             const std::vector<int64_t>& node_idle, int64_t carried, double quorum);
  void end_progress();                 // ends a live progress line (before other output)
  void warn(const std::string& text);  // ends a live progress line first
  // The end: summary.json (atomically), the closing lines, run_stop "success".
  void finished(const RunSummary& s);
  // A stop signal: the closing line, run_stop "aborted".
  void stopped(int64_t step, int64_t total_steps, const std::string& signal, const std::filesystem::path& checkpoint,
               int exit_code);

  // metrics.jsonl's line count (a checkpoint records it), and the run's clock, started when the
  // log is made.
  int64_t metrics_lines() const;
  const RunClock& clock() const { return m_clock; }

 private:
  void record(nlohmann::json j);  // metrics.jsonl, with the attempt and the run's clock added
  void scalar(const std::string& tag, int64_t step, double value);
  nlohmann::json summary_json(const RunSummary& s) const;

  RunLogOptions m_options;
  RunClock m_clock;
  std::unique_ptr<Progress> m_progress;
  std::unique_ptr<LineFile> m_metrics;  // metrics.jsonl
  std::unique_ptr<TensorBoardWriter> m_tensorboard;
  std::unique_ptr<MlLog> m_mllog;
  bool m_ended = false;  // run_stop written
};

}  // namespace squall::records
