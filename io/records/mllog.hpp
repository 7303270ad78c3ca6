#pragma once
// MLPerf-style logs (docs/formats.md, "MLPerf logs"): one event a line,
//
//   :::MLLOG {"namespace": "", "time_ms": 1712345678901, "event_type": "POINT_IN_TIME",
//             "key": "global_batch_size", "value": 256, "metadata": {"file": "...", "lineno": 42}}
//
// (on one line), as the mlperf_logging package (github mlcommons/logging) writes them and as its
// parser and compliance checker read them. The fields come in the package's order; the value
// and the metadata are any JSON. Which keys a run logs, and when, is the trainer's business
// (docs/metrics.md); the names are collected in `mlkey` below so that they are spelt once.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "src/core/durable.hpp"
#include <source_location>
#include <string>
#include <string_view>

namespace squall::records {

// The event types: a moment, or the start and end of an interval (run, epoch, eval, ...).
enum class MlEvent { point, interval_start, interval_end };

// "POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END": the package's spelling.
std::string_view ml_event_name(MlEvent type);

// One whole line, "\n" included. `metadata` must be a JSON object (or null: none); its keys
// follow "file" and "lineno" taken from `where`. Strings are written as ASCII (\u escapes), since
// the package's parser reads files as Latin-1; NaN and infinities become null. Throws
// squall::Error naming the key when the metadata is not an object.
std::string mllog_line(MlEvent type, std::string_view key, const nlohmann::json& value,
                       const nlohmann::json& metadata, int64_t time_ms, std::string_view file, int line,
                       std::string_view name_space = "");

// A source file as the metadata names it: relative to squall's source folder where that can be
// told (a path the compiler or ccache made relative loses its leading "../"), else as given.
std::string mllog_source_file(std::string_view file);

// Appends lines to one file, each with one write(2), so that a crashed run leaves whole lines
// and several processes appending to the same file (O_APPEND) do not cut each other's lines.
// Not thread-safe: one thread logs.
class MlLog {
 public:
  // Opens (creating) `file`; `append` keeps what is there (a resumed run), else it is emptied.
  // Throws squall::Error naming the file.
  MlLog(const std::filesystem::path& file, bool append);
  MlLog(const MlLog&) = delete;
  MlLog& operator=(const MlLog&) = delete;

  // Writes one line stamped with the time now (milliseconds since the Unix epoch, never before
  // the previous line's: a clock stepped back would otherwise give an interval a negative
  // length) and with the caller's file and line. Throws squall::Error naming the file when the
  // write fails (a full disk) or the metadata is not an object.
  void log(MlEvent type, std::string_view key, const nlohmann::json& value = nullptr,
           const nlohmann::json& metadata = nullptr, std::source_location where = std::source_location::current());

  // A line stamped with a time of the past, `time_s` seconds since the Unix epoch: when the
  // process started (init_start) or when `squall stage` staged the data. It does not hold later
  // lines back to it.
  void log_at(double time_s, MlEvent type, std::string_view key, const nlohmann::json& value = nullptr,
              const nlohmann::json& metadata = nullptr, std::source_location where = std::source_location::current());

  // log() with the type named.
  void point(std::string_view key, const nlohmann::json& value = nullptr, const nlohmann::json& metadata = nullptr,
             std::source_location where = std::source_location::current()) {
    log(MlEvent::point, key, value, metadata, where);
  }
  void start(std::string_view key, const nlohmann::json& value = nullptr, const nlohmann::json& metadata = nullptr,
             std::source_location where = std::source_location::current()) {
    log(MlEvent::interval_start, key, value, metadata, where);
  }
  void end(std::string_view key, const nlohmann::json& value = nullptr, const nlohmann::json& metadata = nullptr,
           std::source_location where = std::source_location::current()) {
    log(MlEvent::interval_end, key, value, metadata, where);
  }

  // The namespace field of later lines (default ""; the package uses it for e.g. "GPU0").
  void set_namespace(std::string name_space) { m_namespace = std::move(name_space); }
  const std::filesystem::path& path() const { return m_file.path(); }
  int64_t lines() const { return m_file.lines(); }  // lines this object wrote

 private:
  void write(MlEvent type, std::string_view key, const nlohmann::json& value, const nlohmann::json& metadata,
             int64_t time_ms, const std::source_location& where);

