#include "src/config/setup.hpp"

#include <algorithm>

#include "io/input/open_dataset.hpp"
#include "src/config/model_spec.hpp"
#include "src/core/error.hpp"
#include "src/backends/backends.hpp"
#include "src/cpu/cpu_info.hpp"
#include "src/nn/models/input_multiple.hpp"

namespace squall::config {

std::unique_ptr<nn::Backend> make_rank_backend(const Config& cfg, const mpi::Topology& topo) {
  const int threads =
      cfg.run.threads > 0 ? static_cast<int>(cfg.run.threads) : cpu::default_threads(topo.host_ranks());
  std::unique_ptr<nn::Backend> b = backends::make_backend(cfg.run.backend, topo.host_rank(), threads, cfg.run.cpu_streams);
  b->set_reference_precision(cfg.train.cpu_precision == CpuPrecision::reference);
  return b;
}

std::string check_cpu_precision(const Config& cfg, const std::string& origin, const nn::Backend& backend) {
  const std::string type = k_precisions.name(cfg.train.precision);
  const std::string where = "oneDNN " + cpu::dnn_isa() + " on " + cpu::cpu_model_name();
  if (cfg.train.cpu_precision == CpuPrecision::reference)
    return "train.precision = " + type + " on the CPU backend: the reference numerics (train.cpu_precision = "
           "reference), f32 arithmetic rounded to " + type + " after every operation (slower than fp32)";
  if (backend.capabilities().native_precision(precision_dtype(cfg.train.precision)))
    return "train.precision = " + type + " on the CPU backend: convolutions on oneDNN's " + type +
           " primitives (" + where + "); batch norm, pooling, linear layers and the rest compute in f32 "
           "between " + type + " tensors";
  const std::string needs = cfg.train.precision == Precision::bf16
                                ? "bf16 arithmetic (AVX512-BF16 or AMX), and this CPU has " + where
                                : "fp16 arithmetic, which oneDNN has on no CPU (" + where + ")";
  throw UsageError(origin + ": train.precision = " + type + " on the CPU backend needs " + needs +
                   ": train at fp32, or set train.cpu_precision = \"reference\" for the reference numerics of " +
                   type + " (f32 arithmetic rounded to " + type + ", slower than fp32)");
}

nn::DType precision_dtype(Precision precision) {
  switch (precision) {
    case Precision::fp32: return nn::DType::f32;
    case Precision::bf16: return nn::DType::bf16;
    case Precision::fp16: return nn::DType::f16;
  }
  return nn::DType::f32;
}

nn::Layout resolve_layout(LayoutChoice layout, std::string_view backend, nn::DType precision) {
  switch (layout) {
    case LayoutChoice::nchw: return nn::Layout::nchw;
    case LayoutChoice::nhwc: return nn::Layout::nhwc;
    case LayoutChoice::blocked: return nn::Layout::blocked;
    case LayoutChoice::auto_: break;
  }
  if (backend == "cuda" && precision != nn::DType::f32) return nn::Layout::nhwc;
  if (backend == "cpu" && precision == nn::DType::f32) return nn::Layout::blocked;
  return nn::Layout::nchw;
}

GraphFormat graph_format(const Config& cfg, std::string_view backend_name) {
  GraphFormat f;
  f.dtype = precision_dtype(cfg.train.precision);
  f.layout = resolve_layout(cfg.model.layout, backend_name, f.dtype);
  return f;
}

std::unique_ptr<nn::Graph> make_model_graph(const nn::ModelSpec& spec, const nn::Shape& sample, GraphFormat format) {
  std::unique_ptr<nn::Graph> g = nn::make_model(spec, sample);
  g->set_dtype(format.dtype);
  g->set_layout(format.layout);
  return g;
}

input::DatasetOptions dataset_options(const DataConfig& d, const data::Normalization* fixed, bool raw) {
  input::DatasetOptions o;
  o.normalize = d.normalize && !raw;
  o.normalization = d.normalization;
  o.cache_mb = raw ? 0 : d.cache_mb;
  if (fixed != nullptr && !raw) o.fixed = *fixed;
  o.netcdf_variables = d.netcdf_variables;
  o.netcdf_labels = d.netcdf_labels;
  o.netcdf_channels = d.channels;
  return o;
}

std::unique_ptr<data::DataSource> open_data(const DataConfig& d, const std::string& path, const std::string& split,
                                            const data::Normalization* fixed, bool raw) {
  return input::open_dataset(path, split, dataset_options(d, fixed, raw));
}

input::GridFit grid_fit(const Config& cfg, const data::DatasetInfo& info, const std::string& what) {
  // Only maps of classes need a grid the encoder's strides divide; a classifier's multiple is 1.
  const nn::ModelSpec spec = model_spec(cfg, info);
  const int64_t multiple = info.per_pixel_labels ? nn::input_multiple(spec) : 1;
  return input::plan_grid_fit(info, cfg.data.pad, multiple, what, nn::input_multiple_text(spec));
}

std::unique_ptr<data::DataSource> fit_data_grid(const Config& cfg, std::unique_ptr<data::DataSource> source,
                                                const std::string& what) {
  const input::GridFit fit = grid_fit(cfg, source->info(), what);
  return input::fit_grid(std::move(source), fit);
}

int64_t eval_batch(const Config& cfg) {
  return cfg.train.eval_batch_size > 0 ? cfg.train.eval_batch_size : cfg.train.batch_size;
}

mpi::AllreduceOptions allreduce_options(const Config& cfg, double stall_warn_s, double stall_abort_s) {
  mpi::AllreduceOptions ar;
  ar.stall_warn_s = stall_warn_s;
  ar.stall_abort_s = stall_abort_s;
  ar.cross_node = cfg.parallel.cross_node;
  ar.check_sums = cfg.parallel.check_sums;
  return ar;
}

parallel::LearnerGroupOptions learner_group_options(const Config& cfg, const mpi::Topology& topo,
                                                    const GroupPlace& place) {
  parallel::LearnerGroupOptions lg;
  lg.algorithm = cfg.parallel.algorithm;
  lg.learners = place.learners;
  lg.ranks = topo.world_size();
  lg.rank = topo.rank();
  const SyncPeriods periods = sync_periods(cfg.parallel);
  lg.period = periods.across;
  lg.inside_period = periods.inside;
  lg.node_ranks = topo.local_size();
  lg.alpha = cfg.parallel.alpha;
  lg.centre_rate = cfg.parallel.centre_rate;
  lg.momentum = cfg.parallel.momentum;
  lg.start_step = cfg.parallel.start_step;
  // outer: its synchronous start and the learning rate's warm-up as steps of this run (QSR keeps
  // its rounds at H during the warm-up). A resume moves both to where they are in the
  // schedule's frame (LearnerGroup::set_outer_steps).
  lg.outer = cfg.parallel.outer;
  lg.outer.start_step = cfg.parallel.outer.start_at(place.total_steps);
  lg.outer.warmup_steps = cfg.schedule.warmup_steps;
  lg.bucket_floats = std::max<size_t>(1, static_cast<size_t>(place.bucket_mb * double(1 << 20) / sizeof(float)));
  lg.seed = static_cast<uint64_t>(cfg.run.seed);
  lg.precision = place.format.dtype;
  lg.layout = place.format.layout;
  lg.bf16_gradients = cfg.parallel.comm_precision == CommPrecision::bf16;
  lg.skip_nonfinite = cfg.train.nonfinite == NonFinitePolicy::skip;
  lg.loss_scaling.dynamic = lg.precision == nn::DType::f16;
  lg.loss_scaling.initial = static_cast<float>(cfg.train.loss_scale);
  lg.loss_scaling.growth_interval = cfg.train.loss_scale_window;
  lg.graphs = cfg.parallel.cuda_graphs && place.can_capture;
  return lg;
}

records::RunLogOptions run_log_options(const Config& cfg) {
  records::RunLogOptions lo;
  lo.dir = cfg.run.dir;
  lo.config_toml = to_toml(cfg);
  lo.tensorboard = cfg.run.tensorboard;
  lo.mllog = cfg.run.mllog;
  lo.log_every = cfg.train.log_every_steps;
  return lo;
}

input::LoaderOptions loader_options(const Config& cfg, int max_learners) {
  input::LoaderOptions lo;
  lo.batch_size = cfg.train.batch_size;
  lo.workers = static_cast<int>(cfg.data.workers);
  lo.prefetch = std::max(static_cast<int>(cfg.data.prefetch), max_learners);
  lo.skip_bad = cfg.data.skip_bad_samples;
  return lo;
}

}  // namespace squall::config
