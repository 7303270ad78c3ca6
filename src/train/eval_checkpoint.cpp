// Finding and reading a checkpoint's model for evaluation: rank 0 reads, every rank receives.
#include "src/train/eval_checkpoint.hpp"

#include <system_error>

#include "mpi/agreement.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/train/checkpoint.hpp"

namespace squall::train {
namespace fs = std::filesystem;

namespace {

// What evaluation takes from model.h5, checked as it is read, so that a readable file that
// lacks it (another program's HDF5 file, a checkpoint cut short by hand) is reported like an
// unreadable one, naming the file and the entry.
void check_entries(const io::CheckpointData& d) {
  (void)d.text("config");
  (void)d.text("model");
  (void)d.integer("step");
  const int64_t params = d.integer("param_count"), state = d.integer("state_count");
  if (params < 0 || state < 0)
    throw Error(d.origin + ": param_count = " + std::to_string(params) + ", state_count = " + std::to_string(state) +
                ": not a model's sizes");
  (void)d.array("central/params", static_cast<size_t>(params));
  (void)d.array("central/state", static_cast<size_t>(state));
}

// Rank 0: `folder`'s model.h5, read and checked. Throws squall::Error naming the file.
CheckpointModel read_folder(const fs::path& folder) {
  CheckpointModel m;
  m.folder = folder;
  m.data = io::read_checkpoint_file((folder / CheckpointStore::k_model_file).string());
  check_entries(m.data);
  return m;
}

// Rank 0's model, handed to every rank (after the ranks agreed that rank 0 has one).
CheckpointModel share(CheckpointModel m, const mpi::Communicator& world) {
  if (world.size() == 1) return m;
  const bool root = world.rank() == 0;
  const std::string folder = world.broadcast_string(root ? m.folder.string() : std::string());
  const std::string bytes = world.broadcast_string(root ? m.data.serialize() : std::string());
  if (!root) {
    m.folder = folder;
    m.data = io::CheckpointData::deserialize(bytes, (m.folder / CheckpointStore::k_model_file).string());
  }
  return m;
}

}  // namespace

CheckpointModel read_checkpoint_model(const fs::path& path, const mpi::Communicator& world) {
  CheckpointModel m;
  mpi::run_agreed(world, [&] {
    if (world.rank() != 0) return;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) throw UsageError("checkpoint " + path.string() + ": no such file or folder");
    fs::path folder = path;
    if (fs::is_directory(st)) {
      if (!fs::exists(path / CheckpointStore::k_model_file, ec)) {
        if (fs::is_directory(path / "checkpoints", ec))
          throw UsageError(path.string() + " is a run dir, not a checkpoint: evaluate its newest checkpoint with --run " +
                           path.string());
        throw UsageError(path.string() + " holds no " + CheckpointStore::k_model_file +
                         ": not a squall checkpoint (a step-NNNNNNNN folder of <run dir>/checkpoints, or its " +
                         CheckpointStore::k_model_file + ")");
      }
    } else {
      folder = path.parent_path();
      if (path.filename() != CheckpointStore::k_model_file) {
        // A rank's part or another file: reading it as the model would fail with a less
        // helpful message about a missing entry.
        throw UsageError(path.string() + ": a checkpoint is a step-NNNNNNNN folder or its " +
                         CheckpointStore::k_model_file + ", not " + path.filename().string());
      }
    }
    if (folder.empty()) folder = ".";
    m = read_folder(folder);
  });
  return share(std::move(m), world);
}

CheckpointModel read_newest_checkpoint_model(const fs::path& run_dir, const mpi::Communicator& world) {
  CheckpointModel m;
  mpi::run_agreed(world, [&] {
    if (world.rank() != 0) return;
    std::error_code ec;
    if (!fs::is_directory(run_dir, ec)) throw UsageError("run dir " + run_dir.string() + ": no such folder");
    const std::vector<fs::path> all = CheckpointStore::list(run_dir);
    if (all.empty())
      throw UsageError("run dir " + run_dir.string() + " has no checkpoint in " + (run_dir / "checkpoints").string() +
                       " (a run writes one at its end unless checkpoint.at_end = false, and as often as "
                       "checkpoint.every_steps and checkpoint.every_minutes say)");
    std::string skipped;
    for (size_t i = 0; i < all.size(); ++i) {
      try {
        m = read_folder(all[i]);
        return;
      } catch (const Error& e) {
        skipped += (skipped.empty() ? "" : "; ") + all[i].filename().string() + ": " + e.what();
        if (i + 1 < all.size())
          log::warn("checkpoint " + all[i].string() + " is not usable, trying an older one: " + e.what());
      }
    }
    throw Error("run dir " + run_dir.string() + ": no usable checkpoint in " + (run_dir / "checkpoints").string() +
                " (" + skipped + ")");
  });
  return share(std::move(m), world);
}

}  // namespace squall::train
