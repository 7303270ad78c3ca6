#include "src/train/config.hpp"
#include "src/train/sma.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <variant>

#include "io/netcdf_file.hpp"
#include "src/core/error.hpp"
#include "src/core/suggest.hpp"
#include "src/nn/graph.hpp"

namespace squall::train {
namespace {

// ---- the field table ------------------------------------------------------------------------

// A key whose values an enum's table names (config_enums.hpp): read, written, compared and
// listed in messages through that table only.
struct EnumField {
  std::function<const char*()> name;  // the current value's name
  // Sets the value `text` names; anything else throws the table's error (allowed values, did you mean).
  std::function<void(std::string_view text, const std::string& key, const std::string& origin,
                     const std::string& where)>
      parse;
  std::function<std::string()> list;  // "a | b | c"
};

template <typename E, size_t N>
EnumField enum_field(E* p, const EnumTable<E, N>& table) {
  return {[p, &table] { return table.name(*p); },
          [p, &table](std::string_view text, const std::string& key, const std::string& origin,
                      const std::string& where) { *p = table.parse(text, key, origin, where); },
          [&table] { return table.list(); }};
}

using FieldRef = std::variant<bool*, int64_t*, double*, std::string*, std::vector<int64_t>*,
                              std::vector<double>*, EnumField>;

struct Field {
  const char* section;
  const char* key;
  FieldRef ref;
  std::string full() const { return std::string(section) + "." + key; }
};

// Every key, in the order to_toml writes them. Binding to a Config (rather than listing member
// pointers per type) keeps the table one line per key. A section with a dot is a sub-table
// ([train.target]), written after its parent's keys.
std::vector<Field> fields(Config& c) {
  return {
      {"run", "dir", &c.run.dir},
      {"run", "seed", &c.run.seed},
      {"run", "backend", enum_field(&c.run.backend, nn::k_backend_kinds)},
      {"run", "threads", &c.run.threads},
      {"run", "cpu_streams", enum_field(&c.run.cpu_streams, nn::k_cpu_stream_modes)},
      {"run", "tensorboard", &c.run.tensorboard},
      {"run", "mllog", &c.run.mllog},

      {"data", "train", &c.data.train},
      {"data", "test", &c.data.test},
      {"data", "normalize", &c.data.normalize},
      {"data", "normalization", enum_field(&c.data.normalization, data::k_normalization_kinds)},
      {"data", "sampling", enum_field(&c.data.sampling, io::k_sampling_modes)},
      {"data", "skip_bad_samples", &c.data.skip_bad_samples},
      {"data", "shuffle", &c.data.shuffle},
      {"data", "workers", &c.data.workers},
      {"data", "prefetch", &c.data.prefetch},
      {"data", "cache_mb", &c.data.cache_mb},
      {"data", "train_samples", &c.data.train_samples},
      {"data", "test_samples", &c.data.test_samples},
      {"data", "class_weights", &c.data.class_weights},
      {"data", "netcdf_variables", &c.data.netcdf_variables},
      {"data", "netcdf_labels", &c.data.netcdf_labels},
      {"data", "augment_roll", &c.data.augment_roll},
      {"data", "augment_flip", &c.data.augment_flip},

      {"model", "name", &c.model.name},
      {"model", "width", &c.model.width},
      {"model", "depth", &c.model.depth},
      {"model", "in_channels", &c.model.in_channels},
      {"model", "classes", &c.model.classes},
      {"model", "aspp_rates", &c.model.aspp_rates},
      {"model", "dropout", &c.model.dropout},
      {"model", "layout", enum_field(&c.model.layout, k_layout_choices)},

      {"train", "epochs", &c.train.epochs},
      {"train", "max_steps", &c.train.max_steps},
      {"train", "batch_size", &c.train.batch_size},
      {"train", "eval_batch_size", &c.train.eval_batch_size},
      {"train", "eval_every_steps", &c.train.eval_every_steps},
      {"train", "log_every_steps", &c.train.log_every_steps},
      {"train", "precision", enum_field(&c.train.precision, k_precisions)},
      {"train", "loss_scale", &c.train.loss_scale},
      {"train", "loss_scale_window", &c.train.loss_scale_window},
      {"train", "nonfinite", enum_field(&c.train.nonfinite, k_nonfinite_policies)},

      {"train.target", "metric", enum_field(&c.train.target.metric, k_target_metrics)},
      {"train.target", "value", &c.train.target.value},

      {"optimizer", "name", enum_field(&c.optimizer.name, k_optimizer_kinds)},
      {"optimizer", "lr", &c.optimizer.lr},
      {"optimizer", "momentum", &c.optimizer.momentum},
      {"optimizer", "nesterov", &c.optimizer.nesterov},
      {"optimizer", "weight_decay", &c.optimizer.weight_decay},
      {"optimizer", "beta1", &c.optimizer.beta1},
      {"optimizer", "beta2", &c.optimizer.beta2},
      {"optimizer", "eps", &c.optimizer.eps},
      {"optimizer", "larc", &c.optimizer.larc},
      {"optimizer", "larc_eta", &c.optimizer.larc_eta},
      {"optimizer", "larc_clip", &c.optimizer.larc_clip},
      {"optimizer", "decay_bias_and_norm", &c.optimizer.decay_bias_and_norm},

      {"schedule", "warmup_steps", &c.schedule.warmup_steps},
      {"schedule", "kind", enum_field(&c.schedule.kind, k_schedule_kinds)},
      {"schedule", "milestones", &c.schedule.milestones},
      {"schedule", "milestone_unit", enum_field(&c.schedule.milestone_unit, k_milestone_units)},
      {"schedule", "gamma", &c.schedule.gamma},
      {"schedule", "min_lr", &c.schedule.min_lr},
      {"schedule", "scale_lr_with_batch", &c.schedule.scale_lr_with_batch},
      {"schedule", "reference_batch", &c.schedule.reference_batch},

      {"parallel", "algorithm", enum_field(&c.parallel.algorithm, k_algorithms)},
      {"parallel", "replicas_per_device", &c.parallel.replicas_per_device},
      {"parallel", "period", &c.parallel.period},
      {"parallel", "alpha", &c.parallel.alpha},
      {"parallel", "centre_rate", &c.parallel.centre_rate},
      {"parallel", "momentum", &c.parallel.momentum},
      {"parallel", "start_step", &c.parallel.start_step},
      {"parallel", "autotune", &c.parallel.autotune},
      {"parallel", "autotune_threshold", &c.parallel.autotune_threshold},
      {"parallel", "max_replicas_per_device", &c.parallel.max_replicas_per_device},
      {"parallel", "bucket_mb", &c.parallel.bucket_mb},
      {"parallel", "cuda_graphs", &c.parallel.cuda_graphs},
      {"parallel", "comm_precision", enum_field(&c.parallel.comm_precision, k_comm_precisions)},
      {"parallel", "device_allreduce", enum_field(&c.parallel.device_allreduce, mpi::k_allreduce_kinds)},

      {"checkpoint", "every_steps", &c.checkpoint.every_steps},
      {"checkpoint", "every_minutes", &c.checkpoint.every_minutes},
      {"checkpoint", "keep", &c.checkpoint.keep},
      {"checkpoint", "at_end", &c.checkpoint.at_end},
  };
}

std::vector<std::string> section_names(std::vector<Field>& table) {
  std::vector<std::string> out;
  for (const auto& f : table)
    if (std::find(out.begin(), out.end(), f.section) == out.end()) out.emplace_back(f.section);
  return out;
}

std::string line_of(const toml::node& n) {
  const auto& src = n.source();
  return src.begin.line > 0 ? " (line " + std::to_string(src.begin.line) + ")" : "";
}

// ---- assigning a TOML value to a field --------------------------------------------------------

// Shortest text that reads back to the same double, always with a '.' or exponent so that
// TOML sees a float.
std::string format_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// TOML reads inf and nan as floats. A non-finite rate, weight or coefficient would only show
// up as a NaN loss (or a run that never stops) later, so every float key, and every element
// of a float array, must be finite. Returns the broken rule ("key must be ...") or "".
std::string non_finite(const Field& f) {
  auto rule = [](const std::string& key, double v) {
    return key + " must be a finite number (got " + format_double(v) + ")";
  };
  if (const auto* p = std::get_if<double*>(&f.ref); p && !std::isfinite(**p)) return rule(f.full(), **p);
  if (const auto* p = std::get_if<std::vector<double>*>(&f.ref))
    for (size_t i = 0; i < (*p)->size(); ++i)
      if (!std::isfinite((**p)[i])) return rule(f.full() + "[" + std::to_string(i) + "]", (**p)[i]);
  return "";
}

std::string describe(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "string \"" + std::string(*n.value<std::string>()) + "\"";
    case toml::node_type::integer: return "integer " + std::to_string(*n.value<int64_t>());
    case toml::node_type::floating_point: {
      std::ostringstream os;
      os << *n.value<double>();
      return "number " + os.str();
    }
    case toml::node_type::boolean: return *n.value<bool>() ? "true" : "false";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

bool is_number(const toml::node& n) { return n.is_integer() || n.is_floating_point(); }

double as_double(const toml::node& n) {
  return n.is_integer() ? static_cast<double>(*n.value<int64_t>()) : *n.value<double>();
}

// Sets a key of a plain type from `n` (assign); `fail(want)` throws.
template <typename T, typename Fail>
void assign_plain(T* p, const toml::node& n, const std::string& raw, const Fail& fail) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!n.is_boolean()) fail("a boolean (true or false)");
    *p = *n.value<bool>();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (!n.is_integer()) fail("an integer");
    *p = *n.value<int64_t>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!is_number(n)) fail("a number");
    *p = as_double(n);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (n.is_string()) *p = *n.value<std::string>();
    else if (!raw.empty()) *p = raw;
    else fail("a string");
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    const auto* arr = n.as_array();
    if (!arr) fail("an array of integers");
    T out;
    for (const auto& e : *arr) {
      if (!e.is_integer()) fail("an array of integers");
      out.push_back(*e.value<int64_t>());
    }
    *p = std::move(out);
  } else {
    static_assert(std::is_same_v<T, std::vector<double>>);
    const auto* arr = n.as_array();
    if (!arr) fail("an array of numbers");
    T out;
    for (const auto& e : *arr) {
      if (!is_number(e)) fail("an array of numbers");
      out.push_back(as_double(e));
    }
    *p = std::move(out);
  }
}

