// The checks of a config: values in range, keys that apply, keys that do not contradict each
// other, before training and against the run's planned length (config.hpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "io/formats/netcdf_file.hpp"
#include "src/core/error.hpp"
#include "src/core/suggest.hpp"
#include "src/nn/graph.hpp"
#include "src/parallel/sma.hpp"
#include "src/config/config_fields.hpp"

namespace squall::config {
namespace config_detail {
namespace {

// ---- validation helpers -----------------------------------------------------------------------

struct Checker {
  const std::string& origin;

  void require(bool ok, const std::string& key, const std::string& rule) const {
    if (!ok) throw Error(origin + ": " + key + " " + rule);
  }
  template <typename T>
  void positive(T v, const std::string& key) const {
    require(v > 0, key, "must be > 0 (got " + show(v) + ")");
  }
  template <typename T>
  void non_negative(T v, const std::string& key) const {
    require(v >= 0, key, "must be >= 0 (got " + show(v) + ")");
  }
  void fraction(double v, const std::string& key, bool one_allowed) const {
    require(v >= 0 && (one_allowed ? v <= 1 : v < 1), key,
            std::string("must be in [0, 1") + (one_allowed ? "]" : ")") + " (got " + show(v) + ")");
  }
  // Two keys that contradict each other: `why` names both and their values.
  void consistent(const std::string& why) const {
    if (!why.empty()) throw UsageError(origin + ": " + why);
  }
  static std::string show(int64_t v) { return std::to_string(v); }
  static std::string show(double v) { return format_double(v); }
};

// ---- settings that contradict each other -------------------------------------------------------

// How long the run is, for the checks that compare an interval with it: `steps` is its length
// (validate: train.max_steps, an upper bound; check_against_plan: the plan's count) and `said`
// how a message names it ("train.max_steps = 1000", "train.epochs = 2: 1876 steps").
struct RunLength {
  int64_t steps = 0;
  std::string said;
  int64_t steps_per_epoch = 0;  // 0: not known yet (validate)
};

std::string show_steps(int64_t n) { return std::to_string(n) + (n == 1 ? " step" : " steps"); }

// Each returns what contradicts what ("" when nothing does), naming both keys and their
// values, why it is wrong and what to change.
std::string warmup_vs_run(const Config& c, const RunLength& run) {
  const int64_t w = c.schedule.warmup_steps;
  // A warm-up as long as the run still reaches the peak, at its last step (schedule.hpp).
  if (w <= run.steps) return "";
  return "schedule.warmup_steps = " + std::to_string(w) + " is longer than the whole run (" + run.said +
         "): the learning rate would never reach its peak; make schedule.warmup_steps at most " +
         show_steps(run.steps) + " (--set schedule.warmup_steps=0 for none), or train longer";
}

std::string eval_vs_run(const Config& c, const RunLength& run) {
  const int64_t e = c.train.eval_every_steps;
  if (e == 0 || e <= run.steps) return "";
  return "train.eval_every_steps = " + std::to_string(e) + " is longer than the whole run (" + run.said +
         "): no evaluation would fall on it, only the one at the end; set train.eval_every_steps to at most " +
         std::to_string(run.steps) + ", or 0 to evaluate at the end of each epoch";
}

// train.init_from names weights to start from: a path that is not there is a typo, found before
// the data is read (what it holds is read and checked when the run starts).
std::string init_from_missing(const Config& c) {
  const std::string& path = c.train.init_from;
  std::error_code ec;
  if (path.empty() || std::filesystem::exists(path, ec)) return "";
  return "train.init_from = '" + path + "': no such file or folder (a run dir, whose newest checkpoint is used, or " +
         "a checkpoint's step-NNNNNNNN folder or its model.h5)";
}

// Without checkpoint.at_end and timed checkpoints, the step interval is the only writer.
std::string checkpoint_vs_run(const Config& c, const RunLength& run) {
  const auto& k = c.checkpoint;
  if (k.every_steps == 0 || k.every_steps <= run.steps || k.at_end || k.every_minutes > 0) return "";
  return "checkpoint.every_steps = " + std::to_string(k.every_steps) + " is longer than the whole run (" + run.said +
         ") and checkpoint.at_end = false: the run would write no checkpoint; set checkpoint.every_steps to at most " +
         std::to_string(run.steps) + ", or checkpoint.at_end = true";
}

// A milestone lowers the learning rate from its step on (schedule.hpp): one at or after the
// run's end never does. Before the plan, milestones in epochs are compared with train.epochs
// (the run is never longer), in steps with train.max_steps.
std::string milestones_vs_run(const Config& c, const RunLength* run) {
  const auto& s = c.schedule;
  if (s.kind != optim::ScheduleKind::multistep) return "";
  const bool epochs = s.milestone_unit == optim::MilestoneUnit::epochs;
  for (const int64_t m : s.milestones) {
    std::string at, end;
    if (epochs && (run == nullptr || run->steps_per_epoch == 0)) {
      if (c.train.epochs == 0 || m < c.train.epochs) continue;
      at = std::to_string(m) + " (schedule.milestone_unit = epochs)";
      end = "train.epochs = " + std::to_string(c.train.epochs);
    } else if (run != nullptr) {
      const int64_t step = epochs ? m * run->steps_per_epoch : m;
      if (step < run->steps) continue;
      at = std::to_string(m) + (epochs ? " (schedule.milestone_unit = epochs: step " + std::to_string(step) + " at " +
                                             std::to_string(run->steps_per_epoch) + " steps per epoch)"
                                       : std::string());
      end = run->said;
    } else {
      continue;
    }
    std::string list;
    for (const int64_t x : s.milestones) list += (list.empty() ? "" : ", ") + std::to_string(x);
    return "schedule.milestones = [" + list + "] has " + at + ", not before the end of the run (" + end +
           "): a milestone lowers the learning rate from there on, so this one never would; remove it, or train "
           "longer";
  }
  return "";
}

// Cosine decays from the peak to min_lr; a min_lr above the peak would make it climb. Under
// the linear scaling rule the peak depends on the job's size: checked at run time, not here.
std::string cosine_floor_vs_lr(const Config& c) {
  if (c.schedule.kind != optim::ScheduleKind::cosine || c.schedule.scale_lr_with_batch ||
      c.schedule.min_lr <= c.optimizer.lr)
    return "";
  return "schedule.min_lr = " + format_double(c.schedule.min_lr) + " is above optimizer.lr = " +
         format_double(c.optimizer.lr) +
         ": schedule.kind = cosine decays the learning rate from optimizer.lr down to schedule.min_lr; set "
         "schedule.min_lr below optimizer.lr";
}

std::string list_text(const std::vector<int64_t>& values);

// parallel.outer.async against what it cannot go with.
std::string async_outer_vs_rest(const Config& c) {
  const ParallelConfig& p = c.parallel;
  if (p.outer.async && p.outer.streaming)
    return "parallel.outer.streaming and parallel.outer.async are two ways of hiding the outer step: an "
           "asynchronous node never waits for the job's sum that streaming hides (set one of them)";
  if (p.outer.async && p.spatial.size() == 2 && p.spatial[0] * p.spatial[1] > 1)
    return "parallel.outer.async with parallel.spatial = " + list_text(p.spatial) +
           ": asynchronous outer steps across split samples are not built yet (set parallel.spatial = [1, 1], "
           "or parallel.outer.async = false)";
  if (c.train.epoch_quorum < 1 && p.outer.streaming)
    return "train.epoch_quorum = " + format_double(c.train.epoch_quorum) +
           " lets a slow node skip the end of its rounds, and parallel.outer.streaming overlaps each outer step with "
           "the next round's first inner step: set one of them";
  if (c.train.epoch_quorum < 1 && p.spatial.size() == 2 && p.spatial[0] * p.spatial[1] > 1)
    return "train.epoch_quorum = " + format_double(c.train.epoch_quorum) + " with parallel.spatial = " +
           list_text(p.spatial) + ": partial epochs of split samples are not built yet (set train.epoch_quorum = 1, "
           "or parallel.spatial = [1, 1])";
  if (p.outer.max_staleness != -1 && !p.outer.async)
    return "parallel.outer.max_staleness = " + std::to_string(p.outer.max_staleness) +
           " bounds the asynchronous outer steps, and parallel.outer.async = false: set "
           "parallel.outer.async = true, or remove it";
  return "";
}

// A device allreduce sums GPU memory, which the CPU backend does not have.
std::string device_allreduce_vs_backend(const Config& c) {
  const mpi::AllreduceKind a = c.parallel.device_allreduce;
  if (a == mpi::AllreduceKind::host || c.run.backend != nn::BackendKind::cpu) return "";
  return std::string("parallel.device_allreduce = ") + mpi::k_allreduce_kinds.name(a) +
         " sums GPU memory, but run.backend = cpu trains in host memory: set run.backend = cuda (or auto), or "
         "parallel.device_allreduce = host";
}

void check_finite(const Config& config, const std::string& origin) {
  Config copy = config;  // the field table binds non-const pointers
  for (const auto& f : fields(copy))
    if (const std::string why = non_finite(f); !why.empty()) throw Error(origin + ": " + why);
}

// ---- keys that do not apply -------------------------------------------------------------------

// A key that has an effect only for some values of another key, its decider: beta1 only for
// the Adam family, min_lr only for the cosine schedule, ... Setting one that has no effect is
// almost always a mistake (the optimizer or schedule the user had in mind is not the one
// chosen), so it is refused. Only what the code reads is listed: a key with an effect in any
// path (trainer.cpp, learners.cpp, optimizer.cpp, schedule.cpp, the model zoo) is not here.
struct Applicability {
  const char* key;
  const char* decider;
  const char* applies_to;  // the decider's values it applies to, as the message says them
  bool (*applies)(const Config&);
};

bool known_model(const std::string& name) {
  const auto names = nn::model_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// An unknown model name is refused before (check_model_name); no key is refused for it here.
bool takes_width_and_depth(const Config& c) {
  const std::string& m = c.model.name;
  return !known_model(m) || m == "resnet20" || m == "unet" || m == "deeplabv3plus";
}

bool takes_aspp_rates(const Config& c) {
  return !known_model(c.model.name) || c.model.name.rfind("deeplabv3plus", 0) == 0;
}

bool sgd(const Config& c) { return c.optimizer.name == optim::OptimizerKind::sgd; }
bool adam_family(const Config& c) { return !sgd(c); }
bool larc(const Config& c) { return c.optimizer.larc; }
bool multistep(const Config& c) { return c.schedule.kind == optim::ScheduleKind::multistep; }
bool cosine(const Config& c) { return c.schedule.kind == optim::ScheduleKind::cosine; }
bool scaled_lr(const Config& c) { return c.schedule.scale_lr_with_batch; }
bool fp16(const Config& c) { return c.train.precision == Precision::fp16; }
bool reduced(const Config& c) { return c.train.precision != Precision::fp32; }
bool sma(const Config& c) { return c.parallel.algorithm == parallel::Algorithm::sma; }
bool local_sgd(const Config& c) { return c.parallel.algorithm == parallel::Algorithm::local_sgd; }
bool outer(const Config& c) { return c.parallel.algorithm == parallel::Algorithm::outer; }
bool has_target(const Config& c) { return c.train.target.metric != TargetMetric::none; }
bool synchronises(const Config& c) { return sma(c) || local_sgd(c); }
bool autotune(const Config& c) { return c.parallel.autotune; }
// The cross-node stage it chooses is the host allreduce's: device-hier crosses nodes with
// MPI_Allreduce, nccl within NCCL.
bool host_allreduce(const Config& c) { return c.parallel.device_allreduce == mpi::AllreduceKind::host; }
// Validation used to ask for max_replicas_per_device >= replicas_per_device in every run, so
// scripts (bench/, tests/mpi/) set the two equal without the auto-tuner: that value, which
// says nothing new, is still accepted.
bool caps_learners(const Config& c) {
  return c.parallel.autotune || c.parallel.max_replicas_per_device == c.parallel.replicas_per_device;
}

const std::vector<Applicability>& applicability() {
  static const std::vector<Applicability> rules = {
      {"model.width", "model.name", "resnet20, unet or deeplabv3plus", takes_width_and_depth},
      {"model.depth", "model.name", "resnet20, unet or deeplabv3plus", takes_width_and_depth},
      {"model.aspp_rates", "model.name", "deeplabv3plus*", takes_aspp_rates},
      {"train.loss_scale", "train.precision", "fp16", fp16},
      {"train.cpu_precision", "train.precision", "bf16 or fp16", reduced},
      {"train.loss_scale_window", "train.precision", "fp16", fp16},
      {"train.target.value", "train.target.metric", "accuracy or miou", has_target},
      {"optimizer.momentum", "optimizer.name", "sgd", sgd},
      {"optimizer.nesterov", "optimizer.name", "sgd", sgd},
      {"optimizer.beta1", "optimizer.name", "adam, adamw or lamb", adam_family},
      {"optimizer.beta2", "optimizer.name", "adam, adamw or lamb", adam_family},
      {"optimizer.eps", "optimizer.name", "adam, adamw or lamb", adam_family},
      {"optimizer.larc_eta", "optimizer.larc", "true", larc},
      {"optimizer.larc_clip", "optimizer.larc", "true", larc},
      {"schedule.milestones", "schedule.kind", "multistep", multistep},
      {"schedule.milestone_unit", "schedule.kind", "multistep", multistep},
      {"schedule.gamma", "schedule.kind", "multistep", multistep},
      {"schedule.min_lr", "schedule.kind", "cosine", cosine},
      {"schedule.reference_batch", "schedule.scale_lr_with_batch", "true", scaled_lr},
      {"parallel.period", "parallel.algorithm", "sma or local-sgd", synchronises},
      {"parallel.alpha", "parallel.algorithm", "sma", sma},
      {"parallel.centre_rate", "parallel.algorithm", "sma", sma},
      {"parallel.momentum", "parallel.algorithm", "sma", sma},
      {"parallel.start_step", "parallel.algorithm", "local-sgd", local_sgd},
      {"parallel.outer.period", "parallel.algorithm", "outer", outer},
      {"parallel.outer.lr", "parallel.algorithm", "outer", outer},
      {"parallel.outer.momentum", "parallel.algorithm", "outer", outer},
      {"parallel.outer.nesterov", "parallel.algorithm", "outer", outer},
      {"parallel.outer.start_step", "parallel.algorithm", "outer", outer},
      {"parallel.outer.start_fraction", "parallel.algorithm", "outer", outer},
      {"parallel.outer.qsr", "parallel.algorithm", "outer", outer},
      {"parallel.outer.streaming", "parallel.algorithm", "outer", outer},
      {"parallel.outer.async", "parallel.algorithm", "outer", outer},
      {"parallel.outer.max_staleness", "parallel.algorithm", "outer", outer},
      {"train.epoch_quorum", "parallel.algorithm", "outer", outer},
      {"parallel.autotune_threshold", "parallel.autotune", "true", autotune},
      {"parallel.max_replicas_per_device", "parallel.autotune", "true", caps_learners},
      {"parallel.cross_node", "parallel.device_allreduce", "host", host_allreduce},
  };
  return rules;
}


bool differs_from_default(const Config& config, const std::string& key) {
  Config copy = config, defaults;  // the field table binds non-const pointers
  const auto now = fields(copy), before = fields(defaults);
  return std::visit(
      [](const auto& a, const auto& b) {
        using A = std::decay_t<decltype(a)>;
        if constexpr (!std::is_same_v<A, std::decay_t<decltype(b)>>) return true;
        else if constexpr (std::is_same_v<A, EnumField>) return std::string_view(a.name()) != b.name();
        else return *a != *b;
      },
      field_named(now, key).ref, field_named(before, key).ref);
}

// The value as a message says it: text unquoted (sgd, not "sgd").
std::string plain_value(const Config& config, const std::string& key) {
  Config copy = config;
  const auto table = fields(copy);
  const FieldRef& ref = field_named(table, key).ref;
  if (const auto* p = std::get_if<std::string*>(&ref)) return **p;
  if (const auto* e = std::get_if<EnumField>(&ref)) return e->name();
  return format_value(ref);
}

}  // namespace


// A key set in the file or by --set that differs from its default and does not apply is an
// error naming where it was set. A key at its default never is: to_toml writes every key, and
// a resolved config.toml must load again.
void check_applicable(const Config& config, const KeysSet& set) {
  for (const auto& rule : applicability()) {
    const auto at = set.find(rule.key);
    if (at == set.end() || rule.applies(config) || !differs_from_default(config, rule.key)) continue;
    throw Error(at->second.origin + ": " + rule.key + " applies to " + rule.decider + " = " + rule.applies_to +
                ", not " + plain_value(config, rule.decider) + at->second.line + ": remove it, or change " +
                rule.decider);
  }
}

void check_model_name(const Config& config, const KeysSet& set, const std::string& origin) {
  if (known_model(config.model.name)) return;
  const auto at = set.find("model.name");
  const std::string where = at == set.end() ? origin : at->second.origin + at->second.line;
  const std::vector<std::string> names = nn::model_names();
  throw Error(where + ": model.name = \"" + config.model.name + "\" is not a model squall knows" +
              did_you_mean(config.model.name, names) + " (models: " + join_names(names) + ")");
}

namespace {

// A list key's value as the config writes it: "[1, 4]".
std::string list_text(const std::vector<int64_t>& values) {
  std::string shown = "[";
  for (size_t i = 0; i < values.size(); ++i) shown += (i ? ", " : "") + std::to_string(values[i]);
  return shown + "]";
}

// parallel.periods = [inside, across] (docs/training.md, "Averaging by level").
void check_periods(const Checker& k, const ParallelConfig& p) {
  if (p.periods.empty()) return;
  const std::string shown = list_text(p.periods);
  const std::string key = "parallel.periods";
  k.require(p.periods.size() == 2, key, "must be [inside, across], two numbers of steps (got " + shown + ")");
  k.require(p.periods[0] > 0 && p.periods[1] > 0, key, "= " + shown + ": both periods must be > 0");
  k.require(p.periods[1] % p.periods[0] == 0, key,
            "= " + shown + ": across (" + std::to_string(p.periods[1]) + ") must be a multiple of inside (" +
                std::to_string(p.periods[0]) + ")");
  k.require(p.period == 1 || p.period == p.periods[1], key,
            "= " + shown + " and parallel.period = " + std::to_string(p.period) +
                " disagree: parallel.period = p is short for parallel.periods = [p, p]; set one of them");
  k.require(p.algorithm != parallel::Algorithm::ssgd || (p.periods[0] == 1 && p.periods[1] == 1), key,
            "= " + shown + " applies to parallel.algorithm = sma or local-sgd; ssgd sums the gradients of the "
            "whole job at every step (remove it, or set [1, 1])");
  k.require(p.algorithm != parallel::Algorithm::outer || (p.periods[0] == 1 && p.periods[1] == 1), key,
            "= " + shown + " applies to parallel.algorithm = sma or local-sgd; outer sums inside each node every "
            "step and steps across nodes every parallel.outer.period steps (remove it, and set that)");
}

// parallel.spatial = [rows, cols] (docs/training.md, "One sample across ranks"): what a split
// run cannot do yet, refused naming both keys. The world size, the layers and the tiles' sizes
// are checked when the job and the model are known (train/spatial_job.cpp).
void check_spatial(const Checker& k, const Config& c) {
  const ParallelConfig& p = c.parallel;
  if (p.spatial.empty()) return;
  const std::string shown = list_text(p.spatial);
  const std::string key = "parallel.spatial";
  k.require(p.spatial.size() == 2, key, "must be [rows, cols], the ranks that split each sample (got " + shown + ")");
  k.require(p.spatial[0] >= 1 && p.spatial[1] >= 1, key, "= " + shown + ": rows and cols must be >= 1");
  if (p.spatial[0] * p.spatial[1] == 1) return;
  const std::string split = key + " = " + shown + " splits each sample over " +
                            std::to_string(p.spatial[0] * p.spatial[1]) + " ranks";
  auto refuse = [&](bool bad, const std::string& other, const std::string& why) {
    if (bad) throw UsageError(k.origin + ": " + split + ", and " + other + ": " + why);
  };
  refuse(p.replicas_per_device > 1, "parallel.replicas_per_device = " + std::to_string(p.replicas_per_device),
         "several learners per device cannot share one rank's tiles yet; set parallel.replicas_per_device = 1");
  refuse(p.autotune, "parallel.autotune = true", "the auto-tuner adds learners to a rank; set parallel.autotune = false");
  refuse(c.data.augment_roll || c.data.augment_flip,
         std::string(c.data.augment_roll ? "data.augment_roll" : "data.augment_flip") + " = true",
         "augmentation moves whole samples, and each rank reads only its tile; turn it off");
  refuse(c.train.precision == Precision::fp16, "train.precision = fp16",
         "fp16's dynamic loss scale is not built for a split yet; use fp32 or bf16");
  refuse(p.periods.size() == 2 && p.periods[0] != p.periods[1], "parallel.periods = " + list_text(p.periods),
         "a node level between the job's averages is not built for a split yet; set parallel.periods = [] (or "
         "[p, p])");
  refuse(p.cuda_graphs, "parallel.cuda_graphs = true", "a split pass exchanges halos between ranks, which a "
         "captured graph cannot; set parallel.cuda_graphs = false");
}

}  // namespace

// ---- checking a config ----------------------------------------------------------------------

void check_values(const Config& c, const std::string& origin) {
  check_finite(c, origin);
  const Checker k{origin};
  // Enum keys need no check: their tables admit only their values.
  k.require(!c.run.dir.empty(), "run.dir", "must not be empty");
  k.non_negative(c.run.threads, "run.threads");
  k.non_negative(c.run.memory_limit.bytes, "run.memory_limit");

  k.non_negative(c.data.workers, "data.workers");
  k.positive(c.data.prefetch, "data.prefetch");
  k.non_negative(c.data.cache_mb, "data.cache_mb");
  k.non_negative(c.data.train_samples, "data.train_samples");
  k.non_negative(c.data.test_samples, "data.test_samples");
  try {
    formats::netcdf_variable_map(c.data.netcdf_variables);
  } catch (const Error& e) {
    k.require(false, "data.netcdf_variables", std::string("is invalid: ") + e.what());
  }
  if (!c.data.channels.empty()) {
    try {
      formats::netcdf_options(c.data.channels, c.data.netcdf_variables);
    } catch (const Error& e) {
      std::string why = e.what();
      if (why.starts_with("data.channels: ")) why = why.substr(15);
      k.require(false, "data.channels", "is invalid: " + why);
    }
  }
  for (const double w : c.data.class_weights) k.non_negative(w, "data.class_weights");

  // model.name against the zoo: check_model_name, which knows where the name was set.
  k.require(!c.model.name.empty(), "model.name", "must not be empty");
  k.non_negative(c.model.width, "model.width");
  k.non_negative(c.model.depth, "model.depth");
  k.non_negative(c.model.in_channels, "model.in_channels");
  k.non_negative(c.model.classes, "model.classes");
  for (const int64_t r : c.model.aspp_rates) k.positive(r, "model.aspp_rates");
  k.fraction(c.model.dropout, "model.dropout", false);

  k.non_negative(c.train.epochs, "train.epochs");
  k.non_negative(c.train.max_steps, "train.max_steps");
  k.require(c.train.epochs > 0 || c.train.max_steps > 0, "train.epochs",
            "and train.max_steps are both 0: nothing to train");
  k.positive(c.train.batch_size, "train.batch_size");
  k.non_negative(c.train.eval_batch_size, "train.eval_batch_size");
  k.non_negative(c.train.eval_every_steps, "train.eval_every_steps");
  k.positive(c.train.log_every_steps, "train.log_every_steps");
  k.require(std::isfinite(c.train.loss_scale) && c.train.loss_scale > 0, "train.loss_scale",
            "must be > 0 (got " + format_double(c.train.loss_scale) + ")");
  k.positive(c.train.loss_scale_window, "train.loss_scale_window");
  k.require(c.train.epoch_quorum > 0 && c.train.epoch_quorum <= 1, "train.epoch_quorum",
            "must be in (0, 1]: the fraction of each round's samples the job trains (got " +
                format_double(c.train.epoch_quorum) + ")");
  const auto& t = c.train.target;
  k.require(t.metric == TargetMetric::none || (t.value > 0 && t.value <= 1), "train.target.value",
            std::string("must be in (0, 1] with train.target.metric = ") + k_target_metrics.name(t.metric) + " (got " +
                format_double(t.value) + ")");

  const auto& o = c.optimizer;
  k.require(std::isfinite(o.lr) && o.lr > 0, "optimizer.lr", "must be > 0 (got " + format_double(o.lr) + ")");
  k.fraction(o.momentum, "optimizer.momentum", false);
  k.require(!(o.nesterov && o.momentum == 0 && o.name == optim::OptimizerKind::sgd), "optimizer.nesterov",
            "needs optimizer.momentum > 0");
  k.non_negative(o.weight_decay, "optimizer.weight_decay");
  k.fraction(o.beta1, "optimizer.beta1", false);
  k.fraction(o.beta2, "optimizer.beta2", false);
  k.positive(o.eps, "optimizer.eps");
  k.positive(o.larc_eta, "optimizer.larc_eta");

  const auto& s = c.schedule;
  k.non_negative(s.warmup_steps, "schedule.warmup_steps");
  k.require(s.kind != optim::ScheduleKind::multistep || !s.milestones.empty(), "schedule.milestones",
            "must list at least one milestone when schedule.kind = \"multistep\"");
  for (size_t i = 0; i < s.milestones.size(); ++i) {
    k.positive(s.milestones[i], "schedule.milestones");
    k.require(i == 0 || s.milestones[i] > s.milestones[i - 1], "schedule.milestones", "must be increasing");
  }
  k.positive(s.gamma, "schedule.gamma");
  k.non_negative(s.min_lr, "schedule.min_lr");
  k.positive(s.reference_batch, "schedule.reference_batch");

  const auto& p = c.parallel;
  k.positive(p.replicas_per_device, "parallel.replicas_per_device");
  k.positive(p.period, "parallel.period");
  check_periods(k, p);
  check_spatial(k, c);
  k.fraction(p.alpha, "parallel.alpha", true);
  k.fraction(p.momentum, "parallel.momentum", false);
  k.non_negative(p.centre_rate, "parallel.centre_rate");
  if (p.algorithm == parallel::Algorithm::sma) {
    const std::string why = parallel::sma_instability(p.alpha, p.centre_rate, p.momentum, "parallel.");
    k.require(why.empty(), why.substr(0, why.find(' ')), why.substr(why.find(' ') + 1));
  }
  k.non_negative(p.start_step, "parallel.start_step");
  k.positive(p.outer.period, "parallel.outer.period");
  k.positive(p.outer.lr, "parallel.outer.lr");
  k.fraction(p.outer.momentum, "parallel.outer.momentum", false);
  k.non_negative(p.outer.start_step, "parallel.outer.start_step");
  k.fraction(p.outer.start_fraction, "parallel.outer.start_fraction", false);
  k.non_negative(p.outer.qsr, "parallel.outer.qsr");
  k.require(!(p.outer.start_step > 0 && p.outer.start_fraction > 0), "parallel.outer.start_fraction",
            "and parallel.outer.start_step = " + std::to_string(p.outer.start_step) +
                " both say when the outer steps start: set one of them");
  const bool is_outer = p.algorithm == parallel::Algorithm::outer;
  k.require(!(is_outer && p.autotune), "parallel.autotune",
            "adds learners to one rank, which would give its node more weight in parallel.algorithm = outer's mean: "
            "set parallel.autotune = false, or another parallel.algorithm");
  k.require(!(is_outer && p.device_allreduce != mpi::AllreduceKind::host), "parallel.device_allreduce",
            "= " + std::string(mpi::k_allreduce_kinds.name(p.device_allreduce)) +
                ": parallel.algorithm = outer sums inside each node with the host allreduce: set "
                "parallel.device_allreduce = host");
  k.require(p.outer.max_staleness >= -1, "parallel.outer.max_staleness",
            "= " + std::to_string(p.outer.max_staleness) +
                ": the rounds a node may run ahead of the slowest, >= 0, or -1 for no bound");
  k.non_negative(p.autotune_threshold, "parallel.autotune_threshold");
  k.non_negative(p.bucket_mb, "parallel.bucket_mb");
  const bool bf16_sums = p.comm_precision == CommPrecision::bf16;
  k.require(!(bf16_sums && p.algorithm == parallel::Algorithm::sma), "parallel.comm_precision",
            "= bf16 rounds gradient sums; sma sums models, which bf16 would round to 3 significant digits: "
            "use fp32 with parallel.algorithm = sma");
  k.require(!(bf16_sums && p.device_allreduce != mpi::AllreduceKind::host), "parallel.comm_precision",
            "= bf16 is summed by the host allreduce: set parallel.device_allreduce = host");
  // A replayed pass repeats its arguments, and dropout's mask is drawn from the step number.
  k.require(!(p.cuda_graphs && c.model.dropout > 0), "parallel.cuda_graphs",
            "replays one captured pass, which would repeat one dropout mask every step: set model.dropout = 0 "
            "or parallel.cuda_graphs = false");
  // The auto-tuner's cap: without it, the learner count is replicas_per_device, whatever this says.
  k.require(!p.autotune || p.max_replicas_per_device >= p.replicas_per_device, "parallel.max_replicas_per_device",
            "must be >= parallel.replicas_per_device with parallel.autotune = true");

  k.non_negative(c.checkpoint.every_steps, "checkpoint.every_steps");
  k.non_negative(c.checkpoint.every_minutes, "checkpoint.every_minutes");
  k.positive(c.checkpoint.keep, "checkpoint.keep");
}

// Keys that contradict each other, where the config alone shows it; the run's real length is
// check_against_plan's.
void check_consistent(const Config& c, const std::string& origin) {
  const Checker k{origin};
  if (c.train.max_steps > 0) {
    const RunLength run{c.train.max_steps, "train.max_steps = " + std::to_string(c.train.max_steps)};
    k.consistent(warmup_vs_run(c, run));
    k.consistent(eval_vs_run(c, run));
    k.consistent(checkpoint_vs_run(c, run));
    k.consistent(milestones_vs_run(c, &run));
  } else {
    k.consistent(milestones_vs_run(c, nullptr));
  }
  k.consistent(cosine_floor_vs_lr(c));
  k.consistent(async_outer_vs_rest(c));
  k.consistent(device_allreduce_vs_backend(c));
  k.consistent(init_from_missing(c));
}

}  // namespace config_detail

using namespace config_detail;

void validate(const Config& config, const std::string& origin) {
  check_values(config, origin);
  check_consistent(config, origin);
}

void check_against_plan(const Config& c, const std::string& origin, int64_t total_steps, int64_t steps_per_epoch) {
  RunLength run{total_steps, "", steps_per_epoch};
  run.said = c.train.max_steps > 0 && c.train.max_steps == total_steps
                 ? "train.max_steps = " + std::to_string(total_steps)
                 : "train.epochs = " + std::to_string(c.train.epochs) + ": " + show_steps(total_steps);
  const Checker k{origin};
  k.consistent(warmup_vs_run(c, run));
  k.consistent(eval_vs_run(c, run));
  k.consistent(checkpoint_vs_run(c, run));
  k.consistent(milestones_vs_run(c, &run));
}

}  // namespace squall::config
