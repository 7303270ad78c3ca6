#pragma once
// The run configuration: one struct per TOML section, loaded strictly (an unknown section or
// key, or a value of the wrong type, is an error naming the key and the file) so that a typo
// never silently trains with a default. `--set section.key=value` overrides any key after
// the file is read. Every key has a default, so an empty file is a valid (CI-sized) run.
//
// Keys are listed once, in config.cpp's field table; loading, overrides and to_toml all use
// that table, so a new key is one struct member plus one table row. A key with a fixed set
// of values is an enum whose names are listed once too (config_enums.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "src/config/config_enums.hpp"
#include "src/nn/spatial.hpp"

namespace squall::config {

// A key that is a number of bytes: an integer (bytes), or text with a unit ("12GiB",
// "800 MB", "1.5TiB"; parse_byte_size).
struct ByteSize {
  int64_t bytes = 0;
  bool operator==(const ByteSize&) const = default;
};

// The bytes `text` says: a number (decimals allowed), optionally followed by a unit, with or
// without a space: B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (of 1024), in any
// letter case; a plain number is bytes. Throws squall::Error naming `key`, what it read and the
// units it takes, for anything else, a negative size or one beyond 2^63 bytes.
int64_t parse_byte_size(const std::string& text, const std::string& key);

struct RunConfig {
  std::string dir = "runs/default";  // run directory: metrics.jsonl, summary.json, checkpoints/
  int64_t seed = 1;                  // model init, shuffling, dropout
  nn::BackendKind backend = nn::BackendKind::cpu;  // cpu | cuda | auto (cuda when a device is present)
  int64_t threads = 0;               // CPU backend threads per rank; 0 = every core the rank may use
  // CPU backend: inline | async (a worker thread per stream, for checking)
  nn::CpuStreams cpu_streams = nn::CpuStreams::inline_;
  bool tensorboard = true;           // TensorBoard event files under <run.dir>/tensorboard/
  bool mllog = false;                // MLPerf-style :::MLLOG lines in <run.dir>/mlperf.log
  // The memory each rank may use on the CPU backend (docs/training.md, "A rank's memory"): a run whose
  // rank needs more is refused before it trains, with the split that would fit; 0 = no limit.
  ByteSize memory_limit;
  bool operator==(const RunConfig&) const = default;
};

struct DataConfig {
  std::string train = "/usr/share/datasets/fashion-mnist";  // IDX folder, shard folder or DeepCAM folder
  std::string test = "/usr/share/datasets/fashion-mnist";
  bool normalize = true;             // standardise inputs with the dataset's statistics
  // zscore: (x - mean) / std; minmax: (x - min) / (max - min) (DeepCAM's)
  data::NormalizationKind normalization = data::NormalizationKind::zscore;
  // global: reshuffle all samples across ranks; local: shards stay on their node
  input::Sampling sampling = input::Sampling::global;
  bool skip_bad_samples = false;     // false: a NaN or mis-shaped sample is an error; true: skip and count it
  bool shuffle = true;               // reshuffle the training samples every epoch
  int64_t workers = 2;               // loader threads per rank
  int64_t prefetch = 2;              // batches kept ready per learner
  int64_t cache_mb = 1024;           // shards smaller than this are read into memory once; 0 = always stream
  int64_t train_samples = 0;         // use only the first N training samples; 0 = all
  int64_t test_samples = 0;          // use only the first N test samples; 0 = all
  std::vector<double> class_weights; // per-class loss weights (segmentation); empty = uniform
  std::string netcdf_variables;      // netCDF input: "CHANNEL=variable, ..." overrides of the DeepCAM names
  // netCDF input: the model's own channel list, "NAME=SPEC" or "SPEC" entries, SPEC "variable"
  // or "variable@LEVEL" ("U850=u@850", "ua@850hPa", "msl"); empty: DeepCAM's 16 channels
  std::vector<std::string> channels;
  std::string netcdf_labels = "labels";  // netCDF input: the labels variable (read when present; "" = never)
  bool augment_roll = false;         // climate training samples: a random roll in longitude (periodic)
  bool augment_flip = false;         // ... and a random north-south flip, the meridional wind's sign changed
  // A grid the model's stride does not divide: none refuses it, pad pads each sample to the next
  // multiple, crop crops it to the previous one, centred (io/input/pad_source.hpp)
  data::PadMode pad = data::PadMode::none;
  bool operator==(const DataConfig&) const = default;
};

// Model knobs; 0 means "the model's own default" (width, depth) or "from the data"
// (in_channels, classes).
struct ModelConfig {
  std::string name = "lenet5";       // lenet5 | resnet20 | unet | deeplabv3plus
  int64_t width = 0;                 // base channel count
  int64_t depth = 0;                 // blocks per stage (resnet) or levels (unet)
  int64_t in_channels = 0;
  int64_t classes = 0;
  std::vector<int64_t> aspp_rates = {6, 12, 18};  // deeplabv3plus atrous rates
  double dropout = 0.0;              // probability, [0, 1)
  // Memory order of the activations (docs/training.md, "Layout"): auto = nhwc on the CUDA
  // backend at bf16/fp16 (tensor cores read NHWC directly), blocked on the CPU at fp32
  // (oneDNN's channel blocks), nchw otherwise.
  LayoutChoice layout = LayoutChoice::auto_;  // auto | nchw | nhwc | blocked
  // What the layers read beyond the west and east edges (docs/training.md, "Global fields:
  // longitude without a seam"): zeros, or periodic_longitude (the other edge's columns).
  nn::ModelPadding padding = nn::ModelPadding::zeros;
  bool operator==(const ModelConfig&) const = default;
};

// [train.target]: the run stops at the first evaluation whose metric reaches the value.
struct TargetConfig {
  TargetMetric metric = TargetMetric::none;  // none | accuracy | miou
  double value = 0;                  // the metric's value to reach, in (0, 1] (metric != none)
  bool operator==(const TargetConfig&) const = default;
};

struct TrainConfig {
  int64_t epochs = 5;
  int64_t max_steps = 0;             // stop after this many steps; 0 = run all epochs
  int64_t batch_size = 64;           // per learner (global batch = learners x batch_size)
  int64_t eval_batch_size = 0;       // 0 = batch_size
  int64_t eval_every_steps = 0;      // 0 = at the end of each epoch
  int64_t log_every_steps = 50;
  // Mixed precision (docs/training.md, "Mixed precision"): the activations' type. Weights,
  // gradients and optimizer state stay fp32. fp16 uses dynamic loss scaling.
  Precision precision = Precision::fp32;  // fp32 | bf16 | fp16
  CpuPrecision cpu_precision = CpuPrecision::auto_;  // bf16/fp16 on the CPU backend: auto | native | reference
  double loss_scale = 65536.0;       // fp16: the initial loss scale
  int64_t loss_scale_window = 2000;  // fp16: clean steps before the scale doubles
  // A step whose loss or gradients are NaN or infinite (docs/training.md, "Non-finite values"):
  // stop names the step, rank, learner and layer and ends the run (exit 1); skip drops that
  // step's update, counts it (metrics.jsonl, summary.json) and goes on.
  NonFinitePolicy nonfinite = NonFinitePolicy::stop;  // stop | skip
  TargetConfig target;               // [train.target]
  // A run dir (its newest checkpoint) or a checkpoint whose weights a new run starts from
  // (docs/training.md, "Fine-tuning from another run"); "": the model's own initialisation.
  std::string init_from;
  // Partial epochs (docs/training.md, "A slow node"; Project Adam's 75%): the fraction of each
  // round's samples the job must train. Below 1, under parallel.algorithm = outer, a node slower
  // than the fastest takes fewer inner steps per outer round, down to what this fraction allows,
  // so that the rounds end together; the samples it did not reach go to the front of its next
  // epoch. 1: every node trains every step.
  double epoch_quorum = 1.0;
  bool operator==(const TrainConfig&) const = default;
};

struct ParallelConfig {
  parallel::Algorithm algorithm = parallel::Algorithm::ssgd;  // ssgd | sma | local-sgd | outer
  int64_t replicas_per_device = 1;   // learners per device
  int64_t period = 1;                // sma / local-sgd: steps between synchronisations of the job
  // sma / local-sgd: [inside, across], steps between averages inside each node and across the
  // job (docs/training.md, "Averaging by level"); empty = [period, period]. When set, period
  // is its `across` (load_config makes it so when period was left at its default).
  std::vector<int64_t> periods;
  double alpha = 0.1;                // sma: pull of each replica towards the central model, (0, 1]
  double centre_rate = 0.0;          // sma: how far the central model moves towards the replicas' mean per
                                     // synchronisation; 0 = min(alpha x job learners, 1) (docs/training.md)
  double momentum = 0.9;             // sma: momentum of the central model, [0, 1)
  int64_t start_step = 0;            // local-sgd: ssgd before this step (post-local SGD)
  optim::OuterOptions outer;         // outer: [parallel.outer] (its warmup_steps is not a key)
  bool autotune = false;             // add learners while throughput rises (Crossbow)
  double autotune_threshold = 0.05;  // relative throughput gain needed to keep a new learner
  int64_t max_replicas_per_device = 8;
  double bucket_mb = 0.0;            // ssgd across ranks: gradients reduced in buckets of at least this many MiB;
                                     // 0 = by backend: 1 on the CPU, 25 on a GPU (bucket_mb_for)
  bool cuda_graphs = false;          // CUDA backend: capture each learner's pass once, replay it every step
  // CUDA backend, several ranks: host | nccl | device-hier
  mpi::AllreduceKind device_allreduce = mpi::AllreduceKind::host;
  // The host allreduce's cross-node stage: auto (per part, by the cost model) | ring | halving-doubling
  mpi::CrossAlgorithm cross_node = mpi::CrossAlgorithm::automatic;
  CommPrecision comm_precision = CommPrecision::fp32;  // fp32 | bf16: gradient sums across ranks (ssgd,
                                                       // local-sgd's warm-up)
  bool check_sums = false;           // compare every sum's start across ranks (SQUALL_CHECK_SUMS=1 too)
  // [rows, cols]: each sample split over a group of rows x cols consecutive ranks
  // (docs/training.md, "One sample across ranks"); empty = [1, 1], no split.
  std::vector<int64_t> spatial;
  // A split's halos: auto (nccl on GPUs of one rank each, else host) | host | nccl
  mpi::HaloKind halo_exchange = mpi::HaloKind::auto_;
  bool operator==(const ParallelConfig&) const = default;
};

// Checkpoints (docs/training.md, "Checkpoints and restart"): written into
// <run.dir>/checkpoints/ atomically, at the end of the run, on SIGTERM/SIGUSR1, and as often
// as these say.
struct CheckpointConfig {
  int64_t every_steps = 0;           // 0 = not by step count
  double every_minutes = 0;          // 0 = not by time (rank 0's clock decides for the job)
  int64_t keep = 3;                  // newest checkpoints kept
  bool at_end = true;                // write one when the run completes
  bool operator==(const CheckpointConfig&) const = default;
};

// A resume on another number of ranks or nodes (docs/training.md, "Elastic resume").
struct ElasticConfig {
  ElasticBatch batch = ElasticBatch::global;  // global | learner: which batch the new shape keeps
  bool operator==(const ElasticConfig&) const = default;
};

struct Config {
  RunConfig run;
  DataConfig data;
  ModelConfig model;
  TrainConfig train;
  optim::OptimizerConfig optimizer;
  optim::ScheduleConfig schedule;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  ElasticConfig elastic;
  bool operator==(const Config&) const = default;
};

// Reads the TOML file at `path` (an empty path: start from the defaults), applies each
// override in order ("section.key=value", a leading "--set " is accepted; the value is TOML
// value syntax: 3, 0.1, true, "text" or text, [1, 2]) and validates the result. A key set
// in the file or by an override that differs from its default and does not apply to the
// chosen model, optimizer, schedule, precision or algorithm (optimizer.beta1 with sgd) is an
// error too, and so are keys that contradict each other (validate). Errors (squall::Error;
// squall::UsageError for a value an enum's table does not name and for contradictions) name
// the file or the override and the key.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Same, from TOML text; `origin` names it in errors. It does not refuse keys that contradict
// each other: it reads the configs runs stored (a checkpoint's, rank 0's), which were valid
// when written, and must read again when a later squall checks more.
Config parse_config(const std::string& text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});

