#pragma once
// The model of a checkpoint, read for `squall eval` (docs/training.md, "Evaluating a
// checkpoint"). Unlike CheckpointStore::load, which resumes training and so wants the job's own
// number of ranks and every rank's part, evaluation needs model.h5 alone (the central model and
// the run's config) and works on any number of ranks: rank 0 reads the file and hands it to the
// others, one reader for the whole job.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint_file.hpp"
#include "mpi/comm.hpp"
#include "src/data/data_source.hpp"
#include "src/nn/graph.hpp"
#include "io/checkpoint/trainer_state.hpp"

namespace squall::checkpoint {

// ---- named weights (docs/formats.md, "Checkpoints": the model entries) ----------------------

// One parameter or state tensor of the central model, under its graph name.
struct NamedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// What a checkpoint says about its model, for anyone who wants the weights without the
// training job: the model's spec, its input and classes, the normalisation the data had, and
// every tensor by name.
struct ModelCheckpoint {
  std::string origin;                 // the model.h5 it was read from, for messages
  int64_t step = 0;
  nn::ModelSpec spec;                 // what make_model builds
  std::string model_config;           // the run's [model] section (TOML)
  nn::Shape input;                    // one sample: [1, c, h, w]
  std::vector<std::string> class_names;
  // The training data's channel names and units, and its grid (degrees; rows south to
  // north): empty when the data did not name them (images, checkpoints before 2026-11).
  std::vector<std::string> channel_names, channel_units;
  std::vector<double> lat, lon;
  data::Normalization normalization;  // the training set's (kind "none": raw values)
  // Every parameter ("conv1.weight") and state tensor (BatchNorm's "bn1.running_mean"), by
  // its graph name, as in a PyTorch state_dict.
  std::map<std::string, NamedTensor> tensors;
};

// Reads `path` (a step-NNNNNNNN folder or its model.h5). Throws squall::Error naming the file
// when it cannot be read, or when it predates named weights (a checkpoint written before
// format version 2 holds only the flat arenas: it still resumes its own run, but is refused
// here; re-save it by resuming the run for one step).
ModelCheckpoint load_model_checkpoint(const std::filesystem::path& path);
// What load_model_checkpoint gives without the arrays (no tensors, no normalisation mean and
// std): the spec, input and classes, read at the same small cost whatever the model's size.
ModelCheckpoint load_model_description(const std::filesystem::path& path);
// The same from data already read (CheckpointData::origin names it in errors).
ModelCheckpoint model_checkpoint_from(const CheckpointData& data);

// Copies the checkpoint's tensors into a built graph, by name: every parameter and state
// tensor of `graph` must be in the checkpoint with the same shape, and every tensor of the
// checkpoint must be in the graph. Throws squall::Error naming the checkpoint and the tensor.
// Waits for the copies (they are on `stream`) before returning.
void load_into_graph(const ModelCheckpoint& ck, nn::Graph& graph, nn::Backend& backend, nn::Stream& stream);

// What the trainer writes for load_model_checkpoint: the entries "model/<name>" (parameters
// and state tensors) with their shapes, "spec/...", "input/...", "class_names" and
// "normalization/..." (docs/formats.md). `graph` gives the names and shapes; `params` and
// `state` are the central model's tensors on the host in `graph`'s order, packed as the
// checkpoint's central/params and central/state hold them (src/nn/param_arena.hpp).
void add_model_entries(CheckpointData& out, const nn::Graph& graph, const std::vector<float>& params,
                       const std::vector<float>& state, const nn::ModelSpec& spec, const std::string& model_config,
                       const data::DatasetInfo& info, const data::Normalization& normalization);

struct CheckpointModel {
  std::filesystem::path folder;  // the step-NNNNNNNN folder
  CheckpointData data;       // its model.h5, on every rank
  TrainerState state;            // the run's config, model, step and sizes (trainer_state.hpp)
  ModelCheckpoint model;         // its named weights and what they need, on every rank
  std::string name() const { return folder.filename().string(); }
};

// Collective. `path`: a checkpoint folder or its model.h5. Every rank throws the same
// CollectiveError: exit 2 when the path does not exist or is not a checkpoint (a run dir:
// the message says to use --run), exit 1 naming the file when model.h5 cannot be read or lacks
// what evaluation needs (the named weights among it: model_checkpoint_from must accept it).
CheckpointModel read_checkpoint_model(const std::filesystem::path& path, const mpi::Communicator& world);

// Collective. The newest checkpoint of `run_dir` (CheckpointStore::list) whose model.h5 reads
// whole; each one that does not is named in a warning on rank 0 and the next older tried. A
// CollectiveError with exit 2 naming the run dir when it has no checkpoint, with exit 1 naming
// each one and why when none is readable.
CheckpointModel read_newest_checkpoint_model(const std::filesystem::path& run_dir, const mpi::Communicator& world);

// The checkpoint a command (`eval`, `predict`, `export`) names: exactly one of --checkpoint
// PATH and --run DIR. check_checkpoint_args throws CollectiveError (exit 2) naming `command`
// when neither or both are given (every rank parsed the same arguments, so all throw alike);
// read_checkpoint_args checks, then reads it (collective, as the two readers above).
void check_checkpoint_args(const std::string& command, const std::string& checkpoint, const std::string& run_dir);
CheckpointModel read_checkpoint_args(const std::string& command, const std::string& checkpoint,
                                     const std::string& run_dir, const mpi::Communicator& world);

}  // namespace squall::checkpoint