// Sets the field from `n`; `raw` is the override's text (empty for file values) so that a
// string or enum key accepts unquoted text. Throws naming `origin` and the key.
void assign(const Field& f, const toml::node& n, const std::string& origin, const std::string& raw) {
  auto fail = [&](const std::string& want) {
    throw Error(origin + ": " + f.full() + " must be " + want + " (got " + describe(n) + ")" +
                (raw.empty() ? line_of(n) : ""));
  };
  if (const auto* e = std::get_if<EnumField>(&f.ref)) {
    if (n.is_string()) e->parse(*n.value<std::string>(), f.full(), origin, raw.empty() ? line_of(n) : "");
    else if (!raw.empty()) e->parse(raw, f.full(), origin, "");
    else fail("one of " + e->list());
    return;
  }
  std::visit(
      [&](auto& ref) {
        using R = std::decay_t<decltype(ref)>;
        if constexpr (std::is_same_v<R, EnumField>) return;  // assigned above
        else assign_plain(ref, n, raw, fail);
      },
      f.ref);
  if (const std::string why = non_finite(f); !why.empty())
    throw Error(origin + ": " + why + (raw.empty() ? line_of(n) : ""));
}

// ---- where each key was set -------------------------------------------------------------------

// The file (and line) or the --set override that last set a key. Kept beside the Config, not
// in it: two configs with the same values are equal however they were written, and to_toml
// writes values only.
struct SetAt {
  std::string origin;
  std::string line;  // " (line N)" for a file, empty for an override
};
using KeysSet = std::map<std::string, SetAt>;

