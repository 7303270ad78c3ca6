#pragma once
// The objects a config gives a rank, one function each: the backend, the graph format and the
// model graph (one set-up for training, `squall eval`, `squall predict` and `squall export`, so
// that all of them compute on the same backend, in the same precision and memory order, with
// the same model), the datasets, and the options of the allreduce, the learner group and the
// loader. Each config key is read here once; the layers below take their own option types
// and include no config.
#include <memory>
#include <string>

#include "io/input/loader.hpp"
#include "io/input/open_dataset.hpp"
#include "io/input/pad_source.hpp"
#include "io/records/run_log.hpp"
#include "mpi/sum.hpp"
#include "mpi/topology.hpp"
#include "src/data/data_source.hpp"
#include "src/parallel/learners.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/config/config.hpp"

namespace squall::config {

// run.backend, run.threads and run.cpu_streams. Ranks on one machine share its cores (unless the
// launcher pinned them: src/cpu/cpu_info.hpp), and a rank's place among them picks its GPU.
// train.cpu_precision = reference makes its reduced-precision plans the reference emulation.
std::unique_ptr<nn::Backend> make_rank_backend(const Config& cfg, const mpi::Topology& topo);

// Training at bf16 or fp16 on the CPU backend (train.cpu_precision, docs/training.md, "Mixed
// precision"): auto and native need the CPU's own arithmetic for the type (bf16 on AVX512-BF16
// or AMX; no CPU has fp16 in oneDNN 2.6) and are refused (UsageError naming the ISA and the
// key) without it; reference runs the emulation anywhere. Returns the line the run logs.
std::string check_cpu_precision(const Config& cfg, const std::string& origin, const nn::Backend& backend);

// train.precision -> the activations' DType.
nn::DType precision_dtype(Precision precision);
// model.layout: nchw, nhwc or blocked, and auto as nhwc on the cuda backend (named by
// `backend`, the Backend's name()) at bf16/f16, where tensor-core convolutions read NHWC
// directly; blocked on the cpu backend at f32, where oneDNN's convolutions compute in channel
// blocks (the graph keeps NCHW where the backend has none); nchw otherwise.
nn::Layout resolve_layout(LayoutChoice layout, std::string_view backend, nn::DType precision);

// The activations' type (train.precision) and memory order (model.layout; auto resolved for
// `backend_name`) of a model graph.
struct GraphFormat {
  nn::DType dtype = nn::DType::f32;
  nn::Layout layout = nn::Layout::nchw;
};
GraphFormat graph_format(const Config& cfg, std::string_view backend_name);

// The zoo's model `spec` for samples of `sample`'s shape ([1, c, h, w]) in `format`, not built.
std::unique_ptr<nn::Graph> make_model_graph(const nn::ModelSpec& spec, const nn::Shape& sample, GraphFormat format);

// data.*: how a dataset opens as the config reads it. `fixed`: the training set's
// normalisation, for a test set; `raw`: unnormalised and uncached, only to look at its shape
// and classes.
input::DatasetOptions dataset_options(const DataConfig& d, const data::Normalization* fixed, bool raw);
// The dataset at `path` (data.train or data.test, or another copy: `squall eval --data`) opened
// with those options. Errors name the path (and are data::BadSample for a bad sample).
std::unique_ptr<data::DataSource> open_data(const DataConfig& d, const std::string& path, const std::string& split,
                                            const data::Normalization* fixed, bool raw);

// data.pad for samples of `info` and the model the config makes for them (nn::input_multiple):
// how their grid becomes one the model's stride divides. Throws UsageError naming `what` (the
// data: "data.train = PATH"), the grid, the model, its stride and data.pad when data.pad =
// none and the stride does not divide the grid.
input::GridFit grid_fit(const Config& cfg, const data::DatasetInfo& info, const std::string& what);
// `source` on that grid: itself when nothing changes, else wrapped (input::fit_grid).
std::unique_ptr<data::DataSource> fit_data_grid(const Config& cfg, std::unique_ptr<data::DataSource> source,
                                                const std::string& what);

// train.eval_batch_size, or train.batch_size when it is 0.
int64_t eval_batch(const Config& cfg);

// parallel.cross_node and parallel.check_sums, with the launcher's stall limits (--stall-warn,
// --stall-abort).
mpi::AllreduceOptions allreduce_options(const Config& cfg, double stall_warn_s, double stall_abort_s);

// Where a learner group sits and what its backend offers: what the config does not say.
struct GroupPlace {
  int learners = 1;            // replicas on this device (the step plan's)
  double bucket_mb = 1;        // ssgd's gradient buckets (bucket_mb_for)
  GraphFormat format;          // the activations' type and order (graph_format)
  bool can_capture = false;    // the backend can capture a pass (parallel.cuda_graphs)
  int64_t total_steps = 0;     // the run's steps (parallel.outer.start_fraction)
};
// parallel.*, train.nonfinite, train.loss_scale*, run.seed (and schedule.warmup_steps for outer)
// for the group on this rank.
parallel::LearnerGroupOptions learner_group_options(const Config& cfg, const mpi::Topology& topo,
                                                    const GroupPlace& place);

// run.dir, run.tensorboard, run.mllog, train.log_every_steps and the config itself (written as
// config.toml) for the run's records. Where the run stands (the rank that writes, the attempt,
// the clock and metrics.jsonl's lines at a resume, the console) and what the data is (labels per
// pixel, class names) are the caller's.
records::RunLogOptions run_log_options(const Config& cfg);

// data.workers, data.prefetch (at least `max_learners`: one batch a learner), data.skip_bad_samples,
// and train.batch_size. The host allocator is the caller's (it knows the backend).
input::LoaderOptions loader_options(const Config& cfg, int max_learners);

}  // namespace squall::config
