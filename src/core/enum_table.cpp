#include "src/core/enum_table.hpp"

#include "src/core/error.hpp"
#include "src/core/suggest.hpp"

namespace squall {

void throw_unknown_name(std::string_view text, std::string_view key, std::string_view origin,
                        const std::vector<std::string>& names, std::string_view where) {
  std::string what = origin.empty() ? std::string() : std::string(origin) + ": ";
  what += std::string(key) + " must be one of " + join_names(names) + " (got \"" + std::string(text) + "\")";
  what += std::string(where) + did_you_mean(text, names);
  throw UsageError(what);
}

}  // namespace squall
