// The field table of the config: every key bound to its member, how a TOML value is assigned
// to it and how it is written back (config_fields.hpp).
#include "src/config/config_fields.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "src/core/error.hpp"

namespace squall::config::config_detail {

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
      {"run", "memory_limit", &c.run.memory_limit},

      {"data", "train", &c.data.train},
      {"data", "test", &c.data.test},
      {"data", "normalize", &c.data.normalize},
      {"data", "normalization", enum_field(&c.data.normalization, data::k_normalization_kinds)},
      {"data", "sampling", enum_field(&c.data.sampling, input::k_sampling_modes)},
      {"data", "skip_bad_samples", &c.data.skip_bad_samples},
      {"data", "shuffle", &c.data.shuffle},
      {"data", "workers", &c.data.workers},
      {"data", "prefetch", &c.data.prefetch},
      {"data", "cache_mb", &c.data.cache_mb},
      {"data", "train_samples", &c.data.train_samples},
      {"data", "test_samples", &c.data.test_samples},
      {"data", "class_weights", &c.data.class_weights},
      {"data", "netcdf_variables", &c.data.netcdf_variables},
      {"data", "channels", &c.data.channels},
      {"data", "netcdf_labels", &c.data.netcdf_labels},
      {"data", "augment_roll", &c.data.augment_roll},
      {"data", "augment_flip", &c.data.augment_flip},
      {"data", "pad", enum_field(&c.data.pad, data::k_pad_modes)},

      {"model", "name", &c.model.name},
      {"model", "width", &c.model.width},
      {"model", "depth", &c.model.depth},
      {"model", "in_channels", &c.model.in_channels},
      {"model", "classes", &c.model.classes},
      {"model", "aspp_rates", &c.model.aspp_rates},
      {"model", "dropout", &c.model.dropout},
      {"model", "layout", enum_field(&c.model.layout, k_layout_choices)},
      {"model", "padding", enum_field(&c.model.padding, nn::k_model_paddings)},

      {"train", "epochs", &c.train.epochs},
      {"train", "max_steps", &c.train.max_steps},
      {"train", "batch_size", &c.train.batch_size},
      {"train", "eval_batch_size", &c.train.eval_batch_size},
      {"train", "eval_every_steps", &c.train.eval_every_steps},
      {"train", "log_every_steps", &c.train.log_every_steps},
      {"train", "precision", enum_field(&c.train.precision, k_precisions)},
      {"train", "cpu_precision", enum_field(&c.train.cpu_precision, k_cpu_precisions)},
      {"train", "loss_scale", &c.train.loss_scale},
      {"train", "loss_scale_window", &c.train.loss_scale_window},
      {"train", "nonfinite", enum_field(&c.train.nonfinite, k_nonfinite_policies)},
      {"train", "init_from", &c.train.init_from},
      {"train", "epoch_quorum", &c.train.epoch_quorum},

      {"train.target", "metric", enum_field(&c.train.target.metric, k_target_metrics)},
      {"train.target", "value", &c.train.target.value},

      {"optimizer", "name", enum_field(&c.optimizer.name, optim::k_optimizer_kinds)},
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
      {"schedule", "kind", enum_field(&c.schedule.kind, optim::k_schedule_kinds)},
      {"schedule", "milestones", &c.schedule.milestones},
      {"schedule", "milestone_unit", enum_field(&c.schedule.milestone_unit, optim::k_milestone_units)},
      {"schedule", "gamma", &c.schedule.gamma},
      {"schedule", "min_lr", &c.schedule.min_lr},
      {"schedule", "scale_lr_with_batch", &c.schedule.scale_lr_with_batch},
      {"schedule", "reference_batch", &c.schedule.reference_batch},

