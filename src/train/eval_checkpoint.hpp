#pragma once
// The model of a checkpoint, read for `squall eval` (docs/training.md, "Evaluating a
// checkpoint"). Unlike CheckpointStore::load, which resumes training and so wants the job's own
// number of ranks and every rank's part, evaluation needs model.h5 alone (the central model and
// the run's config) and works on any number of ranks: rank 0 reads the file and hands it to the
// others, one reader for the whole job.
#include <filesystem>
#include <string>

#include "io/checkpoint_file.hpp"
#include "mpi/comm.hpp"

namespace squall::train {

struct CheckpointModel {
  std::filesystem::path folder;  // the step-NNNNNNNN folder
  io::CheckpointData data;       // its model.h5, on every rank
  std::string name() const { return folder.filename().string(); }
};

// Collective. `path`: a checkpoint folder or its model.h5. Every rank throws the same
// CollectiveError: exit 2 when the path does not exist or is not a checkpoint (a run dir:
// the message says to use --run), exit 1 naming the file when model.h5 cannot be read or lacks
// what evaluation needs.
CheckpointModel read_checkpoint_model(const std::filesystem::path& path, const mpi::Communicator& world);

// Collective. The newest checkpoint of `run_dir` (CheckpointStore::list) whose model.h5 reads
// whole; each one that does not is named in a warning on rank 0 and the next older tried. A
// CollectiveError with exit 2 naming the run dir when it has no checkpoint, with exit 1 naming
// each one and why when none is readable.
CheckpointModel read_newest_checkpoint_model(const std::filesystem::path& run_dir, const mpi::Communicator& world);

}  // namespace squall::train