void note_set(KeysSet* set, const Field& f, const std::string& origin, const std::string& line) {
  if (set) (*set)[f.full()] = SetAt{origin, line};
}

// The keys of one section (`body`, the TOML table of [section]), and of its sub-tables
// ([train.target]) in turn.
void apply_section(std::vector<Field>& table, const std::vector<std::string>& sections, const std::string& section,
                   const toml::table& body, const std::string& origin, KeysSet* set) {
  std::vector<std::string> known;  // this section's keys and sub-tables, for "did you mean"
  for (const auto& f : table)
    if (section == f.section) known.push_back(f.full());
  for (const auto& s : sections)
    if (s.size() > section.size() && s.rfind(section + ".", 0) == 0 && s.find('.', section.size() + 1) == s.npos)
      known.push_back(s);
  for (const auto& [key, node] : body) {
    const std::string full = section + "." + std::string(key.str());
    if (std::find(sections.begin(), sections.end(), full) != sections.end()) {
      const auto* sub = node.as_table();
      if (!sub) throw Error(origin + ": '" + full + "' must be a section ([" + full + "])" + line_of(node));
      apply_section(table, sections, full, *sub, origin, set);
      continue;
    }
    const auto it = std::find_if(table.begin(), table.end(), [&](const Field& f) { return f.full() == full; });
    if (it == table.end())
      throw Error(origin + ": unknown key '" + full + "'" + line_of(node) + did_you_mean(full, known));
    assign(*it, node, origin, "");
    note_set(set, *it, origin, line_of(node));
  }
}