      {"parallel", "algorithm", enum_field(&c.parallel.algorithm, parallel::k_algorithms)},
      {"parallel", "replicas_per_device", &c.parallel.replicas_per_device},
      {"parallel", "period", &c.parallel.period},
      {"parallel", "periods", &c.parallel.periods},
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
      {"parallel", "cross_node", enum_field(&c.parallel.cross_node, mpi::k_cross_algorithms)},
      {"parallel", "check_sums", &c.parallel.check_sums},
      {"parallel", "spatial", &c.parallel.spatial},
      {"parallel", "halo_exchange", enum_field(&c.parallel.halo_exchange, mpi::k_halo_kinds)},
      {"parallel.outer", "period", &c.parallel.outer.period},
      {"parallel.outer", "lr", &c.parallel.outer.lr},
      {"parallel.outer", "momentum", &c.parallel.outer.momentum},
      {"parallel.outer", "nesterov", &c.parallel.outer.nesterov},
      {"parallel.outer", "start_step", &c.parallel.outer.start_step},
      {"parallel.outer", "start_fraction", &c.parallel.outer.start_fraction},
      {"parallel.outer", "qsr", &c.parallel.outer.qsr},
      {"parallel.outer", "streaming", &c.parallel.outer.streaming},
      {"parallel.outer", "async", &c.parallel.outer.async},
      {"parallel.outer", "max_staleness", &c.parallel.outer.max_staleness},

      {"checkpoint", "every_steps", &c.checkpoint.every_steps},
      {"checkpoint", "every_minutes", &c.checkpoint.every_minutes},
      {"checkpoint", "keep", &c.checkpoint.keep},
      {"checkpoint", "at_end", &c.checkpoint.at_end},

      {"elastic", "batch", enum_field(&c.elastic.batch, k_elastic_batches)},
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
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    // An override's text that is not a TOML array (U850=u@850,PSL=msl) is a comma-separated list.
    T out;
    if (const auto* arr = n.as_array()) {
      for (const auto& e : *arr) {
        if (!e.is_string()) fail("an array of strings");
        out.push_back(*e.value<std::string>());
      }
    } else if (!raw.empty() && n.is_string()) {
      const std::string text = *n.value<std::string>();
      for (size_t pos = 0; pos <= text.size();) {
        const size_t comma = std::min(text.find(',', pos), text.size());
        const std::string item = text.substr(pos, comma - pos);
        const size_t first = item.find_first_not_of(" \t");
        if (first != std::string::npos) out.push_back(item.substr(first, item.find_last_not_of(" \t") - first + 1));
        pos = comma + 1;
      }
    } else {
      fail("an array of strings");
    }
    *p = std::move(out);
  } else if constexpr (std::is_same_v<T, ByteSize>) {
    // An integer is bytes (text, with a unit, is read by assign).
    if (!n.is_integer()) fail("an integer (bytes) or a size with a unit such as \"12GiB\"");
    p->bytes = *n.value<int64_t>();
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
  if (std::holds_alternative<ByteSize*>(f.ref) && n.is_string()) {  // parse_byte_size names the key
    try {
      std::get<ByteSize*>(f.ref)->bytes = parse_byte_size(*n.value<std::string>(), f.full());
    } catch (const Error& e) {
      throw Error(origin + ": " + e.what() + (raw.empty() ? line_of(n) : ""));
    }
    return;
  }
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
  } else if constexpr (std::is_same_v<T, ByteSize>) {
    return std::to_string(p->bytes);
  } else {
    std::string out = "[";
    for (size_t i = 0; i < p->size(); ++i) {
      if (i) out += ", ";
      if constexpr (std::is_same_v<T, std::vector<int64_t>>) out += std::to_string((*p)[i]);
      else if constexpr (std::is_same_v<T, std::vector<std::string>>) out += quote((*p)[i]);
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

const Field& field_named(const std::vector<Field>& table, const std::string& key) {
  const auto it = std::find_if(table.begin(), table.end(), [&](const Field& f) { return f.full() == key; });
  if (it == table.end()) throw Error("config: no key '" + key + "' in the field table");  // a typo in the rules
  return *it;
}

}  // namespace squall::config::config_detail
