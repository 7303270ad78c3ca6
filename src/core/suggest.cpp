#include "src/core/suggest.hpp"

#include <algorithm>
#include <cctype>

namespace squall {
namespace {

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

}  // namespace

// Optimal string alignment: Levenshtein plus the swap of two neighbouring letters, the most
// common typing slip, as one edit.
size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string nearest(std::string_view wrong, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = 3;  // only near misses
  for (const auto& c : candidates) {
    const size_t d = edit_distance(wrong, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

std::string did_you_mean(std::string_view wrong, const std::vector<std::string>& candidates) {
  const std::string best = nearest(wrong, candidates);
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

std::string join_names(const std::vector<std::string>& names, std::string_view separator) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += separator;
    out += n;
  }
  return out;
}

}  // namespace squall
