#pragma once
// Checkpoints of a training job (docs/training.md, "Checkpoints and restart"; the files:
// docs/formats.md, "Checkpoints").
//
// A checkpoint is a folder <run dir>/checkpoints/step-NNNNNNNN/ holding model.h5 (written by
// rank 0: the central model, the step, the loader's position, the config, and whatever every
// rank holds alike) and, when the replicas differ from rank to rank (sma, local-sgd), one
// rank-RRRRR.h5 per rank written by that rank: no rank gathers the job's state. The folder is
// built as step-NNNNNNNN.partial, every file flushed to storage, and renamed into place only
// when every rank has written its part: a crash, a kill or a full disk leaves the earlier
// checkpoints as they were, and a folder without ".partial" is always whole. The run dir must
// be on a file system that every rank sees (as it must for the run outputs).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint_file.hpp"
#include "mpi/comm.hpp"

namespace squall::train {

struct LoadedCheckpoint {
  std::filesystem::path path;  // its folder
  io::CheckpointData shared;   // model.h5, on every rank
  io::CheckpointData own;      // this rank's part (has_own)
  bool has_own = false;
};

class CheckpointStore {
 public:
  // `run_dir`: the run's folder; checkpoints live in run_dir/checkpoints. keep >= 1.
  CheckpointStore(std::filesystem::path run_dir, const mpi::Communicator& world, int64_t keep);

  // Collective. Writes the checkpoint of `step`: `shared` by rank 0, `own` (null: none) by
  // each rank; removes the oldest beyond `keep`. Returns its folder. When any rank cannot
  // write (a full disk, an unwritable folder), the partial folder is removed and every rank
  // throws the same CollectiveError naming the rank, the file and the reason; the earlier
  // checkpoints are intact.
  std::filesystem::path save(int64_t step, const io::CheckpointData& shared, const io::CheckpointData* own);

  // Collective: the newest checkpoint that every rank reads whole and that passes `check`
  // (run on every rank with the loaded data; it throws squall::Error to refuse a checkpoint
  // of another job, which is not skipped but reported). Each unreadable one is reported on
  // rank 0 and the next older tried. nullopt when the run dir has no checkpoint; a
  // CollectiveError when it has some and none is readable.
  std::optional<LoadedCheckpoint> load_newest();
  // Collective: the checkpoint at `path` (its folder or its model.h5); CollectiveError naming
  // it when it cannot be read.
  LoadedCheckpoint load(const std::filesystem::path& path);

  // Complete checkpoint folders under run_dir/checkpoints, newest (highest step) first.
  static std::vector<std::filesystem::path> list(const std::filesystem::path& run_dir);
  // "step-00000045".
  static std::string folder_name(int64_t step);
  static std::filesystem::path part_file(const std::filesystem::path& folder, int rank);
  static constexpr const char* k_model_file = "model.h5";

 private:
  // Collective: every rank's reason why `folder` cannot be loaded ("" when it can); the data.
  std::string try_load(const std::filesystem::path& folder, LoadedCheckpoint& out);
  void prune();

  std::filesystem::path m_dir;  // run_dir/checkpoints
  const mpi::Communicator& m_world;
  int64_t m_keep;
};

}  // namespace squall::train
