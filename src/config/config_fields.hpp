#pragma once
// Internal to the config's files (config.cpp: reading and writing; config_fields.cpp: the
// field table and its values; config_checks.cpp: the checks of a config): the one table of
// keys that all of them read.
#include <toml++/toml.h>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "src/config/config.hpp"

namespace squall::config::config_detail {

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
                              std::vector<double>*, std::vector<std::string>*, ByteSize*, EnumField>;

struct Field {
  const char* section;
  const char* key;
  FieldRef ref;
  std::string full() const { return std::string(section) + "." + key; }
};

// Every key, in file order, bound to `c`'s members.
std::vector<Field> fields(Config& c);
// The sections in file order ("run", ..., "train.target").
std::vector<std::string> section_names(std::vector<Field>& table);
// " (line N)" of a TOML node read from a file, "" otherwise.
std::string line_of(const toml::node& n);
// Shortest text that reads back to the same double, always with a '.' or exponent.
std::string format_double(double d);
// The broken rule ("key must be a finite number ...") of a float key or array, or "".
std::string non_finite(const Field& f);
// Sets the field from `n`; `raw` is an override's text (empty for file values), so that a
// string key accepts unquoted text. Throws naming `origin` and the key.
void assign(const Field& f, const toml::node& n, const std::string& origin, const std::string& raw);
// The value as TOML writes it.
std::string format_value(const FieldRef& ref);
// The field of "section.key"; a name not in the table is a squall::Error (a typo in the code).
const Field& field_named(const std::vector<Field>& table, const std::string& key);

// The file (and line) or the --set override that last set a key. Kept beside the Config, not
// in it: two configs with the same values are equal however they were written, and to_toml
// writes values only.
struct SetAt {
  std::string origin;
  std::string line;  // " (line N)" for a file, empty for an override
};
using KeysSet = std::map<std::string, SetAt>;

// The checks of a config (config_checks.cpp): ranges and finite values, keys that were set but
// do not apply to the chosen model, optimizer, ... (`set`: where each key was set), and keys
// that contradict each other.
void check_values(const Config& c, const std::string& origin);
void check_applicable(const Config& config, const KeysSet& set);
// model.name against the model zoo: an unknown name is refused naming where it was set (the
// file and its line, or the --set), the nearest model and the list.
void check_model_name(const Config& config, const KeysSet& set, const std::string& origin);
void check_consistent(const Config& c, const std::string& origin);

}  // namespace squall::config::config_detail
