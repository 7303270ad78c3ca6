#pragma once
// Staging: copying the shards a node will read onto its node-local storage (NVMe, a RAM
// disk) before training, so that the job reads nothing from the parallel file system.
// `squall stage` (src/app/cmd_stage.cpp) runs these under mpirun; this file is the
// per-file part, free of MPI.
//
// A copy is never left half-written under its final name: it goes to
// "<dest>/<name>.rank<R>.tmp" (one temporary name per writer, so ranks that share a
// destination never write the same file), is fsync'd, read back and compared (size and
// CRC-32 computed while reading the source), and only then renamed into place.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/input/sampler.hpp"
#include "src/data/data_source.hpp"

namespace squall::input {

struct FileDigest {
  int64_t size = 0;
  uint32_t crc32 = 0;  // zlib's CRC-32 of the whole file
  bool operator==(const FileDigest&) const = default;
};

// Reads the whole file. Throws squall::Error naming it when it cannot be read.
FileDigest digest_file(const std::string& path);

struct StagedFile {
  std::string source;
  std::string destination;
  bool copied = false;   // false: skipped, an identical copy (size and CRC-32) was already there
  int64_t bytes = 0;     // the file's size
};

// Copies `source` into the directory `dest_dir` under its own file name, verified, unless a
// file of the same size and CRC-32 is already there. `writer` (e.g. the MPI rank) names the
// temporary file. Throws squall::Error naming the file on any failure (and removes the
// temporary file).
StagedFile stage_file(const std::string& source, const std::string& dest_dir, int writer);

// `to` with every "{node}" replaced by `node`: emulated nodes on one machine (and sites whose
// node-local path is shared by name) get one destination per node, e.g. /tmp/stage/node{node}.
std::string expand_node_placeholder(const std::string& to, int node);

// The files `node`'s ranks read under `sampler` (Sampler::files_for_node), as paths, followed
// by the dataset's stats.h5 when one lies beside them (DeepCAM's per-channel statistics).
std::vector<std::string> files_to_stage(const data::DataSource& source, const Sampler& sampler, int node);

// What `squall stage` leaves beside the files it staged, ".squall-stage.json": when the
// node's staging started and stopped (ms since the epoch, the node's clock), the files and
// bytes it holds and where they came from. A training run on the staged folder reports the
// staging with its MLPerf log (run.mllog; docs/metrics.md).
struct StageRecord {
  int64_t start_ms = 0, stop_ms = 0;
  int64_t files = 0, bytes = 0;
  std::string source;
};
inline constexpr const char* k_stage_record = ".squall-stage.json";

// Writes it into `dir` (atomically). Throws squall::Error naming the file.
void write_stage_record(const std::string& dir, const StageRecord& record);
// The record in `dir`, or nullopt when there is none; one that cannot be read is an Error
// naming it.
std::optional<StageRecord> read_stage_record(const std::string& dir);

}  // namespace squall::input
