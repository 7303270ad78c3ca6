// Reading a run dir for the calibration of `squall model` (perf_run.hpp).
#include "src/config/setup.hpp"
#include "src/perf/perf_run.hpp"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "src/core/error.hpp"
#include "io/checkpoint/named_weights.hpp"
#include "io/checkpoint/store.hpp"
#include "src/config/config.hpp"
#include "src/config/model_spec.hpp"
#include "io/records/run_records.hpp"

namespace squall::perf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The input and classes summary.json records (runs written before it did have none).
bool input_from_summary(const json& summary, const fs::path& path, data::DatasetInfo& info, std::string& from) {
  const auto input = summary.find("input");
  if (input == summary.end() || !input->is_object() || !summary.contains("classes")) return false;
  info.sample = nn::Shape(1, input->value("channels", int64_t{0}), input->value("height", int64_t{0}),
                          input->value("width", int64_t{0}));
  info.classes = summary.at("classes").get<int64_t>();
  if (info.sample.c() <= 0 || info.sample.h() <= 0 || info.sample.w() <= 0 || info.classes <= 0) return false;
  from = path.string();
  return true;
}

// The input and classes of the run's newest checkpoint that reads (its metadata only).
bool input_from_checkpoint(const fs::path& dir, data::DatasetInfo& info, std::string& from, std::string& why) {
  const auto folders = checkpoint::CheckpointStore::list(dir);
  if (folders.empty()) why += "no checkpoint in " + (dir / "checkpoints").string();
  for (const fs::path& folder : folders) {
    try {
      const checkpoint::ModelCheckpoint ck = checkpoint::load_model_description(folder);
      info.sample = ck.input;
      info.classes = ck.spec.classes;
      from = "checkpoint " + folder.string();
      return true;
    } catch (const Error& e) {
      why += std::string(why.empty() ? "" : "; ") + e.what();
    }
  }
  return false;
}

// The run's training data as its config names it: opened for its shape only, nothing read.
// (The config's data keys are used here alone.)
bool input_from_data(const config::Config& cfg, data::DatasetInfo& info, std::string& from, std::string& why) {
  const std::string& path = cfg.data.train;
  try {
    const auto source = config::open_data(cfg.data, path, "train", nullptr, true);
    info = source->info();
    from = "data.train " + path;
    return true;
  } catch (const Error& e) {
    why += std::string(why.empty() ? "" : "; ") + "data.train: " + e.what();
    return false;
  }
}

}  // namespace

CalibrationRun read_calibration_run(const std::string& path) {
  CalibrationRun run;
  run.path = path;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw UsageError("--calibrate: '" + path + "' does not exist (give a run dir or its summary.json)");
  const bool is_dir = fs::is_directory(path, ec);
  if (is_dir && !fs::exists(fs::path(path) / records::k_summary_file.name, ec))
    throw UsageError("--calibrate: run dir '" + path + "' has no summary.json (a run writes it when it ends)");
  records::RunDir rd;
  try {
    rd = records::read_run_dir(path);
  } catch (const Error& e) {
    throw UsageError("--calibrate: " + std::string(e.what()));
  }
  const fs::path summary_path = is_dir ? rd.path_of(records::k_summary_file) : fs::path(path);
  const fs::path& dir = rd.dir;
  const json& summary = rd.summary;
  try {
    run.measurement = read_summary(summary);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError("--calibrate: " + summary_path.string() + ": " + e.what());
  }
  // A run dir written before summary.json's `attempt`: a resumed run's figures are its last
  // attempt's, which began at its last resume record.
  if (!summary.contains("attempt") && !rd.records.resumes.empty()) run.measurement.steps = rd.progress.attempt_steps;

  const fs::path config_path = rd.path_of(records::k_config_file);
  data::DatasetInfo info;
  std::string why;
  if (rd.has_config) {
    config::Config cfg;
    try {
      cfg = config::load_config(config_path.string());
    } catch (const Error& e) {
      throw UsageError("--calibrate: the run's config cannot be read: " + std::string(e.what()));
    }
    run.model_from = config_path.string();
    run.has_knobs = true;
    run.has_input = input_from_summary(summary, summary_path, info, run.input_from) ||
                    input_from_checkpoint(dir, info, run.input_from, why) ||
                    input_from_data(cfg, info, run.input_from, why);
    run.spec = config::model_spec(cfg, info);
    if (run.spec.name != run.measurement.model)
      throw UsageError("--calibrate: " + config_path.string() + " names model " + run.spec.name + " but " +
                       summary_path.string() + " " + run.measurement.model + ": not one run");
  } else {
    // A summary.json alone: its model with the knobs of its checkpoint, if any, else the zoo's defaults.
    run.model_from = summary_path.string();
    run.spec.name = run.measurement.model;
    run.spec.classes = 0;  // unknown
    why = config_path.string() + " is missing";
    const auto folders = checkpoint::CheckpointStore::list(dir);
    for (const fs::path& folder : folders) {
      try {
        const checkpoint::ModelCheckpoint ck = checkpoint::load_model_description(folder);
        if (ck.spec.name != run.spec.name) continue;
        run.spec = ck.spec;
        run.has_knobs = true;
        run.model_from = "checkpoint " + folder.string();
        info.sample = ck.input;
        info.classes = ck.spec.classes;
        run.input_from = "checkpoint " + folder.string();
        run.has_input = true;
        break;
      } catch (const Error&) {
      }
    }
  }
  if (run.has_input) {
    run.c = info.sample.c();
    run.h = info.sample.h();
    run.w = info.sample.w();
    run.spec.classes = run.spec.classes > 0 ? run.spec.classes : info.classes;
  } else {
    run.no_input_why = why;
  }
  return run;
}

}  // namespace squall::perf
