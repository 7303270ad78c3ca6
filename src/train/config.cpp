#include "src/train/config.hpp"
#include "src/train/sma.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <variant>

#include "io/netcdf_file.hpp"
#include "src/core/error.hpp"
#include "src/nn/graph.hpp"

namespace squall::train {
namespace {

// ---- the field table ------------------------------------------------------------------------

using FieldRef = std::variant<bool*, int64_t*, double*, std::string*, std::vector<int64_t>*,
                              std::vector<double>*>;

struct Field {
  const char* section;
  const char* key;
  FieldRef ref;
  std::string full() const { return std::string(section) + "." + key; }
};

// Every key, in the order to_toml writes them. Binding to a Config (rather than listing member
// pointers per type) keeps the table one line per key.
std::vector<Field> fields(Config& c) {
  return {
      {"run", "dir", &c.run.dir},
      {"run", "seed", &c.run.seed},
      {"run", "backend", &c.run.backend},
      {"run", "threads", &c.run.threads},
      {"run", "cpu_streams", &c.run.cpu_streams},
      {"run", "tensorboard", &c.run.tensorboard},
      {"run", "mllog", &c.run.mllog},

      {"data", "train", &c.data.train},
      {"data", "test", &c.data.test},
      {"data", "normalize", &c.data.normalize},
      {"data", "normalization", &c.data.normalization},
      {"data", "sampling", &c.data.sampling},
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
      {"model", "layout", &c.model.layout},

      {"train", "epochs", &c.train.epochs},
      {"train", "max_steps", &c.train.max_steps},
      {"train", "batch_size", &c.train.batch_size},
      {"train", "eval_batch_size", &c.train.eval_batch_size},
      {"train", "eval_every_steps", &c.train.eval_every_steps},
      {"train", "log_every_steps", &c.train.log_every_steps},
      {"train", "precision", &c.train.precision},
      {"train", "loss_scale", &c.train.loss_scale},
      {"train", "loss_scale_window", &c.train.loss_scale_window},
      {"train", "nonfinite", &c.train.nonfinite},

      {"optimizer", "name", &c.optimizer.name},
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
      {"schedule", "kind", &c.schedule.kind},
      {"schedule", "milestones", &c.schedule.milestones},
      {"schedule", "milestone_unit", &c.schedule.milestone_unit},
      {"schedule", "gamma", &c.schedule.gamma},
      {"schedule", "min_lr", &c.schedule.min_lr},
      {"schedule", "scale_lr_with_batch", &c.schedule.scale_lr_with_batch},
      {"schedule", "reference_batch", &c.schedule.reference_batch},

      {"parallel", "algorithm", &c.parallel.algorithm},
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
      {"parallel", "comm_precision", &c.parallel.comm_precision},
      {"parallel", "device_allreduce", &c.parallel.device_allreduce},

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

// ---- "did you mean" -------------------------------------------------------------------------

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string suggestion(const std::string& wrong, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = 3;  // only near misses: a suggestion that is far off confuses more than it helps
  for (const auto& c : candidates) {
    const size_t d = edit_distance(wrong, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best.empty() ? "" : "; did you mean '" + best + "'?";
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

// Sets the field from `n`; `raw` is the override's text (empty for file values) so that a
// string key accepts unquoted text. Throws naming `origin` and the key.
void assign(const Field& f, const toml::node& n, const std::string& origin, const std::string& raw) {
  auto fail = [&](const char* want) {
    throw Error(origin + ": " + f.full() + " must be " + want + " (got " + describe(n) + ")" +
                (raw.empty() ? line_of(n) : ""));
  };
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
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
          const auto* arr = n.as_array();
          if (!arr) fail("an array of numbers");
          T out;
          for (const auto& e : *arr) {
            if (!is_number(e)) fail("an array of numbers");
            out.push_back(as_double(e));
          }
          *p = std::move(out);
        }
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

void apply_table(Config& config, const toml::table& root, const std::string& origin, KeysSet* set) {
  auto table = fields(config);
  const auto sections = section_names(table);
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      if (!section_node.is_table())
        throw Error(origin + ": unknown key '" + section + "'" + line_of(section_node) +
                    " (keys belong in a section such as [run] or [train])");
      throw Error(origin + ": unknown section '[" + section + "]'" + line_of(section_node) +
                  suggestion(section, sections));
    }
    const auto* body = section_node.as_table();
    if (!body) throw Error(origin + ": '" + section + "' must be a section ([" + section + "])" + line_of(section_node));
    std::vector<std::string> keys_here;
    for (const auto& f : table)
      if (section == f.section) keys_here.push_back(f.full());
    for (const auto& [key, node] : *body) {
      const std::string full = section + "." + std::string(key.str());
      const auto it = std::find_if(table.begin(), table.end(), [&](const Field& f) { return f.full() == full; });
      if (it == table.end())
        throw Error(origin + ": unknown key '" + full + "'" + line_of(node) + suggestion(full, keys_here));
      assign(*it, node, origin, "");
      note_set(set, *it, origin, line_of(node));
    }
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
    throw Error(origin + ": unknown key '" + full + "'" + suggestion(full, all));
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

std::string format_value(const FieldRef& ref) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
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
  void one_of(const std::string& v, const std::string& key, std::initializer_list<const char*> allowed) const {
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return;
      list += list.empty() ? "" : " | ";
      list += a;
    }
    throw Error(origin + ": " + key + " must be one of " + list + " (got \"" + v + "\")");
  }
  static std::string show(int64_t v) { return std::to_string(v); }
  static std::string show(double v) { return format_double(v); }
};

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

bool sgd(const Config& c) { return c.optimizer.name == "sgd"; }
bool adam_family(const Config& c) {
  const std::string& o = c.optimizer.name;
  return o == "adam" || o == "adamw" || o == "lamb";
}
bool larc(const Config& c) { return c.optimizer.larc; }
bool multistep(const Config& c) { return c.schedule.kind == "multistep"; }
bool cosine(const Config& c) { return c.schedule.kind == "cosine"; }
bool scaled_lr(const Config& c) { return c.schedule.scale_lr_with_batch; }
bool fp16(const Config& c) { return c.train.precision == "fp16"; }
bool sma(const Config& c) { return c.parallel.algorithm == "sma"; }
bool local_sgd(const Config& c) { return c.parallel.algorithm == "local-sgd"; }
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
      [](auto* a, auto* b) {
        if constexpr (std::is_same_v<decltype(a), decltype(b)>) return *a != *b;
        else return true;
      },
      field_named(now, key).ref, field_named(before, key).ref);
}

// The value as a message says it: text unquoted (sgd, not "sgd").
std::string plain_value(const Config& config, const std::string& key) {
  Config copy = config;
  const auto table = fields(copy);
  const FieldRef& ref = field_named(table, key).ref;
  if (const auto* p = std::get_if<std::string*>(&ref)) return **p;
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

}  // namespace

// ---- public API ---------------------------------------------------------------------------------

void apply_override(Config& config, const std::string& assignment) {
  apply_override_noting(config, assignment, nullptr);
}

Config parse_config(const std::string& text, const std::string& origin,
                    const std::vector<std::string>& overrides) {
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
  validate(config, overrides.empty() ? origin : origin + " with --set overrides");
  check_applicable(config, set);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return parse_config("", "<defaults>", overrides);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(path + ": config file not found");
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a config file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open config file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, overrides);
}

void validate(const Config& c, const std::string& origin) {
  check_finite(c, origin);
  const Checker k{origin};
  k.require(!c.run.dir.empty(), "run.dir", "must not be empty");
  k.one_of(c.run.backend, "run.backend", {"cpu", "cuda", "auto"});
  k.non_negative(c.run.threads, "run.threads");
  k.one_of(c.run.cpu_streams, "run.cpu_streams", {"inline", "async"});

  k.one_of(c.data.normalization, "data.normalization", {"zscore", "minmax"});
  k.one_of(c.data.sampling, "data.sampling", {"global", "local"});
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
  k.one_of(c.train.precision, "train.precision", {"fp32", "bf16", "fp16"});
  k.one_of(c.model.layout, "model.layout", {"auto", "nchw", "nhwc"});
  k.require(std::isfinite(c.train.loss_scale) && c.train.loss_scale > 0, "train.loss_scale",
            "must be > 0 (got " + format_double(c.train.loss_scale) + ")");
  k.positive(c.train.loss_scale_window, "train.loss_scale_window");
  k.one_of(c.train.nonfinite, "train.nonfinite", {"stop", "skip"});

  const auto& o = c.optimizer;
  k.one_of(o.name, "optimizer.name", {"sgd", "adam", "adamw", "lamb"});
  k.require(std::isfinite(o.lr) && o.lr > 0, "optimizer.lr", "must be > 0 (got " + format_double(o.lr) + ")");
  k.fraction(o.momentum, "optimizer.momentum", false);
  k.require(!(o.nesterov && o.momentum == 0 && o.name == "sgd"), "optimizer.nesterov",
            "needs optimizer.momentum > 0");
  k.non_negative(o.weight_decay, "optimizer.weight_decay");
  k.fraction(o.beta1, "optimizer.beta1", false);
  k.fraction(o.beta2, "optimizer.beta2", false);
  k.positive(o.eps, "optimizer.eps");
  k.positive(o.larc_eta, "optimizer.larc_eta");

  const auto& s = c.schedule;
  k.non_negative(s.warmup_steps, "schedule.warmup_steps");
  k.one_of(s.kind, "schedule.kind", {"constant", "multistep", "cosine"});
  k.one_of(s.milestone_unit, "schedule.milestone_unit", {"steps", "epochs"});
  k.require(s.kind != "multistep" || !s.milestones.empty(), "schedule.milestones",
            "must list at least one milestone when schedule.kind = \"multistep\"");
  for (size_t i = 0; i < s.milestones.size(); ++i) {
    k.positive(s.milestones[i], "schedule.milestones");
    k.require(i == 0 || s.milestones[i] > s.milestones[i - 1], "schedule.milestones", "must be increasing");
  }
  k.positive(s.gamma, "schedule.gamma");
  k.non_negative(s.min_lr, "schedule.min_lr");
  k.positive(s.reference_batch, "schedule.reference_batch");

  const auto& p = c.parallel;
  k.one_of(p.algorithm, "parallel.algorithm", {"ssgd", "sma", "local-sgd"});
  k.positive(p.replicas_per_device, "parallel.replicas_per_device");
  k.positive(p.period, "parallel.period");
  k.fraction(p.alpha, "parallel.alpha", true);
  k.fraction(p.momentum, "parallel.momentum", false);
  k.non_negative(p.centre_rate, "parallel.centre_rate");
  if (p.algorithm == "sma") {
    const std::string why = sma_instability(p.alpha, p.centre_rate, p.momentum);
    k.require(why.empty(), why.substr(0, why.find(' ')), why.substr(why.find(' ') + 1));
  }
  k.non_negative(p.start_step, "parallel.start_step");
  k.non_negative(p.autotune_threshold, "parallel.autotune_threshold");
  k.non_negative(p.bucket_mb, "parallel.bucket_mb");
  k.one_of(p.device_allreduce, "parallel.device_allreduce", {"host", "nccl", "device-hier"});
  k.one_of(p.comm_precision, "parallel.comm_precision", {"fp32", "bf16"});
  k.require(!(p.comm_precision == "bf16" && p.algorithm == "sma"), "parallel.comm_precision",
            "= bf16 rounds gradient sums; sma sums models, which bf16 would round to 3 significant digits: "
            "use fp32 with parallel.algorithm = sma");
  k.require(!(p.comm_precision == "bf16" && p.device_allreduce != "host"), "parallel.comm_precision",
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
