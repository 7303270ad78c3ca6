#include "src/train/run_dir.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "src/core/durable.hpp"
#include "src/core/error.hpp"
#include "io/checkpoint/store.hpp"
#include "io/records/run_files.hpp"

namespace squall::train {
namespace fs = std::filesystem;

namespace {

const char* const k_output_dirs[] = {"checkpoints", "predictions", "tensorboard"};

// "section.key" -> value text, from to_toml's form. The averaging periods are compared as the run
// uses them: parallel.period = 4 alone is parallel.periods = [4, 4].
std::map<std::string, std::string> flatten(config::Config c) {
  const config::SyncPeriods p = config::sync_periods(c.parallel);
  c.parallel.periods = {p.inside, p.across};
  c.parallel.period = p.across;
  std::map<std::string, std::string> out;
  std::istringstream in(to_toml(c));
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) out[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

// Keys whose change makes the saved state mean something else: another model, another
// optimizer's state, another algorithm's replicas, another order of the data.
bool must_match(const std::string& key, const config::Config& now) {
  static const char* const keys[] = {
      "run.seed",          "data.train_samples", "data.sampling",       "data.shuffle",
      "model.name",        "model.width",        "model.depth",         "model.in_channels",
      "model.classes",     "model.aspp_rates",   "model.dropout",       "train.batch_size",
      "train.precision",   "optimizer.name",     "optimizer.larc",      "parallel.algorithm",
      "parallel.period",   "parallel.periods",   "parallel.start_step", "parallel.autotune"};
  if (std::find(std::begin(keys), std::end(keys), key) != std::end(keys)) return true;
  // The auto-tuner changes the learner count; the checkpoint says how many there were.
  return key == "parallel.replicas_per_device" && !now.parallel.autotune;
}

}  // namespace

std::vector<std::string> run_outputs(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const records::RunFile* file : records::k_run_files)
    if (file != &records::k_config_file && fs::exists(dir / file->name, ec)) found.emplace_back(file->name);
  const std::vector<fs::path> checkpoints = checkpoint::CheckpointStore::list(dir);
  if (!checkpoints.empty())
    found.push_back(std::to_string(checkpoints.size()) + " checkpoint(s) up to " +
                    checkpoints.front().filename().string());
  return found;
}

void ensure_writable_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("run.dir = '" + dir.string() + "': cannot create it: " + ec.message());
  const fs::path probe = dir / ".squall-write-probe";
  try {
    write_file_atomic(probe, "probe\n");
  } catch (const Error& e) {
    throw Error("run.dir = '" + dir.string() + "' is not writable: " + e.what());
  }
  fs::remove(probe, ec);
}

void remove_run_outputs(const fs::path& dir) {
  std::error_code ec;
  for (const records::RunFile* file : records::k_run_files) fs::remove(dir / file->name, ec);
  for (const char* name : k_output_dirs) {
    fs::remove_all(dir / name, ec);
    if (ec) throw Error(dir.string() + "/" + name + ": cannot remove it (--overwrite): " + ec.message());
  }
}

std::string resume_incompatibility(const config::Config& now, const config::Config& then,
                                   std::vector<std::string>& changed) {
  const auto a = flatten(then), b = flatten(now);
  std::string refused;
  for (const auto& [key, old_value] : a) {
    const auto it = b.find(key);
    const std::string new_value = it == b.end() ? "(none)" : it->second;
    if (new_value == old_value) continue;
    const std::string change = key + ": " + old_value + " -> " + new_value;
    if (must_match(key, now)) refused += (refused.empty() ? "" : ", ") + change;
    else changed.push_back(change);
  }
  return refused;
}

std::vector<std::string> config_differences(const config::Config& a, const config::Config& b) {
  const auto fa = flatten(a), fb = flatten(b);
  std::vector<std::string> out;
  for (const auto& [key, value] : fa)
    if (const auto it = fb.find(key); it == fb.end() || it->second != value)
      out.push_back(key + ": " + value + " -> " + (it == fb.end() ? "(none)" : it->second));
  return out;
}

}  // namespace squall::train