  LineFile m_file;
  std::string m_namespace;
  int64_t m_last_ms = 0;
};

// The keys, as the package's constants spell them (mlperf_logging/mllog/constants.py), and the
// HPC ones its HPC rules and reference implementations use.
namespace mlkey {
// submission
inline constexpr const char* submission_benchmark = "submission_benchmark";
inline constexpr const char* submission_division = "submission_division";   // "closed" | "open"
inline constexpr const char* submission_org = "submission_org";
inline constexpr const char* submission_platform = "submission_platform";
inline constexpr const char* submission_status = "submission_status";       // "onprem" | "cloud" | "research" | "preview"
// timing: *_start / *_stop are INTERVAL_START / INTERVAL_END
inline constexpr const char* init_start = "init_start";
inline constexpr const char* init_stop = "init_stop";
inline constexpr const char* run_start = "run_start";
inline constexpr const char* run_stop = "run_stop";                         // metadata status
inline constexpr const char* staging_start = "staging_start";               // HPC
inline constexpr const char* staging_stop = "staging_stop";                 // HPC
inline constexpr const char* block_start = "block_start";                   // metadata first_epoch_num, epoch_count
inline constexpr const char* block_stop = "block_stop";
inline constexpr const char* epoch_start = "epoch_start";                   // metadata epoch_num
inline constexpr const char* epoch_stop = "epoch_stop";
inline constexpr const char* eval_start = "eval_start";                     // metadata epoch_num
inline constexpr const char* eval_stop = "eval_stop";
// run information
inline constexpr const char* cache_clear = "cache_clear";
inline constexpr const char* seed = "seed";
inline constexpr const char* train_samples = "train_samples";
inline constexpr const char* eval_samples = "eval_samples";
inline constexpr const char* trained_samples = "trained_samples";
inline constexpr const char* eval_accuracy = "eval_accuracy";               // metadata epoch_num
inline constexpr const char* eval_error = "eval_error";                     // HPC (CosmoFlow)
inline constexpr const char* weights_initialization = "weights_initialization";
// job shape (HPC)
inline constexpr const char* number_of_ranks = "number_of_ranks";
inline constexpr const char* number_of_nodes = "number_of_nodes";
inline constexpr const char* accelerators_per_node = "accelerators_per_node";
// squall's own: an attempt resumed on another shape (docs/training.md, "Elastic resume")
inline constexpr const char* shape_change = "squall_shape_change";
// hyperparameters
inline constexpr const char* global_batch_size = "global_batch_size";
inline constexpr const char* local_batch_size = "local_batch_size";         // HPC reference implementations
inline constexpr const char* batchnorm_group_size = "batchnorm_group_size"; // HPC (DeepCAM)
inline constexpr const char* gradient_accumulation_steps = "gradient_accumulation_steps";
inline constexpr const char* gradient_accumulation_frequency = "gradient_accumulation_frequency";  // HPC
inline constexpr const char* opt_name = "opt_name";
inline constexpr const char* opt_base_learning_rate = "opt_base_learning_rate";
inline constexpr const char* opt_end_learning_rate = "opt_end_learning_rate";
inline constexpr const char* opt_learning_rate_warmup_steps = "opt_learning_rate_warmup_steps";
inline constexpr const char* opt_learning_rate_warmup_factor = "opt_learning_rate_warmup_factor";
inline constexpr const char* opt_learning_rate_decay_steps = "opt_learning_rate_decay_steps";
inline constexpr const char* opt_learning_rate_decay_factor = "opt_learning_rate_decay_factor";
inline constexpr const char* opt_learning_rate_decay_boundary_steps = "opt_learning_rate_decay_boundary_steps";
inline constexpr const char* opt_weight_decay = "opt_weight_decay";
inline constexpr const char* opt_gradient_clip_norm = "opt_gradient_clip_norm";
inline constexpr const char* opt_adam_beta_1 = "opt_adam_beta_1";
inline constexpr const char* opt_adam_beta_2 = "opt_adam_beta_2";
inline constexpr const char* opt_adam_epsilon = "opt_adam_epsilon";
inline constexpr const char* opt_adamw_beta_1 = "opt_adamw_beta_1";
inline constexpr const char* opt_adamw_beta_2 = "opt_adamw_beta_2";
inline constexpr const char* opt_adamw_epsilon = "opt_adamw_epsilon";
inline constexpr const char* opt_adamw_weight_decay = "opt_adamw_weight_decay";
inline constexpr const char* opt_lamb_beta_1 = "opt_lamb_beta_1";
inline constexpr const char* opt_lamb_beta_2 = "opt_lamb_beta_2";
inline constexpr const char* opt_lamb_epsilon = "opt_lamb_epsilon";
inline constexpr const char* opt_lamb_weight_decay_rate = "opt_lamb_weight_decay_rate";
inline constexpr const char* max_steps = "max_steps";
// DeepCAM under the HPC closed rules (hpc_*/closed_deepcam*.yaml): its own optimizer and
// scheduler names
inline constexpr const char* opt_lr = "opt_lr";
inline constexpr const char* opt_betas = "opt_betas";                       // [beta1, beta2]
inline constexpr const char* opt_eps = "opt_eps";
inline constexpr const char* opt_bias_correction = "opt_bias_correction";   // LAMB
inline constexpr const char* opt_grad_averaging = "opt_grad_averaging";     // LAMB
inline constexpr const char* opt_max_grad_norm = "opt_max_grad_norm";       // LAMB
inline constexpr const char* scheduler_type = "scheduler_type";             // "multistep" | "cosine_annealing"
inline constexpr const char* scheduler_milestones = "scheduler_milestones"; // multistep
inline constexpr const char* scheduler_decay_rate = "scheduler_decay_rate"; // multistep
inline constexpr const char* scheduler_t_max = "scheduler_t_max";           // cosine_annealing
inline constexpr const char* scheduler_eta_min = "scheduler_eta_min";       // cosine_annealing
inline constexpr const char* scheduler_lr_warmup_steps = "scheduler_lr_warmup_steps";
inline constexpr const char* scheduler_lr_warmup_factor = "scheduler_lr_warmup_factor";
}  // namespace mlkey

// Metadata keys, and the values of run_stop's status.
namespace mlmeta {
inline constexpr const char* epoch_num = "epoch_num";
inline constexpr const char* epoch_count = "epoch_count";
inline constexpr const char* first_epoch_num = "first_epoch_num";
inline constexpr const char* step_num = "step_num";
inline constexpr const char* samples_count = "samples_count";
inline constexpr const char* status = "status";
inline constexpr const char* success = "success";
inline constexpr const char* aborted = "aborted";
}  // namespace mlmeta

}  // namespace squall::records