void apply_table(Config& config, const toml::table& root, const std::string& origin, KeysSet* set) {
  auto table = fields(config);
  const auto sections = section_names(table);
  std::vector<std::string> top;  // [run], [train], ...: the sections a file's root holds
  for (const auto& s : sections)
    if (s.find('.') == s.npos) top.push_back(s);
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    if (std::find(top.begin(), top.end(), section) == top.end()) {
      if (!section_node.is_table())
        throw Error(origin + ": unknown key '" + section + "'" + line_of(section_node) +
                    " (keys belong in a section such as [run] or [train])");
      throw Error(origin + ": unknown section '[" + section + "]'" + line_of(section_node) +
                  did_you_mean(section, top));
    }
    const auto* body = section_node.as_table();
    if (!body) throw Error(origin + ": '" + section + "' must be a section ([" + section + "])" + line_of(section_node));
    apply_section(table, sections, section, *body, origin, set);
  }
}

// apply_override, noting in `set` (when given) that the key was set here.
void apply_override_noting(Config& config, const std::string& assignment, KeysSet* set) {
  std::string text = assignment;
  if (text.rfind("--set ", 0) == 0) text = text.substr(6);
  else if (text.rfind("--set=", 0) == 0) text = text.substr(6);
  const std::string origin = "--set " + text;
  const auto eq = text.find('=');
  const auto dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw Error(origin + ": expected section.key=value, e.g. --set optimizer.lr=0.1");
  auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t");
    const auto e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  const std::string full = trim(text.substr(0, eq));
  const std::string value = trim(text.substr(eq + 1));

  auto table = fields(config);
  const auto it = std::find_if(table.begin(), table.end(), [&](const Field& f) { return f.full() == full; });
  if (it == table.end()) {
    std::vector<std::string> all;
    for (const auto& f : table) all.push_back(f.full());
    throw Error(origin + ": unknown key '" + full + "'" + did_you_mean(full, all));
  }
  // The value is TOML value syntax; text that is not valid TOML (runs/x, lenet5) is taken as an
  // unquoted string, which only a string key accepts.
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};
  }
  const toml::node* node = parsed.get("v");
  assign(*it, *node, origin, value.empty() ? std::string(" ") : value);
  note_set(set, *it, origin, "");
}

// ---- writing TOML -----------------------------------------------------------------------------

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

template <typename T>
std::string format_plain(const T* p) {
  if constexpr (std::is_same_v<T, bool>) {
    return *p ? "true" : "false";
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return std::to_string(*p);
  } else if constexpr (std::is_same_v<T, double>) {
    return format_double(*p);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return quote(*p);
  } else {
    std::string out = "[";
    for (size_t i = 0; i < p->size(); ++i) {
      if (i) out += ", ";
      if constexpr (std::is_same_v<T, std::vector<int64_t>>) out += std::to_string((*p)[i]);
      else out += format_double((*p)[i]);
    }
    return out + "]";
  }
}

