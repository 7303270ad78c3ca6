// `squall eval` after the checkpoint is read: the config, the test set and whether it fits the
// model, the model on its backend, the evaluation over the ranks.
#include "src/eval/eval_run.hpp"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "mpi/agreement.hpp"
#include "src/core/clock.hpp"
#include "src/core/error.hpp"
#include "src/nn/graph.hpp"
#include "io/checkpoint/store.hpp"
#include "src/config/config.hpp"
#include "src/config/model_spec.hpp"
#include "src/config/setup.hpp"
#include "src/nn/models/input_multiple.hpp"
#include "src/nn/models/split_check.hpp"

namespace squall::eval {
namespace {

namespace fs = std::filesystem;

std::string model_file(const checkpoint::CheckpointModel& ck) {
  return (ck.folder / checkpoint::CheckpointStore::k_model_file).string();
}

// "samples of 1 x 28 x 28 (channels x height x width), 10 classes, a label per sample".
std::string input_text(const data::DatasetInfo& info) {
  const nn::Shape& s = info.sample;
  return "samples of " + std::to_string(s.c()) + " x " + std::to_string(s.h()) + " x " + std::to_string(s.w()) +
         " (channels x height x width), " + std::to_string(info.classes) + " classes, " +
         (info.per_pixel_labels ? "a label per pixel" : "a label per sample");
}

}  // namespace

config::Config checkpoint_config(const checkpoint::CheckpointModel& ck, const std::vector<std::string>& overrides) {
  const std::string origin = model_file(ck) + " (its config)";
  const std::string& text = ck.state.config;
  try {
    (void)config::parse_config(text, origin);
  } catch (const Error& e) {
    throw Error(model_file(ck) + ": the run's config cannot be read: " + e.what());
  }
  config::Config cfg;
  try {
    cfg = config::parse_config(text, origin, overrides);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return cfg;
}

namespace {

// The run's config with --set applied, and --data in place of data.test.
config::Config eval_config(const checkpoint::CheckpointModel& ck, const EvalOptions& options) {
  config::Config cfg = checkpoint_config(ck, options.overrides);
  if (!options.data.empty()) cfg.data.test = options.data;
  return cfg;
}

// How messages name the test set: the flag, or the config key.
std::string data_key(const EvalOptions& options) { return options.data.empty() ? "data.test" : "--data"; }

// The test set. `fixed` null: raw values, streamed (to check its shape against the model before
// anything is read); otherwise normalised with the training set's statistics from the checkpoint.
// On the grid the model's stride divides, padded or cropped as the run's data.pad says.
std::unique_ptr<data::DataSource> open_test(const config::Config& cfg, const EvalOptions& options,
                                            const data::Normalization* fixed) {
  const std::string& path = cfg.data.test;
  const std::string key = data_key(options);
  std::unique_ptr<data::DataSource> source;
  try {
    source = config::open_data(cfg.data, path, "test", fixed, fixed == nullptr);
  } catch (const data::BadSample&) {
    throw;
  } catch (const Error& e) {
    std::error_code ec;
    // A path that is not there is the user's to fix (the run's data moved, or a typo).
    if (!fs::exists(path, ec))
      throw UsageError(key + ": " + e.what() +
                       (options.data.empty() ? " (the run's config names it; evaluate on another copy with --data PATH)"
                                             : ""));
    throw Error(key + ": " + e.what());
  }
  return config::fit_data_grid(cfg, std::move(source), key + " = " + path);
}

// What the model was trained on, from the run's own data.test (the trainer requires it to
// match data.train), when that is not the data being refused and can be opened here; else
// from the input shape and classes the checkpoint records. Only for a message.
std::string trained_on(const checkpoint::CheckpointModel& ck, const std::string& refused_path) {
  const nn::Shape& in = ck.model.input;
  const std::string recorded = ", trained on samples of " + std::to_string(in.c()) + " x " + std::to_string(in.h()) +
                               " x " + std::to_string(in.w()) + " (channels x height x width), " +
                               std::to_string(ck.model.class_names.size()) + " classes";
  try {
    const config::Config then = config::parse_config(ck.state.config, model_file(ck));
    std::error_code ec;
    if (then.data.test == refused_path || !fs::exists(then.data.test, ec)) return recorded;
    const auto source = config::open_data(then.data, then.data.test, "test", nullptr, true);
    return ", trained on " + input_text(source->info()) + " (" + then.data.test + ")";
  } catch (const std::exception&) {
    return recorded;
  }
}

// The model that the checkpoint's config makes for this data, checked against the data and the
// checkpoint before anything is allocated. Throws UsageError naming the data, the checkpoint
// and what each has.
}  // namespace

nn::ModelSpec fit_checkpoint_model(const checkpoint::CheckpointModel& ck, const config::Config& cfg,
                                   const std::string& key, const std::string& data_path, const data::DataSource& test,
                                   int64_t batch) {
  const data::DatasetInfo& info = test.info();
  const int64_t params = ck.state.param_count, state = ck.state.state_count;
  auto refuse = [&](const std::string& why) {
    return UsageError(key + " " + data_path + " does not fit the model of checkpoint " + ck.folder.string() + ": " +
                      why + "; the data has " + input_text(info) + " (" + info.description + "); the model is " +
                      ck.state.model + " with " + std::to_string(params) + " parameters" +
                      trained_on(ck, data_path));
  };
  const nn::ModelSpec spec = config::model_spec(cfg, info);
  if (const std::string why = config::model_data_mismatch(cfg, info); !why.empty()) throw refuse(why);
  std::unique_ptr<nn::Graph> g;
  try {
    g = nn::make_model(spec, info.sample);
    g->setup(batch);  // shapes and sizes only: nothing allocated yet
  } catch (const Error& e) {
    throw refuse(e.what());
  }
  // The model's size follows the input's channels, the classes and (through its dense layers)
  // the sample's height and width: built for this data, it must be the checkpoint's.
  if (static_cast<int64_t>(g->parameter_count()) != params || static_cast<int64_t>(g->state_value_count()) != state)
    throw refuse(spec.name + " built for this data has " + std::to_string(g->parameter_count()) + " parameters and " +
                 std::to_string(g->state_value_count()) + " state values; the checkpoint holds " + std::to_string(params) +
                 " and " + std::to_string(state));
  const nn::Shape out = g->output_shape();
  const bool per_pixel_out = out.h() * out.w() > 1;
  if (per_pixel_out != info.per_pixel_labels ||
      (per_pixel_out && (out.h() != info.sample.h() || out.w() != info.sample.w())))
    throw refuse(spec.name + " predicts " + (per_pixel_out ? "a " + std::to_string(out.h()) + " x " +
                                                                 std::to_string(out.w()) + " map of classes"
                                                           : std::string("one class")) +
                 " per sample");
  return spec;
}

TileGroups inference_split(const config::Config& cfg, const std::optional<nn::SpatialSplit>& flag,
                           const mpi::Communicator& world) {
  const int world_size = world.size();
  TileGroups t;
  t.split = flag ? *flag : config::spatial_split(cfg.parallel);
  t.origin = flag ? "--spatial " + std::to_string(t.split.rows) + "," + std::to_string(t.split.cols)
                  : "the run's parallel.spatial = " + t.split.str();
  t.count = world_size;
  if (!t.split_sample()) return t;
  const int64_t s = t.split.ranks();
  if (world_size % s != 0)
    throw UsageError(t.origin + " splits each sample over a group of " + std::to_string(s) + " ranks, and this job has " +
                     std::to_string(world_size) + " rank" + (world_size == 1 ? "" : "s") + ", not a multiple of " +
                     std::to_string(s) + ": run under mpirun with a multiple of " + std::to_string(s) +
                     " ranks, or pass --spatial 1,1 for whole samples on every rank");
  t.group_rank = world.rank() % s;  // as parallel::make_spatial_groups numbers them
  return t;
}

void make_tile_groups(TileGroups& t, const mpi::Communicator& world) {
  if (!t.split_sample()) {
    t.index = world.rank();
    return;
  }
  t.groups = std::make_unique<parallel::SpatialGroups>(parallel::make_spatial_groups(world, t.split));
  t.count = t.groups->groups;
  t.index = t.groups->group_index;
  t.comm = std::make_unique<parallel::MpiTileComm>(t.groups->group);
}

void place_tile(TileGroups& t, const nn::ModelSpec& spec, const data::DatasetInfo& info, const std::string& what) {
  if (!t.split_sample()) return;
  const nn::Shape& sample = info.sample;
  if (!info.per_pixel_labels)
    throw UsageError(t.origin + " splits samples with a label per pixel, and " + what + " (" + info.description +
                     ") has one label per sample: a classifier needs the whole sample on a rank; pass --spatial 1,1");
  if (const std::string why = nn::split_refusal(spec, sample, t.split); !why.empty()) {
    const std::optional<nn::SpatialSplit> works = nn::largest_working_split(spec, sample, t.split);
    throw UsageError(t.origin + " cannot split the " + std::to_string(sample.h()) + "x" + std::to_string(sample.w()) +
                     " samples of " + what + ": " + why + "; " +
                     (works ? "the largest split within it that works is --spatial " + std::to_string(works->rows) +
                                  "," + std::to_string(works->cols)
                            : std::string("no split within it works: pass --spatial 1,1")));
  }
  t.place = nn::SpatialPlace::make(t.split, t.group_rank, sample.h(), sample.w(), nn::input_multiple(spec));
  t.window = data::Window{t.place->rows().begin, t.place->rows().size(), t.place->cols().begin, t.place->cols().size()};
}

InferenceModel build_inference_model(const checkpoint::CheckpointModel& ck, const config::Config& cfg,
                                     const nn::ModelSpec& spec, const data::DatasetInfo& info, int64_t batch,
                                     const mpi::Topology& topo, const TileGroups* tiles) {
  InferenceModel m;
  m.backend = config::make_rank_backend(cfg, topo);
  m.stream = m.backend->create_stream();
  m.backend->bind_calling_thread(m.backend->capabilities().threads);
  m.graph = config::make_model_graph(spec, info.sample, config::graph_format(cfg, m.backend->name()));
  if (tiles != nullptr && tiles->place) m.graph->set_tile(*tiles->place, tiles->comm.get());
  m.graph->set_forward_only(true);
  m.graph->build(*m.backend, batch, static_cast<uint64_t>(cfg.run.seed));
  checkpoint::load_into_graph(ck.model, *m.graph, *m.backend, *m.stream);
  m.backend->synchronize(*m.stream);
  return m;
}

EvalResult evaluate_checkpoint(const checkpoint::CheckpointModel& ck, const EvalOptions& options,
                               const mpi::Topology& topo) {
  const mpi::Communicator& world = topo.world();

  // The config, the data and whether they fit: every rank opens the test set (each reads its
  // share of it), so any rank may be the one that cannot.
  config::Config cfg;
  std::unique_ptr<data::DataSource> test;
  nn::ModelSpec spec;
  int64_t batch = 0, n_test = 0;
  TileGroups tiles;  // before the model: its communicator outlives the graph
  mpi::run_agreed(world, [&] {
    cfg = eval_config(ck, options);
    tiles = inference_split(cfg, options.spatial, world);
    // Training evaluates in batches of train.batch_size; the same batches give the same sums.
    batch = config::eval_batch(cfg);
    // Its shape against the model first, then the samples normalised as in training: with the
    // training set's statistics that the checkpoint holds, never the test folder's own.
    test = open_test(cfg, options, nullptr);
    if (test->size() == 0) throw UsageError(cfg.data.test + " (" + test->info().description + ") holds no samples");
    spec = fit_checkpoint_model(ck, cfg, data_key(options), cfg.data.test, *test, batch);
    test = open_test(cfg, options, &ck.model.normalization);
    n_test = cfg.data.test_samples > 0 ? std::min(cfg.data.test_samples, test->size()) : test->size();
    place_tile(tiles, spec, test->info(), data_key(options) + " = " + cfg.data.test);
  });
  make_tile_groups(tiles, world);
  const data::DatasetInfo& info = test->info();
  const int64_t label_hw =
      info.per_pixel_labels ? (tiles.window ? tiles.window->rows * tiles.window->cols : info.sample.h() * info.sample.w())
                            : 1;

  // The model on the run's backend and precision, holding the checkpoint's central model.
  // Declared in this order so that the buffers go before the backend that owns their memory.
  InferenceModel m;
  nn::Buffer label_buf, pred_buf, weight_buf;
  int32_t* dev_labels = nullptr;
  int32_t* dev_pred = nullptr;
  const float* dev_weights = nullptr;
  mpi::run_agreed(world, [&] {
    m = build_inference_model(ck, cfg, spec, info, batch, topo, &tiles);
    dev_labels = m.backend->allocate_labels(static_cast<size_t>(batch * label_hw), label_buf);
    dev_pred = m.backend->allocate_labels(static_cast<size_t>(batch * label_hw), pred_buf);
    if (!cfg.data.class_weights.empty()) {
      const std::vector<float> weights(cfg.data.class_weights.begin(), cfg.data.class_weights.end());
      weight_buf = m.backend->allocate(weights.size());
      m.backend->copy_from_host(*m.stream, weight_buf.data(), weights.data(), weights.size());
      dev_weights = weight_buf.data();
    }
    m.backend->synchronize(*m.stream);
  });

  EvalResult r;
  r.model = ck.state.model;
  r.step = ck.state.step;
  r.data_path = cfg.data.test;
  r.data_description = info.description;
  r.per_pixel_labels = info.per_pixel_labels;
  r.class_names = info.class_names;
  r.world_size = world.size();
  r.spatial = tiles.split;
  // Group g (rank r without a split) takes samples [n g / G, n (g + 1) / G), as training's
  // evaluation does; each of its ranks evaluates its tile of them, and the sums over the world
  // count every pixel once and every sample once (evaluate_range).
  const int64_t begin = n_test * tiles.index / tiles.count, end = n_test * (tiles.index + 1) / tiles.count;
  EvalTile tile;
  if (tiles.split_sample()) {
    tile.window = &*tiles.window;
    tile.comm = tiles.comm.get();
    tile.class_weights.assign(cfg.data.class_weights.begin(), cfg.data.class_weights.end());
  }
  const Stopwatch timer;
  // A group's ranks read the same samples (each its window) and exchange halos at every batch:
  // as in training's evaluation, a read that fails on some of them alone would leave the
  // others waiting in an exchange.
  mpi::run_agreed(world, [&] {
    r.part = evaluate_range(*m.graph, *m.backend, *m.stream, *test, begin, end, dev_labels, dev_pred, dev_weights,
                            nullptr, tile);
  });
  sum_over_ranks(r.part, world);
  r.eval_s = timer.seconds();
  return r;
}

CheckpointGraph checkpoint_graph(const checkpoint::CheckpointModel& ck, const EvalOptions& options, int64_t batch) {
  const config::Config cfg = eval_config(ck, options);
  const std::unique_ptr<data::DataSource> test = open_test(cfg, options, nullptr);  // its shape only
  const nn::ModelSpec spec = fit_checkpoint_model(ck, cfg, data_key(options), cfg.data.test, *test, batch);
  CheckpointGraph r;
  r.model = ck.state.model;
  r.step = ck.state.step;
  r.graph = config::make_model_graph(spec, test->info().sample, config::GraphFormat{});  // ONNX's f32, NCHW
  r.graph->setup(batch);
  // The file keeps the tensors packed; the exporter reads them at the graph's arena offsets.
  const nn::Graph& g = *r.graph;
  r.params = nn::unpack_arena(ck.data.array("central/params", g.parameter_count()), g.param_info(),
                              g.param_arena_floats(), ck.data.origin + ": dataset central/params");
  r.state = nn::unpack_arena(ck.data.array("central/state", g.state_value_count()), g.state_info(),
                             g.state_arena_floats(), ck.data.origin + ": dataset central/state");
  r.normalization = cfg.data.normalize ? data::k_normalization_kinds.name(cfg.data.normalization) : "";
  r.data_path = cfg.data.test;
  return r;
}

}  // namespace squall::eval
