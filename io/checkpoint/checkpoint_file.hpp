#pragma once
// One checkpoint file: named float arrays and named integers, reals and texts, in HDF5
// (docs/formats.md, "Checkpoints"). Arrays are chunked datasets with HDF5's Fletcher-32
// checksum on every chunk and the file uses the v1.8+ format, whose metadata carries
// checksums too, so a flipped byte or a truncated file is an error on reading, never a model
// that silently differs. Writing ends with fsync; the caller renames the finished file (or
// the folder that holds it) into place (io/checkpoint/store.hpp).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace squall::checkpoint {

struct CheckpointData {
  std::map<std::string, std::vector<float>> arrays;  // "central/params", "learner_0/optimizer/momentum"
  std::map<std::string, int64_t> ints;               // "step", "world_size"
  std::map<std::string, double> reals;               // "loss_scale"
  std::map<std::string, std::string> texts;          // "config" (TOML), "model"
  // The shape of an array that is a tensor ("model/conv1.weight" -> {6, 1, 5, 5}): the
  // dataset is written with these dimensions (their product must be the array's size), and
  // read back with them; arrays without an entry are plain vectors.
  std::map<std::string, std::vector<int64_t>> shapes;
  std::string origin;                                 // the file it was read from, for messages

  // Accessors that throw squall::Error naming `origin` and the entry when it is missing or
  // (arrays) does not hold `count` floats.
  const std::vector<float>& array(const std::string& name, size_t count) const;
  int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  const std::string& text(const std::string& name) const;
  // The shape of array `name`, or {size} when it has none recorded.
  std::vector<int64_t> shape(const std::string& name) const;

  // Bytes for a broadcast to the other ranks, and back.
  std::string serialize() const;
  static CheckpointData deserialize(const std::string& bytes, const std::string& origin);
};

// Writes `data` to `path` (replacing any file there) and flushes it to storage. Throws
// squall::Error naming the file, the entry being written and the system's reason (a full disk
// says "No space left on device"); a failed write leaves no file at `path`.
void write_checkpoint_file(const std::string& path, const CheckpointData& data);

// Reads every entry of a file written by write_checkpoint_file, verifying every checksum.
// Throws squall::Error naming the file (and the dataset) when it is missing, truncated,
// corrupt or not a squall checkpoint.
CheckpointData read_checkpoint_file(const std::string& path);

// A file of several checkpoints, each in an HDF5 group named `name` that is laid out as a
// checkpoint file's root (its own format attributes, entry lists and datasets): one node's
// ranks' parts in one file (io/checkpoint/store.hpp). The file's root says format =
// "squall-checkpoint-groups" and lists the groups in its "groups" attribute.
struct CheckpointGroup {
  std::string name;  // one path component: "rank-00003"
  const CheckpointData* data = nullptr;
};
// Writes the groups (in order) and flushes the file to storage; throws and leaves no file as
// write_checkpoint_file does.
void write_checkpoint_groups(const std::string& path, const std::vector<CheckpointGroup>& groups);
// The group names that a file written by write_checkpoint_groups lists. Throws squall::Error
// naming the file when it is missing, corrupt or no such file.
std::vector<std::string> read_checkpoint_group_names(const std::string& path);
// The named groups of such a file, in the order asked, every checksum verified; each one's
// origin is "<path>:/<name>". Throws squall::Error naming the file and the group when one is
// missing or unreadable.
std::vector<CheckpointData> read_checkpoint_groups(const std::string& path, const std::vector<std::string>& names);

// The integers, reals and texts only, not the arrays: what a checkpoint says about its run and
// model at the same small cost whatever the model's size. Throws as read_checkpoint_file.
CheckpointData read_checkpoint_metadata(const std::string& path);

}  // namespace squall::checkpoint