std::string format_value(const FieldRef& ref) {
  return std::visit(
      [](const auto& r) -> std::string {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, EnumField>) {
          return quote(r.name());
        } else {
          return format_plain(r);
        }
      },
      ref);
}

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
  if (s.kind != ScheduleKind::multistep) return "";
  const bool epochs = s.milestone_unit == MilestoneUnit::epochs;
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
  if (c.schedule.kind != ScheduleKind::cosine || c.schedule.scale_lr_with_batch || c.schedule.min_lr <= c.optimizer.lr)
    return "";
  return "schedule.min_lr = " + format_double(c.schedule.min_lr) + " is above optimizer.lr = " +
         format_double(c.optimizer.lr) +
         ": schedule.kind = cosine decays the learning rate from optimizer.lr down to schedule.min_lr; set "
         "schedule.min_lr below optimizer.lr";
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

// An unknown model name is the zoo's error to report (with its list); no key is refused for it.
bool takes_width_and_depth(const Config& c) {
  const std::string& m = c.model.name;
  return !known_model(m) || m == "resnet20" || m == "unet" || m == "deeplabv3plus";
}

bool takes_aspp_rates(const Config& c) {
  return !known_model(c.model.name) || c.model.name.rfind("deeplabv3plus", 0) == 0;
}

bool sgd(const Config& c) { return c.optimizer.name == OptimizerKind::sgd; }
bool adam_family(const Config& c) { return !sgd(c); }
bool larc(const Config& c) { return c.optimizer.larc; }
bool multistep(const Config& c) { return c.schedule.kind == ScheduleKind::multistep; }
bool cosine(const Config& c) { return c.schedule.kind == ScheduleKind::cosine; }
bool scaled_lr(const Config& c) { return c.schedule.scale_lr_with_batch; }
bool fp16(const Config& c) { return c.train.precision == Precision::fp16; }
bool sma(const Config& c) { return c.parallel.algorithm == Algorithm::sma; }
bool local_sgd(const Config& c) { return c.parallel.algorithm == Algorithm::local_sgd; }
bool has_target(const Config& c) { return c.train.target.metric != TargetMetric::none; }
bool synchronises(const Config& c) { return sma(c) || local_sgd(c); }
bool autotune(const Config& c) { return c.parallel.autotune; }
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
      {"parallel.autotune_threshold", "parallel.autotune", "true", autotune},
      {"parallel.max_replicas_per_device", "parallel.autotune", "true", caps_learners},
  };
  return rules;
}

