#pragma once
// Checkpoints of a training job (docs/training.md, "Checkpoints and restart"; the files:
// docs/formats.md, "Checkpoints").
//
// A checkpoint is a folder <run dir>/checkpoints/step-NNNNNNNN/ holding model.h5 (written by
// rank 0: the central model, the step, the loader's position, the config, and whatever every
// rank holds alike) and, when the replicas differ from rank to rank (sma, local-sgd), one
// node-NNNNN.h5 per node (numbered as mpi::Topology numbers the nodes, emulated ones
// included): the node's leader (node-local rank 0) gathers its ranks' parts over the node
// communicator and writes them as one HDF5 group per rank, named by global rank
// ("rank-00003"). No rank gathers the job's state, and a job of N nodes writes N + 1 files,
// not one per rank. The folder is built as step-NNNNNNNN.partial, every file flushed to
// storage, and renamed into place only when every node's file is written: a crash, a kill or
// a full disk leaves the earlier checkpoints as they were, and a folder without ".partial" is
// always whole. The run dir must be on a file system that every rank sees (as it must for the
// run outputs).
//
// Loading: each node's leader reads model.h5 and hands it to its node's ranks; with parts, it
// reads its ranks' groups and scatters them. Which part a rank takes is the store's PartSource
// (by default the part of its own global rank, where the writing job had it): a part is found
// by the global rank that wrote it in whichever node file holds it, so a job may resume with
// another rank-to-node layout and another number of ranks; on the same layout each leader
// reads its own node's file only. A job whose ranks hold a replica per group of ranks
// (parallel.spatial) takes each group's part from the writing job's group of the same index
// (TrainingRun's PartSource). Checkpoints of earlier squall versions, with one rank-RRRRR.h5
// per rank, still load: each rank reads the file of the rank whose part it takes.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
#include "mpi/comm.hpp"
#include "mpi/topology.hpp"

namespace squall::checkpoint {

struct LoadedCheckpoint {
  std::filesystem::path path;  // its folder
  CheckpointData shared;   // model.h5, on every rank
  CheckpointData own;      // this rank's part (has_own)
  bool has_own = false;
  // The checkpoint has a part per rank but none for this one: a rank the writing job did not
  // have (a resume on more ranks, or more groups). Its replicas start from the central model.
  bool from_centre = false;
};

// Which part of a checkpoint this rank takes, from its model.h5 (`shared`): the global rank,
// in the job that wrote it, of the rank whose part it takes; -1 for none (its replicas start
// from the central model: LoadedCheckpoint::from_centre). It must not throw.
using PartSource = std::function<int64_t(const CheckpointData& shared)>;

class CheckpointStore {
 public:
  // `run_dir`: the run's folder; checkpoints live in run_dir/checkpoints. keep >= 1. `topo`
  // (its world, node communicator and node number) must outlive the store. `source`: which
  // part each rank loads (empty: its own global rank's, none past the writing job's ranks).
  CheckpointStore(std::filesystem::path run_dir, const mpi::Topology& topo, int64_t keep, PartSource source = {});

  // Collective. Writes the checkpoint of `step`: `shared` by rank 0, `own` (null: none; on
  // every rank or none) in its node's file; removes the oldest beyond `keep`. Returns its folder. When any rank cannot
  // write (a full disk, an unwritable folder), the partial folder is removed and every rank
  // throws the same CollectiveError naming the rank, the file and the reason; the earlier
  // checkpoints are intact.
  std::filesystem::path save(int64_t step, const CheckpointData& shared,
                             const CheckpointData* own);

  // Collective: the newest checkpoint that every rank reads whole. Each unreadable one is
  // reported on rank 0 and the next older tried. One of a job of another size is refused
  // (CollectiveError naming its model.h5, exit 2), not skipped; whether it is of this job
  // otherwise is the caller's check (TrainingRun::check_resumable, which refuses it naming
  // what differs). nullopt when the run dir has no checkpoint; a CollectiveError when it has
  // some and none is readable.
  std::optional<LoadedCheckpoint> load_newest();
  // Collective: the checkpoint at `path` (its folder or its model.h5); CollectiveError naming
  // it when it cannot be read.
  LoadedCheckpoint load(const std::filesystem::path& path);

  // Complete checkpoint folders under run_dir/checkpoints, newest (highest step) first.
  static std::vector<std::filesystem::path> list(const std::filesystem::path& run_dir);
  // "step-00000045".
  static std::string folder_name(int64_t step);
  // "node-00001.h5": node `node`'s parts.
  static std::filesystem::path node_file(const std::filesystem::path& folder, int node);
  // "rank-00003": the group of a node file that holds global rank `rank`'s part.
  static std::string rank_group(int rank);
  // "rank-00003.h5": a rank's part as earlier squall versions wrote it (read, never written).
  static std::filesystem::path part_file(const std::filesystem::path& folder, int rank);
  static constexpr const char* k_model_file = "model.h5";

 private:
  // Collective: every rank's reason why `folder` cannot be loaded ("" when it can); the data.
  std::string try_load(const std::filesystem::path& folder, LoadedCheckpoint& out);
  // Collective: this rank's part of `folder` (node files, or the older rank files) into `out`;
  // `written_by`: the ranks of the job that wrote it; `source`: the one of them whose part
  // this rank takes (-1: none).
  std::string load_parts(const std::filesystem::path& folder, LoadedCheckpoint& out, int64_t written_by,
                         int64_t source);
  // On a node leader: the serialized parts that the node's ranks take, those of the writing
  // job's ranks `sources` (-1: none), from the node files `files` (names in `folder`), and each
  // one's origin for messages ("" where none). A part that several ranks take is read once.
  void read_node_parts(const std::filesystem::path& folder, const std::vector<std::string>& files,
                       const std::vector<int>& sources, std::vector<std::string>& parts,
                       std::vector<std::string>& origins) const;
  void prune();

  std::filesystem::path m_dir;  // run_dir/checkpoints
  const mpi::Topology& m_topo;
  const mpi::Communicator& m_world;
  const mpi::Communicator& m_node;
  int64_t m_keep;
  PartSource m_source;
};

}  // namespace squall::checkpoint
