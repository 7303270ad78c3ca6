// docs/training.md's table of config keys ("## Keys": section | key | default | meaning) held
// against the keys the config reads (config::config_keys()): a key added to
// src/config/config_fields.cpp without a row, or a row left behind by a removed key, fails here.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "src/config/config.hpp"

namespace {

// The cells of a Markdown table row, trimmed ("| a | b |" -> {"a", "b"}).
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  size_t at = line.find('|');
  while (at != std::string::npos) {
    const size_t next = line.find('|', at + 1);
    if (next == std::string::npos) break;
    std::string cell = line.substr(at + 1, next - at - 1);
    const size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
    out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    at = next;
  }
  return out;
}

// "`name`" -> "name"; anything else -> "".
std::string code(const std::string& cell) {
  if (cell.size() < 3 || cell.front() != '`' || cell.back() != '`') return "";
  return cell.substr(1, cell.size() - 2);
}

}  // namespace

TEST_CASE("docs/training.md's key table has a row for every config key, and for no other", "[config]") {
  const std::string path = std::string(SQUALL_SOURCE_DIR) + "/docs/training.md";
  std::ifstream doc(path);
  REQUIRE(doc);
  std::vector<std::string> rows;  // "section.key", in table order
  bool in_keys = false, in_table = false, seen_table = false;
  std::string line;
  while (std::getline(doc, line)) {
    if (line.rfind("## ", 0) == 0) in_keys = line == "## Keys";
    if (!in_keys || (seen_table && !in_table)) continue;
    const std::vector<std::string> c = cells(line);
    if (!in_table) {
      in_table = c.size() == 4 && c[0] == "section" && c[1] == "key" && c[2] == "default" && c[3] == "meaning";
      seen_table = in_table;
      continue;
    }
    if (line.rfind('|', 0) != 0) {
      in_table = false;  // the table's end
      continue;
    }
    if (c.size() >= 2 && c[0].find_first_not_of("-") == std::string::npos) continue;  // |---|---|
    INFO(path << ": " << line);
    REQUIRE(c.size() == 4);
    REQUIRE_FALSE(code(c[0]).empty());  // `section`
    REQUIRE_FALSE(code(c[1]).empty());  // `key`
    rows.push_back(code(c[0]) + "." + code(c[1]));
  }
  INFO(path << ": no table with the header | section | key | default | meaning | under \"## Keys\"");
  REQUIRE(seen_table);

  const std::vector<std::string> keys = squall::config::config_keys();
  const std::set<std::string> documented(rows.begin(), rows.end()), known(keys.begin(), keys.end());
  std::string missing, unknown;
  for (const std::string& k : keys)
    if (!documented.count(k)) missing += " " + k;
  for (const std::string& r : rows)
    if (!known.count(r)) unknown += " " + r;
  CHECK(documented.size() == rows.size());  // each key once
  INFO("keys without a row in " << path << ":" << missing);
  CHECK(missing.empty());
  INFO("rows of " << path << " that are no config key:" << unknown);
  CHECK(unknown.empty());
}