const Field& field_named(const std::vector<Field>& table, const std::string& key) {
  const auto it = std::find_if(table.begin(), table.end(), [&](const Field& f) { return f.full() == key; });
  if (it == table.end()) throw Error("config: no key '" + key + "' in the field table");  // a typo in the rules
  return *it;
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

// ---- checking a config ----------------------------------------------------------------------

void check_values(const Config& c, const std::string& origin) {
  check_finite(c, origin);
  const Checker k{origin};
  // Enum keys need no check: their tables admit only their values.
  k.require(!c.run.dir.empty(), "run.dir", "must not be empty");
  k.non_negative(c.run.threads, "run.threads");

  k.non_negative(c.data.workers, "data.workers");
  k.positive(c.data.prefetch, "data.prefetch");
  k.non_negative(c.data.cache_mb, "data.cache_mb");
  k.non_negative(c.data.train_samples, "data.train_samples");
  k.non_negative(c.data.test_samples, "data.test_samples");
  try {
    io::netcdf_variable_map(c.data.netcdf_variables);
  } catch (const Error& e) {
    k.require(false, "data.netcdf_variables", std::string("is invalid: ") + e.what());
  }
  for (const double w : c.data.class_weights) k.non_negative(w, "data.class_weights");

  // The model zoo checks model.name against the models it has.
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
  const auto& t = c.train.target;
  k.require(t.metric == TargetMetric::none || (t.value > 0 && t.value <= 1), "train.target.value",
            std::string("must be in (0, 1] with train.target.metric = ") + k_target_metrics.name(t.metric) + " (got " +
                format_double(t.value) + ")");

  const auto& o = c.optimizer;
  k.require(std::isfinite(o.lr) && o.lr > 0, "optimizer.lr", "must be > 0 (got " + format_double(o.lr) + ")");
  k.fraction(o.momentum, "optimizer.momentum", false);
  k.require(!(o.nesterov && o.momentum == 0 && o.name == OptimizerKind::sgd), "optimizer.nesterov",
            "needs optimizer.momentum > 0");
  k.non_negative(o.weight_decay, "optimizer.weight_decay");
  k.fraction(o.beta1, "optimizer.beta1", false);
  k.fraction(o.beta2, "optimizer.beta2", false);
  k.positive(o.eps, "optimizer.eps");
  k.positive(o.larc_eta, "optimizer.larc_eta");

  const auto& s = c.schedule;
  k.non_negative(s.warmup_steps, "schedule.warmup_steps");
  k.require(s.kind != ScheduleKind::multistep || !s.milestones.empty(), "schedule.milestones",
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
  k.fraction(p.alpha, "parallel.alpha", true);
  k.fraction(p.momentum, "parallel.momentum", false);
  k.non_negative(p.centre_rate, "parallel.centre_rate");
  if (p.algorithm == Algorithm::sma) {
    const std::string why = sma_instability(p.alpha, p.centre_rate, p.momentum);
    k.require(why.empty(), why.substr(0, why.find(' ')), why.substr(why.find(' ') + 1));
  }
  k.non_negative(p.start_step, "parallel.start_step");
  k.non_negative(p.autotune_threshold, "parallel.autotune_threshold");
  k.non_negative(p.bucket_mb, "parallel.bucket_mb");
  const bool bf16_sums = p.comm_precision == CommPrecision::bf16;
  k.require(!(bf16_sums && p.algorithm == Algorithm::sma), "parallel.comm_precision",
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
  k.consistent(device_allreduce_vs_backend(c));
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------------

void apply_override(Config& config, const std::string& assignment) {
  apply_override_noting(config, assignment, nullptr);
}

namespace {

// parse_config, and for a config a user is about to train from (load_config) the check of
// keys that contradict each other too.
Config read_config(const std::string& text, const std::string& origin, const std::vector<std::string>& overrides,
                   bool refuse_contradictions) {
  Config config;
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw Error(origin + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                ": TOML syntax error: " + std::string(e.description()));
  }
  KeysSet set;
  apply_table(config, root, origin, &set);
  for (const auto& o : overrides) apply_override_noting(config, o, &set);
  const std::string where = overrides.empty() ? origin : origin + " with --set overrides";
  check_values(config, where);
  check_applicable(config, set);
  if (refuse_contradictions) check_consistent(config, where);
  return config;
}

}  // namespace

Config parse_config(const std::string& text, const std::string& origin,
                    const std::vector<std::string>& overrides) {
  return read_config(text, origin, overrides, false);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return read_config("", "<defaults>", overrides, true);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(path + ": config file not found");
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a config file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open config file");
  std::ostringstream text;
  text << in.rdbuf();
  return read_config(text.str(), path, overrides, true);
}

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

std::string to_toml(const Config& config) {
  Config copy = config;  // the field table binds non-const pointers
  auto table = fields(copy);
  std::ostringstream out;
  out << "# squall run configuration (resolved: file + --set overrides + defaults)\n";
  std::string section;
  for (const auto& f : table) {
    if (section != f.section) {
      section = f.section;
      out << (out.tellp() > 0 ? "\n" : "") << "[" << section << "]\n";
    }
    out << f.key << " = " << format_value(f.ref) << "\n";
  }
  return out.str();
}

std::vector<std::string> config_keys() {
  Config dummy;
  std::vector<std::string> out;
  for (const auto& f : fields(dummy)) out.push_back(f.full());
  return out;
}

double bucket_mb_for(const ParallelConfig& parallel, bool device_backend) {
  if (parallel.bucket_mb > 0) return parallel.bucket_mb;
  return device_backend ? 25.0 : 1.0;
}

}  // namespace squall::train
