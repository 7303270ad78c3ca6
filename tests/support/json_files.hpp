#pragma once
// The JSON files a run leaves, read by the tests: summary.json (one object) and metrics.jsonl
// (one object a line). A file that is missing or not JSON throws, naming it, and Catch reports
// the exception as the test's failure.
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace squall::test {

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path.string() + ": not JSON: " + e.what());
  }
}

// Every line of a JSON-lines file, or those whose "kind" is `kind` when one is given.
inline std::vector<nlohmann::json> read_records(const std::filesystem::path& path, const std::string& kind = "") {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) throw std::runtime_error(path.string() + ": a line is not JSON: " + line);
    if (kind.empty() || j.value("kind", "") == kind) out.push_back(std::move(j));
  }
  return out;
}

// (step, loss) of every train record of a run dir's metrics.jsonl, in file order.
inline std::vector<std::pair<int64_t, double>> train_losses(const std::filesystem::path& run_dir) {
  std::vector<std::pair<int64_t, double>> out;
  for (const nlohmann::json& j : read_records(run_dir / "metrics.jsonl", "train"))
    out.emplace_back(j.at("step").get<int64_t>(), j.at("loss").get<double>());
  return out;
}

}  // namespace squall::test
