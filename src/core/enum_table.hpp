#pragma once
// The names of an enum's values, listed once. Everything that turns text into the enum or
// back (a config key read from TOML or --set, the list of allowed values and the
// "did you mean" of an error, to_toml, summary.json, a command-line flag) reads the same
// table, so a value cannot be allowed in one place and unknown in another.
//
//   enum class Sampling { global, local };
//   inline constexpr auto k_sampling_modes =
//       enum_table<Sampling>({{"global", Sampling::global}, {"local", Sampling::local}});
//   Sampling s = k_sampling_modes.parse(text, "data.sampling", "run.toml");
//   const char* n = k_sampling_modes.name(s);
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/suggest.hpp"

namespace squall {

template <typename E>
struct EnumName {
  const char* name = "";
  E value{};
};

// The squall::UsageError for `text` that names none of `names`:
// "<origin>: <key> must be one of a | b (got "text")<where>; did you mean 'a'?" (no
// "<origin>: " when origin is empty; `where` says where the text was, " (line 3)").
[[noreturn]] void throw_unknown_name(std::string_view text, std::string_view key, std::string_view origin,
                                     const std::vector<std::string>& names, std::string_view where = "");

template <typename E, size_t N>
class EnumTable {
 public:
  constexpr explicit EnumTable(const EnumName<E> (&entries)[N]) {
    for (size_t i = 0; i < N; ++i) m_entries[i] = entries[i];
  }

  // The value `text` names, or null (exact match: config files are case-sensitive).
  const E* find(std::string_view text) const {
    for (const auto& e : m_entries)
      if (text == e.name) return &e.value;
    return nullptr;
  }

  // The value `text` names; anything else throws squall::UsageError naming `key`, the text,
  // every allowed value and the nearest one (throw_unknown_name).
  E parse(std::string_view text, std::string_view key, std::string_view origin, std::string_view where = "") const {
    if (const E* v = find(text)) return *v;
    throw_unknown_name(text, key, origin, names(), where);
  }

  // The name of `value`; "?" for a value outside the table (a cast from a bad integer).
  const char* name(E value) const {
    for (const auto& e : m_entries)
      if (e.value == value) return e.name;
    return "?";
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : m_entries) out.emplace_back(e.name);
    return out;
  }

  // "a | b | c"
  std::string list(std::string_view separator = " | ") const { return join_names(names(), separator); }

  const std::array<EnumName<E>, N>& entries() const { return m_entries; }

 private:
  std::array<EnumName<E>, N> m_entries{};
};

// enum_table<E>({{"name", E::value}, ...}): the count is the list's.
template <typename E, size_t N>
constexpr EnumTable<E, N> enum_table(const EnumName<E> (&entries)[N]) {
  return EnumTable<E, N>(entries);
}

}  // namespace squall