// Applies one "section.key=value" override to `config` (no validation).
void apply_override(Config& config, const std::string& assignment);

// Checks ranges, that every float is finite, and that no two keys contradict each other where
// the config alone shows it (schedule.warmup_steps >= train.max_steps, ...); throws
// squall::Error naming `origin` and the key, or both keys and their values. (Which keys apply
// needs to know which were set: load_config.)
void validate(const Config& config, const std::string& origin);

// The contradictions that need the run's length, known once the data is open: a warm-up that
// lasts the whole run, an evaluation or checkpoint interval (with checkpoint.at_end = false
// and no timed checkpoints) longer than the run, a multistep milestone at or after its end.
// total_steps: the steps the run takes (train.epochs x steps_per_epoch, capped by
// train.max_steps). Throws squall::UsageError naming `origin`, both keys and their values, and
// what to change.
void check_against_plan(const Config& config, const std::string& origin, int64_t total_steps,
                        int64_t steps_per_epoch);

// Every key, section by section, in a form load_config reads back to an equal Config.
std::string to_toml(const Config& config);

// "section.key" for every key that exists, in file order (for help text and completion).
std::vector<std::string> config_keys();

// parallel.bucket_mb as a run uses it: the configured size, or for 0 the backend's default.
// A CPU's sums go through the host allreduce, whose small buckets start while the backward
// pass still computes; a GPU's bucket costs a device sum, an event and an NCCL launch (or a
// copy to pinned memory), so 1 MiB buckets would be over a hundred a step for DeepLabv3+'s
// 40 M parameters: 25 MiB, PyTorch DDP's default.
double bucket_mb_for(const ParallelConfig& parallel, bool device_backend);

// parallel.periods as a run uses it: [inside, across], or [period, period] when unset.
struct SyncPeriods {
  int64_t inside = 1, across = 1;
  bool by_level() const { return inside != across; }  // a node level between the job's averages
  bool operator==(const SyncPeriods&) const = default;
};
SyncPeriods sync_periods(const ParallelConfig& parallel);
// parallel.spatial as a split ([1, 1] when empty).
nn::SpatialSplit spatial_split(const ParallelConfig& parallel);
// "[1, 4]"
std::string periods_text(const SyncPeriods& periods);

}  // namespace squall::config
