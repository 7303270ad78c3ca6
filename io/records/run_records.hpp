#pragma once
// A run dir's records read back (docs/training.md, "Reports"), for `squall report` and
// `squall model --calibrate`: read_run_dir, with metrics.jsonl on one clock across the run's
// attempts, and what summary.json says about the attempts and the target. The files' names and
// fields are run_files.hpp's table, which the writer uses too.
//
// The run clock (`elapsed_s`) counts the seconds of the training loops of all attempts so far.
// Records that carry `attempt` are on it as written. Records of run dirs written before that
// field existed restart their `elapsed_s` at 0 after each `resume` record (and train records
// have none): each attempt's times are offset by the last time before its resume record.
// Train records without a time get one interpolated from the timed records around them.
#include <cstdint>
#include <filesystem>
#include <istream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/records/run_files.hpp"

namespace squall::records {

struct TrainPoint {
  int64_t step = 0;
  double loss = 0;
  double elapsed_s = 0;  // run clock; NaN when neither written nor interpolable
  int attempt = 1;
  double lr = 0;         // the learning rate of the step (the record's lr); NaN when absent
};

struct EvalPoint {
  int64_t step = 0;
  double elapsed_s = 0;  // run clock; NaN when the record has none
  double accuracy = 0, miou = 0;  // NaN when absent
  int attempt = 1;
};

struct ResumePoint {
  int64_t step = 0;      // the checkpoint's step: the attempt's first
  int attempt = 2;
  double elapsed_s = 0;  // run clock at the resume (old records: the last time before it)
  // A resume on another number of ranks (the record's shape_change): the ranks before and
  // after; 0 and 0 when the shape stayed.
  int64_t from_ranks = 0, ranks = 0;
};

struct TargetPoint {     // a `target` record: the metric reached its target
  int64_t step = 0;
  std::string metric;    // accuracy | miou
  double value = 0, target = 0, elapsed_s = 0;
};

struct RunRecords {
  std::vector<TrainPoint> train;  // in step order, one run: no step twice
  std::vector<EvalPoint> eval;
  std::vector<ResumePoint> resumes;
  std::optional<TargetPoint> target;
  bool per_pixel = false;  // eval records with test_iou_per_class: segmentation (mIoU is the metric)
  int attempts = 1;
};

// Reads metrics.jsonl. Lines that are not a JSON object (one cut by a crash) are skipped; so
// are record kinds other than train, eval, resume and target. Records of a crashed attempt
// past its checkpoint (which a resumed run removes) are dropped at the resume record.
RunRecords parse_metrics(std::istream& in);

// The run clock at `step`, interpolated linearly between the timed records (from step 0 at
// 0 s; beyond the last, at the last rate). NaN when fewer than one timed record.
double elapsed_at_step(const RunRecords& records, double step);

// The whole run, from summary.json's `run` and `attempt` objects, or for a run dir written
// before them, from its resume records and the top-level figures (those were the last
// attempt's).
struct RunProgress {
  int attempts = 1;
  double train_loop_s = 0;       // every attempt's training-loop seconds: the run clock at the end (NaN: unknown)
  int64_t steps = 0;             // the run's final step
  int64_t attempt_first_step = 0;  // the last attempt's first step (0 for a run never resumed)
  int64_t attempt_steps = 0;     // the steps the last attempt took (what its time_breakdown_s measured)
  bool reconstructed = false;    // from old records: train_loop_s adds the resume's time to the last attempt's
};
RunProgress run_progress(const nlohmann::json& summary, const RunRecords& records);

// Time to target (train.target): from summary.json's `target`, else from a `target` record
// (a run that has not written its summary yet). Absent when neither says anything.
struct TargetResult {
  std::string metric;            // accuracy | miou
  double target = 0;             // the value asked for (NaN: unknown)
  bool reached = false;
  int64_t step = -1;             // where it was reached
  double time_s = 0;             // run clock when it was reached (NaN: not reached)
  double metric_value = 0;       // the metric there (NaN: unknown)
};
std::optional<TargetResult> run_target(const nlohmann::json& summary, const RunRecords& records);

// What a run dir holds, as the readers need it.
struct RunDir {
  std::filesystem::path dir;
  bool has_metrics = false, has_summary = false, has_config = false;
  RunRecords records;                       // metrics.jsonl (none: empty)
  nlohmann::json summary = nlohmann::json::object();  // summary.json (none: an empty object)
  RunProgress progress;                     // run_progress(summary, records)
  std::optional<TargetResult> target;       // run_target(summary, records)
  std::filesystem::path path_of(const RunFile& file) const { return dir / file.name; }
};

// Reads the run dir at `path`, or the run dir of the file `path` (a summary.json, read as the
// dir's summary whatever its name). Throws squall::Error naming the path when it does not
// exist or holds neither summary.json nor metrics.jsonl ("is not a run dir"), and naming the
// file when one cannot be read or is malformed: summary.json not a JSON object, or one of its
// fields (run_files.hpp) of another kind. metrics.jsonl's lines that are not records are
// skipped (parse_metrics: a crash may cut the last one).
RunDir read_run_dir(const std::filesystem::path& path);

}  // namespace squall::records
