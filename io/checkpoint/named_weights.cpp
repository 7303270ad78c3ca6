// Finding and reading a checkpoint's model for evaluation: rank 0 reads, every rank receives.
#include "io/checkpoint/named_weights.hpp"

#include <set>
#include <sstream>
#include <system_error>

#include "mpi/agreement.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "io/checkpoint/store.hpp"

namespace squall::checkpoint {
namespace fs = std::filesystem;

namespace {

constexpr const char* k_tensors = "model/";

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

std::vector<int64_t> shape_of(const nn::Shape& s) { return std::vector<int64_t>(s.dims.begin(), s.dims.begin() + s.rank); }

}  // namespace

void add_model_entries(CheckpointData& out, const nn::Graph& graph, const std::vector<float>& params,
                       const std::vector<float>& state, const nn::ModelSpec& spec, const std::string& model_config,
                       const data::DatasetInfo& info, const data::Normalization& normalization) {
  if (params.size() != graph.parameter_count() || state.size() != graph.state_value_count())
    throw Error("checkpoint: the central model holds " + std::to_string(params.size()) + " parameters and " +
                std::to_string(state.size()) + " state values, its graph " + std::to_string(graph.parameter_count()) +
                " and " + std::to_string(graph.state_value_count()));
  auto add = [&](const std::vector<nn::ParamInfo>& infos, const std::vector<float>& packed) {
    size_t at = 0;
    for (const nn::ParamInfo& p : infos) {
      const std::string key = k_tensors + p.name;
      if (out.arrays.contains(key)) throw Error("checkpoint: two tensors of the model are named " + p.name);
      out.arrays[key].assign(packed.begin() + static_cast<std::ptrdiff_t>(at),
                             packed.begin() + static_cast<std::ptrdiff_t>(at + p.count));
      out.shapes[key] = shape_of(p.shape);
      at += p.count;
    }
  };
  add(graph.param_info(), params);
  add(graph.state_info(), state);
  out.texts["spec/name"] = spec.name;
  out.texts["spec/config"] = model_config;
  out.ints["spec/classes"] = spec.classes;
  out.ints["spec/width"] = spec.width;
  out.ints["spec/depth"] = spec.depth;
  out.reals["spec/dropout"] = spec.dropout;
  std::vector<std::string> rates;
  for (const int64_t r : spec.aspp_rates) rates.push_back(std::to_string(r));
  out.texts["spec/aspp_rates"] = join(rates, ",");
  out.ints["input/channels"] = info.sample.c();
  out.ints["input/height"] = info.sample.h();
  out.ints["input/width"] = info.sample.w();
  out.texts["class_names"] = join(info.class_names, "\n");
  if (!info.channel_names.empty()) {
    out.texts["input/channel_names"] = join(info.channel_names, "\n");
    out.texts["input/channel_units"] = join(info.channel_units, "\n");
  }
  if (!info.lat.empty() && !info.lon.empty()) {
    out.arrays["input/lat"] = std::vector<float>(info.lat.begin(), info.lat.end());
    out.arrays["input/lon"] = std::vector<float>(info.lon.begin(), info.lon.end());
  }
  out.texts["normalization/kind"] = normalization.kind;
  out.texts["normalization/source"] = normalization.source;
  out.reals["normalization/input_scale"] = normalization.input_scale;
  out.arrays["normalization/mean"] = normalization.mean;
  out.arrays["normalization/std"] = normalization.std;
}

namespace {

// The spec, input and classes: the entries that are not arrays.
ModelCheckpoint description_from(const CheckpointData& d) {
  if (!d.texts.contains("spec/name"))
    throw Error(d.origin + ": this checkpoint predates named weights (it holds the model only as flat arrays, "
                "without each tensor's name and shape, its input shape, classes and normalisation); it can still "
                "resume its run with this squall, and the checkpoints that run writes then have them");
  ModelCheckpoint m;
  m.origin = d.origin;
  m.step = d.integer("step");
  m.spec.name = d.text("spec/name");
  m.model_config = d.text("spec/config");
  m.spec.classes = d.integer("spec/classes");
  m.spec.width = d.integer("spec/width");
  m.spec.depth = d.integer("spec/depth");
  m.spec.dropout = static_cast<float>(d.real("spec/dropout"));
  for (const std::string& r : split(d.text("spec/aspp_rates"), ',')) m.spec.aspp_rates.push_back(std::stoll(r));
  m.input = nn::Shape(1, d.integer("input/channels"), d.integer("input/height"), d.integer("input/width"));
  m.class_names = split(d.text("class_names"), '\n');
  if (d.texts.contains("input/channel_names")) {
    m.channel_names = split(d.text("input/channel_names"), '\n');
    m.channel_units = split(d.text("input/channel_units"), '\n');
    m.channel_units.resize(m.channel_names.size());
    if (m.channel_names.size() != static_cast<size_t>(m.input.c()))
      throw Error(d.origin + ": input/channel_names names " + std::to_string(m.channel_names.size()) +
                  " channels for an input of " + std::to_string(m.input.c()));
  }
  data::Normalization& n = m.normalization;
  n.kind = d.text("normalization/kind");
  n.source = d.text("normalization/source");
  n.input_scale = static_cast<float>(d.real("normalization/input_scale"));
  return m;
}

fs::path model_file_of(const std::filesystem::path& path) {
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? path / CheckpointStore::k_model_file : path;
  if (!fs::exists(file, ec)) throw Error(file.string() + ": no such file (a checkpoint is a step-NNNNNNNN folder or its " +
                                         CheckpointStore::k_model_file + ")");
  return file;
}

}  // namespace

ModelCheckpoint model_checkpoint_from(const CheckpointData& d) {
  ModelCheckpoint m = description_from(d);
  data::Normalization& n = m.normalization;
  const auto mean = d.arrays.find("normalization/mean"), sd = d.arrays.find("normalization/std");
  if (mean == d.arrays.end() || sd == d.arrays.end())
    throw Error(d.origin + ": dataset normalization/mean or normalization/std is missing");
  n.mean = mean->second;
  n.std = sd->second;
  if (n.kind != "none" && (n.mean.size() != static_cast<size_t>(m.input.c()) || n.std.size() != n.mean.size()))
    throw Error(d.origin + ": normalization/mean and normalization/std hold " + std::to_string(n.mean.size()) +
                " and " + std::to_string(n.std.size()) + " values for " + std::to_string(m.input.c()) + " channels");
  const auto lat = d.arrays.find("input/lat"), lon = d.arrays.find("input/lon");
  if (lat != d.arrays.end() && lon != d.arrays.end()) {
    m.lat.assign(lat->second.begin(), lat->second.end());
    m.lon.assign(lon->second.begin(), lon->second.end());
  }
  const std::string prefix = k_tensors;
  for (const auto& [name, values] : d.arrays) {
    if (!name.starts_with(prefix)) continue;
    NamedTensor& t = m.tensors[name.substr(prefix.size())];
    t.shape = d.shape(name);
    t.values = values;
  }
  if (m.tensors.empty()) throw Error(d.origin + ": no tensors under " + prefix);
  return m;
}

ModelCheckpoint load_model_checkpoint(const std::filesystem::path& path) {
  return model_checkpoint_from(read_checkpoint_file(model_file_of(path).string()));
}

ModelCheckpoint load_model_description(const std::filesystem::path& path) {
  return description_from(read_checkpoint_metadata(model_file_of(path).string()));
}

void load_into_graph(const ModelCheckpoint& ck, nn::Graph& graph, nn::Backend& backend, nn::Stream& stream) {
  if (!graph.built()) throw Error(ck.origin + ": the graph to load it into is not built");
  std::set<std::string> used;
  auto load = [&](const std::vector<nn::ParamInfo>& infos, float* arena, const char* what) {
    for (const nn::ParamInfo& p : infos) {
      const auto it = ck.tensors.find(p.name);
      if (it == ck.tensors.end())
        throw Error(ck.origin + ": no tensor " + k_tensors + p.name + " for the model's " + what + " " + p.name + " " +
                    shape_text(shape_of(p.shape)) + " (a checkpoint of another model?)");
      if (it->second.shape != shape_of(p.shape) || it->second.values.size() != p.count)
        throw Error(ck.origin + ": tensor " + k_tensors + p.name + " has shape " + shape_text(it->second.shape) +
                    ", the model's " + what + " " + shape_text(shape_of(p.shape)));
      backend.copy_from_host(stream, arena + p.offset, it->second.values.data(), p.count);
      used.insert(p.name);
    }
  };
  load(graph.param_info(), graph.params(), "parameter");
  load(graph.state_info(), graph.state(), "state tensor");
  for (const auto& [name, t] : ck.tensors)
    if (!used.contains(name))
      throw Error(ck.origin + ": tensor " + k_tensors + name + " " + shape_text(t.shape) +
                  " is not part of the model it is loaded into (a checkpoint of another model?)");
  backend.synchronize(stream);
}

namespace {

// Rank 0: `folder`'s model.h5, read and checked. Throws squall::Error naming the file.
CheckpointModel read_folder(const fs::path& folder) {
  CheckpointModel m;
  m.folder = folder;
  m.data = read_checkpoint_file((folder / CheckpointStore::k_model_file).string());
  // What evaluation takes from model.h5, checked as it is read, so that a readable file that
  // lacks it (another program's HDF5 file, a checkpoint cut short by hand) is reported like an
  // unreadable one, naming the file and the entry.
  m.state = read_trainer_state(m.data);
  m.model = model_checkpoint_from(m.data);
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
    m.data = CheckpointData::deserialize(bytes, (m.folder / CheckpointStore::k_model_file).string());
    m.state = read_trainer_state(m.data);
    m.model = model_checkpoint_from(m.data);
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

void check_checkpoint_args(const std::string& command, const std::string& checkpoint, const std::string& run_dir) {
  if (checkpoint.empty() == run_dir.empty())
    throw CollectiveError(checkpoint.empty() ? command +
                                                   " needs --checkpoint PATH (a step-NNNNNNNN folder or its model.h5) "
                                                   "or --run DIR (its newest checkpoint)"
                                             : "give --checkpoint PATH or --run DIR, not both",
                          k_exit_usage);
}

CheckpointModel read_checkpoint_args(const std::string& command, const std::string& checkpoint,
                                     const std::string& run_dir, const mpi::Communicator& world) {
  check_checkpoint_args(command, checkpoint, run_dir);
  return checkpoint.empty() ? read_newest_checkpoint_model(run_dir, world) : read_checkpoint_model(checkpoint, world);
}

}  // namespace squall::checkpoint
