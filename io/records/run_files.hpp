#pragma once
// The files a run dir holds (docs/metrics.md, "Run records"): each one's name, what it holds and
// its fields, in one table that the writer (run_log.cpp, the trainer's timeline and run-dir
// check) and the readers (read_run_dir in run_records.hpp, `squall report`, `squall model
// --calibrate`) share. The files' formats are read outside squall too (the Python tests, bench/):
// a field is added here, in the writer and in docs/training.md, never renamed.
#include <span>
#include <string_view>

namespace squall::records {

// What a field's value is; read_run_dir refuses a file whose field is of another kind.
enum class FieldKind { integer, number, text, boolean, object, array, any };

struct RunField {
  std::string_view name;
  FieldKind kind = FieldKind::any;
  bool nullable = false;  // null is a value too (a rate not measured yet)
  bool always = true;     // the writer writes it every time (false: only when it applies)
};

struct RunFile {
  std::string_view name;             // in the run dir
  std::string_view holds;            // what it holds, in words
  std::span<const RunField> fields;  // a JSON file's fields (metrics.jsonl: every record's); empty: not JSON
};

namespace run_fields {

using K = FieldKind;

// Every record of metrics.jsonl; each kind of record (train, eval, resume, target, checkpoint,
// autotune) carries its own fields besides (docs/training.md, "What a run prints and writes").
inline constexpr RunField metrics[] = {{"kind", K::text}, {"step", K::integer}, {"attempt", K::integer},
                                       {"elapsed_s", K::number}};

inline constexpr RunField summary[] = {
    // The job.
    {"world_size", K::integer}, {"nodes", K::integer}, {"devices_per_rank", K::integer},
    {"replicas_per_device", K::integer}, {"algorithm", K::text}, {"parallel", K::any, true},
    {"memory", K::any, true},
    {"backend", K::text}, {"device", K::text}, {"threads", K::integer},
    {"cpu_streams", K::text, false, false}, {"cpu_stream_jitter_us", K::integer, false, false},
    // The model and the data.
    {"model", K::text}, {"parameters", K::integer}, {"input", K::object}, {"classes", K::integer},
    {"precision", K::text}, {"layout", K::text}, {"optimizer", K::text}, {"data", K::text},
    {"normalization", K::any, true}, {"config", K::text},
    // The steps and their times: this attempt's at the top, `attempt` and `run` besides.
    {"global_batch", K::integer}, {"batch_per_learner", K::integer}, {"epochs", K::integer},
    {"steps", K::integer}, {"skipped_steps", K::integer}, {"skipped_samples", K::integer},
    {"wall_s", K::number}, {"train_loop_s", K::number}, {"samples_per_s", K::number},
    {"steady_samples_per_s", K::number, true}, {"time_breakdown_s", K::object}, {"attempt", K::object},
    {"run", K::object},
    // The result.
    {"final", K::object}, {"model_checksum", K::text}, {"target", K::object, false, false},
};

}  // namespace run_fields

inline constexpr RunFile k_metrics_file{"metrics.jsonl", "the run's records, one JSON object a line",
                                        run_fields::metrics};
inline constexpr RunFile k_summary_file{"summary.json", "the run's figures, written when it ends",
                                        run_fields::summary};
inline constexpr RunFile k_config_file{"config.toml", "the resolved config the run trained with", {}};
inline constexpr RunFile k_timeline_file{"timeline.json", "the Chrome trace of the timed steps (--timeline)", {}};
inline constexpr RunFile k_mllog_file{"mlperf.log", "MLPerf-style :::MLLOG lines (run.mllog)", {}};

// Every file, in the order a run dir's contents are listed.
inline constexpr const RunFile* k_run_files[] = {&k_metrics_file, &k_summary_file, &k_config_file, &k_timeline_file,
                                                 &k_mllog_file};

// A field's kind in words ("an integer", "a JSON object").
std::string_view field_kind_text(FieldKind kind);

}  // namespace squall::records
