#include "src/config/config.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/core/error.hpp"
#include "src/core/suggest.hpp"
#include "src/config/config_fields.hpp"

namespace squall::config {
namespace {

using namespace config_detail;

// ---- where each key was set -------------------------------------------------------------------

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
  check_model_name(config, set, where);
  check_applicable(config, set);
  // parallel.period = p is [p, p]; with parallel.periods set (check_values has refused a
  // period that disagrees), period is its across: one number for the job's synchronisations.
  if (config.parallel.periods.size() == 2) config.parallel.period = config.parallel.periods[1];
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

int64_t parse_byte_size(const std::string& text, const std::string& key) {
  const auto trim = [](const std::string& t) {
    const auto b = t.find_first_not_of(" \t");
    return b == std::string::npos ? std::string() : t.substr(b, t.find_last_not_of(" \t") - b + 1);
  };
  const auto refuse = [&](const std::string& why) {
    throw Error(key + " must be a size: a number of bytes, or a number and a unit (B, kB, MB, GB, TB, KiB, MiB, " +
                "GiB, TiB) such as \"12GiB\" or \"800MB\"; " + why + " (got \"" + text + "\")");
  };
  const std::string s = trim(text);
  size_t end = 0;
  bool point = false;
  while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || (s[end] == '.' && !point))) {
    point = point || s[end] == '.';
    ++end;
  }
  if (!s.empty() && s[0] == '-') refuse("a size is not negative");
  if (end == 0 || (end == 1 && point)) refuse("it does not start with a number");
  std::string unit = trim(s.substr(end));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char ch) { return std::tolower(ch); });
  static const std::vector<std::pair<std::string, int64_t>> units{
      {"", 1},
      {"b", 1},
      {"kb", 1000},
      {"mb", 1000 * 1000},
      {"gb", int64_t{1000} * 1000 * 1000},
      {"tb", int64_t{1000} * 1000 * 1000 * 1000},
      {"kib", int64_t{1} << 10},
      {"mib", int64_t{1} << 20},
      {"gib", int64_t{1} << 30},
      {"tib", int64_t{1} << 40}};
  const auto it = std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == unit; });
  if (it == units.end()) refuse("\"" + trim(s.substr(end)) + "\" is not a unit");
  const std::string number = s.substr(0, end);
  constexpr double k_most = 9223372036854775807.0;  // 2^63 - 1, as a double rounds it: 2^63
  if (!point) {  // whole: exact in integers
    int64_t v = 0, bytes = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
    if (ec != std::errc() || ptr != number.data() + number.size() || __builtin_mul_overflow(v, it->second, &bytes))
      refuse("more than 2^63 bytes");
    return bytes;
  }
  const double v = std::strtod(number.c_str(), nullptr) * static_cast<double>(it->second);
  if (!(v < k_most)) refuse("more than 2^63 bytes");
  return static_cast<int64_t>(v);  // a fraction of a byte is dropped
}

SyncPeriods sync_periods(const ParallelConfig& parallel) {
  if (parallel.periods.size() == 2) return {parallel.periods[0], parallel.periods[1]};
  return {parallel.period, parallel.period};
}

nn::SpatialSplit spatial_split(const ParallelConfig& parallel) {
  if (parallel.spatial.size() != 2) return {};
  return {parallel.spatial[0], parallel.spatial[1]};
}

std::string periods_text(const SyncPeriods& periods) {
  return "[" + std::to_string(periods.inside) + ", " + std::to_string(periods.across) + "]";
}

double bucket_mb_for(const ParallelConfig& parallel, bool device_backend) {
  if (parallel.bucket_mb > 0) return parallel.bucket_mb;
  return device_backend ? 25.0 : 1.0;
}

}  // namespace squall::config
