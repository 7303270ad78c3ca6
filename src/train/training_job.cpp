#include "src/train/training_job.hpp"

#include <algorithm>

#include "mpi/make_allreduce.hpp"
#include "mpi/node_sum.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/config/model_spec.hpp"
#include "src/config/setup.hpp"

namespace squall::train {
namespace {

// `fixed`: the training set's normalisation, for the test set (null for the training set).
// `raw`: unnormalised and uncached, only to look at its shape and classes. On the grid the
// model's stride divides (data.pad).
std::unique_ptr<data::DataSource> open_source(const config::Config& cfg, const std::string& split,
                                              const data::Normalization* fixed = nullptr, bool raw = false) {
  const config::DataConfig& d = cfg.data;
  const std::string& path = split == "train" ? d.train : d.test;
  std::unique_ptr<data::DataSource> source;
  // A rank of a split sample reads only its window of each sample: the whole files a cache
  // would hold (data.cache_mb) are what the split must not read.
  config::DataConfig windowed = d;
  if (config::spatial_split(cfg.parallel).split()) windowed.cache_mb = 0;
  try {
    source = config::open_data(windowed, path, split, fixed, raw);
  } catch (const data::BadSample&) {
    throw;
  } catch (const Error& e) {
    throw Error("data." + split + ": " + e.what());
  }
  source = config::fit_data_grid(cfg, std::move(source), "data." + split + " = " + path);
  // A roll in longitude moves the padded or cropped edge columns into the grid.
  if (const auto* fitted = dynamic_cast<const input::GridFitSource*>(source.get()); fitted && d.augment_roll) {
    const input::GridFit& fit = fitted->fit();
    if (fit.out_w != fit.in_w)
      throw UsageError("data.augment_roll with data.pad = \"" + std::string(data::k_pad_modes.name(d.pad)) +
                       "\": data." + split + " = " + path + " has " + std::to_string(fit.in_w) + " columns, " +
                       (fit.mode == data::PadMode::pad ? "padded" : "cropped") + " to " + std::to_string(fit.out_w) +
                       ", and a roll in longitude would move the " +
                       (fit.mode == data::PadMode::pad ? "padded columns" : "cut edges") +
                       " into the middle of the grid; turn data.augment_roll off, or give the model a stride that "
                       "divides the columns");
  }
  return source;
}

// The model against the data, before anything is built: shapes and class counts that do not
// match would otherwise fail at the first step, or at the first evaluation an epoch later.
nn::ModelSpec check_model_and_data(const config::Config& cfg, const std::string& origin, const data::DataSource& train,
                                   const data::DataSource& test) {
  const data::DatasetInfo& info = train.info();
  const data::DatasetInfo& t = test.info();
  if (!(t.sample == info.sample) || t.classes != info.classes || t.per_pixel_labels != info.per_pixel_labels)
    throw UsageError(origin + ": data.test (" + cfg.data.test + ": " + t.description + ", " +
                     std::to_string(t.classes) + " classes) does not match data.train (" + cfg.data.train + ": " +
                     info.description + ", " + std::to_string(info.classes) + " classes)");
  nn::ModelSpec spec = config::model_spec(cfg, info);
  if (const std::string why = config::model_data_mismatch(cfg, info); !why.empty())
    throw UsageError(origin + ": " + why + " (data.train = " + cfg.data.train + ")");
  try {
    (void)nn::make_model(spec, info.sample);  // an unknown model, or an input it cannot take
  } catch (const Error& e) {
    throw UsageError(origin + ": " + e.what());
  }
  return spec;
}

// A central model that never synchronises is the initial one: evaluating it would say nothing.
void check_synchronises(const config::Config& cfg, const std::string& origin, parallel::Algorithm algorithm,
                        int64_t total_steps) {
  if (algorithm == parallel::Algorithm::ssgd) return;
  if (algorithm == parallel::Algorithm::outer) {
    const optim::OuterOptions& o = cfg.parallel.outer;
    if (o.start_at(total_steps) > 0 || o.period <= total_steps) return;
    throw UsageError(origin + ": parallel.outer.period = " + std::to_string(o.period) + " is longer than the run (" +
                     std::to_string(total_steps) +
                     " steps: train.epochs, train.max_steps): the centre would take its only outer step after the last "
                     "step, and every evaluation before it would see the initial model");
  }
  const bool local = algorithm == parallel::Algorithm::local_sgd;
  if (first_synchronisation(cfg.parallel.period, local ? cfg.parallel.start_step : 0) <= total_steps) return;
  const config::SyncPeriods periods = config::sync_periods(cfg.parallel);
  const std::string key = periods.by_level() ? "parallel.periods = " + config::periods_text(periods) + ": across"
                                             : "parallel.period";
  throw UsageError(origin + ": " + key + " = " + std::to_string(cfg.parallel.period) +
                   (local ? " after parallel.start_step = " + std::to_string(cfg.parallel.start_step) : std::string()) +
                   " is longer than the run (" + std::to_string(total_steps) +
                   " steps: train.epochs, train.max_steps): the central model would be synchronised only after the "
                   "last step, and every evaluation before it would see the initial model");
}

}  // namespace

TrainingData open_training_data(const config::Config& cfg, const std::string& origin,
                                const std::vector<int>& node_of_rank) {
  TrainingData d;
  d.train = open_source(cfg, "train");
  // The test set's shape and classes are checked against the training set's first, then it
  // is opened again normalised with the training set's statistics (docs/training.md,
  // "Normalisation").
  d.test = open_source(cfg, "test", nullptr, true);
  d.spec = check_model_and_data(cfg, origin, *d.train, *d.test);
  d.test = open_source(cfg, "test", &d.train->normalization());
  d.n_train = cfg.data.train_samples > 0 ? std::min(cfg.data.train_samples, d.train->size()) : d.train->size();
  d.n_test = cfg.data.test_samples > 0 ? std::min(cfg.data.test_samples, d.test->size()) : d.test->size();

  const int learners = static_cast<int>(cfg.parallel.replicas_per_device);
  d.max_learners =
      cfg.parallel.autotune ? std::max<int>(learners, static_cast<int>(cfg.parallel.max_replicas_per_device)) : learners;
  // Each rank reads its share of every epoch (io/input/sampler.hpp) and hands its learners
  // consecutive batches: learner j of a step takes the rank's batch step*L + j.
  std::vector<int64_t> offsets = d.train->file_offsets();
  if (d.n_train < d.train->size()) offsets = {0, d.n_train};
  d.sampler = std::make_unique<input::Sampler>(cfg.data.sampling, offsets,
                                            input::node_sizes_from(node_of_rank), static_cast<uint64_t>(cfg.run.seed));
  d.plan = plan_training(cfg, origin, d, static_cast<int>(node_of_rank.size()));
  return d;
}

StepPlan plan_training(const config::Config& cfg, const std::string& origin, const TrainingData& data, int ranks) {
  const int learners = static_cast<int>(cfg.parallel.replicas_per_device);
  const int64_t batch = cfg.train.batch_size;
  StepPlan plan = plan_steps(data.sampler->steps_per_epoch(batch), learners, ranks, batch, cfg.train.epochs,
                             cfg.train.max_steps);
  if (plan.steps_per_epoch == 0)  // the config and the job's shape: the user's to fix (exit 2)
    throw UsageError(origin + ": one step takes train.batch_size x replicas x ranks = " + std::to_string(batch) +
                     " x " + std::to_string(learners) + " x " + std::to_string(ranks) +
                     " samples, more than an epoch's " + std::to_string(data.n_train) + " training samples");
  check_synchronises(cfg, origin, cfg.parallel.algorithm, plan.total_steps);
  config::check_against_plan(cfg, origin, plan.total_steps, plan.steps_per_epoch);
  return plan;
}

TrainingDevice build_training_device(const config::Config& cfg, const std::string& origin, const RunOptions& options,
                                     const mpi::Topology& topo, const SpatialJob& spatial,
                                     const TrainingData& data, double lr_factor) {
  TrainingDevice t;
  const data::DatasetInfo& info = data.train->info();
  const int ranks = topo.world_size();
  const parallel::Algorithm algorithm = cfg.parallel.algorithm;
  t.backend = config::make_rank_backend(cfg, topo);
  t.stream = t.backend->create_stream();
  const std::string backend = t.backend->name();

  const mpi::AllreduceOptions ar = config::allreduce_options(cfg, options.stall_warn_s, options.stall_abort_s);
  // parallel.device_allreduce: a CUDA job of several ranks may sum on the GPUs instead of
  // through pinned host memory (docs/allreduce.md, "On device buffers").
  if (cfg.parallel.device_allreduce != mpi::AllreduceKind::host && ranks > 1 && backend != "cuda")
    throw UsageError(origin + ": parallel.device_allreduce = " +
                     mpi::k_allreduce_kinds.name(cfg.parallel.device_allreduce) +
                     " sums GPU memory, but this job trains on the " + backend +
                     " backend (set run.backend = cuda, or parallel.device_allreduce = host)");
  t.allreduce = mpi::make_allreduce(cfg.parallel.device_allreduce, topo, t.backend->info().index, ar);
  if (cfg.parallel.comm_precision == config::CommPrecision::bf16 && !t.allreduce->takes(mpi::DType::bf16))
    throw UsageError(origin + ": parallel.comm_precision = bf16 needs parallel.device_allreduce = host (the " +
                     t.allreduce->mode() + " allreduce sums f32 only)");
  if (t.allreduce->mode() == "pipeline" && topo.nodes() > 1) t.cross_rule = mpi::cross_rule(ar, topo.nodes());

  // parallel.halo_exchange: a split's halos in GPU memory over NCCL where every rank of the
  // group has a GPU of its own (decided by the group together), else through host memory.
  if (spatial.split_sample()) {
    parallel::HaloChoice halo;
    try {
      halo = parallel::choose_halo_exchange(cfg.parallel.halo_exchange, spatial.groups->group, backend,
                                            t.backend->info().index);
    } catch (const Error& e) {
      throw UsageError(origin + ": " + e.what());
    }
    if (halo.used == mpi::HaloKind::nccl)
      spatial.comm->use_device_memory(
          mpi::make_device_halo_exchanger(spatial.groups->group, t.backend->info().index, options.stall_abort_s));
    t.halo_exchange = mpi::k_halo_kinds.name(halo.used);
    t.halo_why_host = halo.why_host;
  }

  const config::GraphFormat format = config::graph_format(cfg, backend);
  const nn::Capabilities can = t.backend->capabilities();
  t.bucket_mb = config::bucket_mb_for(cfg.parallel, !can.host_accessible);
  parallel::LearnerGroupOptions lg = config::learner_group_options(
      cfg, topo, {data.plan.learners, t.bucket_mb, format, can.can_capture, data.plan.total_steps});
  // parallel.spatial: each rank holds its tile of its group's samples (docs/design.md, "One
  // sample across ranks"); the job's allreduce still runs over every rank.
  lg.tile = spatial.tile_comm();
  // parallel.outer.async: the node leaders hold the centre's shards (mpi/async_centre.hpp).
  if (algorithm == parallel::Algorithm::outer && cfg.parallel.outer.async && topo.local_rank() == 0)
    lg.leaders = &topo.cross_comm();
  lg.stall_abort_s = options.stall_abort_s;
  lg.spatial_ranks = static_cast<int>(spatial.split.ranks());
  // One group: the job is one learner whose gradient the group's own sum completes in the pass
  // (Learner::sum_tile_gradients); a sum over the job would add copies of it, so there is none
  // (and no thread polling it beside the learner's on the rank's cores).
  if (spatial.split_sample() && spatial.ranks == 1) {
    lg.ranks = lg.node_ranks = lg.spatial_ranks = 1;
    lg.rank = 0;
    t.allreduce = std::make_unique<mpi::OneRankAllreduce>();
    t.cross_rule.clear();
  }
  // The node level's own sum (parallel.periods, outer's inner steps): over this node's ranks only.
  if (lg.node_level() && algorithm != parallel::Algorithm::ssgd && ranks > 1)
    t.node_allreduce = mpi::make_node_allreduce(topo, ar);
  const bool root = topo.rank() == 0;
  if (lg.precision != nn::DType::f32 && backend == "cpu") {
    const std::string how = config::check_cpu_precision(cfg, origin, *t.backend);
    if (root && cfg.train.cpu_precision == config::CpuPrecision::reference) log::warn(how);
    else if (root) log::info(how);
  }
  if (cfg.parallel.cuda_graphs && !lg.graphs && root)
    log::warn("parallel.cuda_graphs has no effect on the " + backend + " backend (nothing to capture)");

  const int64_t batch = cfg.train.batch_size;
  // What a rank needs, stated before anything of the model is allocated; a rank that cannot hold
  // it is refused with the split that would fit. The decision is the rank that needs most, the
  // same on every rank, so that every rank refuses alike.
  MemoryQuery q;
  q.model = data.spec;
  q.sample = nn::Shape(1, info.sample.c(), info.sample.h(), info.sample.w());
  q.batch = batch;
  q.split = spatial.split;
  q.precision = format.dtype;
  q.layout = format.layout;
  q.optimizer = cfg.optimizer.name;
  q.learners = data.plan.learners;
  q.eval_batch = batch;
  q.loader_batches = std::max<int64_t>(cfg.data.prefetch, data.max_learners) + 1;  // config::loader_options' slots
  q.caps = can;
  q.gpu = backend == "cuda";
  const MemoryNeed worst = memory_need(q);
  q.group_rank = spatial.group_rank;
  t.memory = spatial.split_sample() ? memory_need(q) : worst;
  if (backend == "cuda" && t.backend->info().memory_bytes > 0) {
    t.memory_limit = t.backend->info().memory_bytes;
    t.memory_limit_from = "the device's memory (" + t.backend->info().name + ")";
  } else if (cfg.run.memory_limit.bytes > 0) {
    t.memory_limit = static_cast<size_t>(cfg.run.memory_limit.bytes);
    t.memory_limit_from = "run.memory_limit";
  }
  if (t.memory_limit > 0 && worst.total() > t.memory_limit) {
    const std::optional<MemoryNeed> fits = fitting_split(q, t.memory_limit);
    throw UsageError(origin + ": " + memory_refusal(worst, t.memory_limit, fits, t.memory_limit_from));
  }
  t.rss_before_group = process_memory().resident;
  const std::vector<float> class_weights(cfg.data.class_weights.begin(), cfg.data.class_weights.end());
  const nn::Shape tile = spatial.tile_sample(info.sample);
  const int64_t label_hw = info.per_pixel_labels ? tile.h() * tile.w() : 1;
  auto make_graph = [spec = data.spec, sample = info.sample, format, place = spatial.place,
                     comm = spatial.tile_comm()] {
    std::unique_ptr<nn::Graph> g = config::make_model_graph(spec, sample, format);
    if (place) g->set_tile(*place, comm);
    return g;
  };
  t.group = std::make_unique<parallel::LearnerGroup>(*t.backend, make_graph, batch, batch * label_hw, cfg.optimizer,
                                           class_weights, lg, *t.allreduce, t.node_allreduce.get());
  t.schedule = make_schedule(cfg, spatial.ranks, spatial.nodes, data.plan.schedule_steps_per_epoch, lr_factor);

  t.labels = t.backend->allocate_labels(static_cast<size_t>(batch * label_hw), t.label_buf);
  t.predictions = t.backend->allocate_labels(static_cast<size_t>(batch * label_hw), t.pred_buf);
  if (!class_weights.empty()) {
    t.weight_buf = t.backend->allocate(class_weights.size());
    t.backend->copy_from_host(*t.stream, t.weight_buf.data(), class_weights.data(), class_weights.size());
    t.class_weights = t.weight_buf.data();
  }

  input::LoaderOptions lo = config::loader_options(cfg, data.max_learners);
  lo.window = spatial.window;
  // A device backend, or asynchronous CPU streams, copy the batches from pinned host memory:
  // the copy then runs on the learner's stream, ordered like any other work, and the host does
  // not wait for it (a copy from pageable memory makes the host wait).
  if (!can.host_accessible || cfg.run.cpu_streams == nn::CpuStreams::async) {
    nn::Backend* be = t.backend.get();
    std::map<void*, nn::Buffer>* pinned = t.pinned_batches.get();
    lo.host_alloc = [be, pinned](size_t bytes) {
      nn::Buffer b = be->allocate_host((bytes + sizeof(float) - 1) / sizeof(float), nn::DType::f32);
      void* p = b.raw();
      pinned->emplace(p, std::move(b));
      return p;
    };
    lo.host_free = [pinned](void* p) { pinned->erase(p); };
  }
  if (!can.host_accessible) {
    // The next step's batches are taken from the loader before this step runs, so that the
    // learners copy them to the device while this step computes (LearnerGroup::step's `next`):
    // the loader must let a step's batches and the next step's be held at once. Not with the
    // auto-tuner, which changes the learner count between steps.
    t.lookahead = !cfg.parallel.autotune;
    if (t.lookahead) lo.prefetch = std::max(lo.prefetch, 2 * data.max_learners);
  }
  t.loader = std::make_unique<input::Loader>(*data.train, lo);
  t.augment =
      data::make_sphere_augment(cfg.data.augment_roll, cfg.data.augment_flip, info, data.train->normalization());
  t.tuner =
      std::make_unique<parallel::AutoTuner>(cfg.parallel.autotune, cfg.parallel.autotune_threshold, data.max_learners,
                                            std::max<int64_t>(10, data.plan.steps_per_epoch / 20));
  return t;
}

UpdateBatch update_batch_of(parallel::Algorithm algorithm) {
  switch (algorithm) {
    case parallel::Algorithm::ssgd: return UpdateBatch::global;
    case parallel::Algorithm::outer: return UpdateBatch::node;
    case parallel::Algorithm::sma:
    case parallel::Algorithm::local_sgd: break;
  }
  return UpdateBatch::learner;
}

std::unique_ptr<optim::Schedule> make_schedule(const config::Config& cfg, int ranks, int nodes,
                                               int64_t steps_per_epoch, double lr_factor) {
  // The linear scaling rule scales by the batch one update averages over: the global batch
  // under ssgd, a node's under outer (its inner steps; the job's mean over its nodes, so that
  // every node, and the outer step, have one rate), a learner's own under sma and local-sgd.
  // The learners are the config's: the auto-tuner does not rescale the rate.
  const double batch = update_batch(update_batch_of(cfg.parallel.algorithm), cfg.train.batch_size,
                                    cfg.parallel.replicas_per_device, ranks, nodes);
  return std::make_unique<optim::Schedule>(
      cfg.schedule, optim::scaled_peak_lr(cfg.schedule, cfg.optimizer.lr, batch, lr_factor), steps_per_epoch);
}

}  // namespace squall::train
