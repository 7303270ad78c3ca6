#include "mpi/device_map.hpp"

#include <map>
#include <utility>

#include "src/core/error.hpp"

namespace squall::mpi {

namespace {

std::string list_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? (ranks.size() > 2 ? ", and " : " and ") : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

std::string shared_gpus(const std::vector<RankDevice>& ranks) {
  std::map<std::pair<std::string, std::string>, std::vector<int>> by_gpu;
  std::vector<std::pair<std::string, std::string>> order;  // GPUs in order of first appearance
  for (const RankDevice& d : ranks) {
    const auto key = std::make_pair(d.host, d.bus_id);
    auto& list = by_gpu[key];
    if (list.empty()) order.push_back(key);
    list.push_back(d.rank);
  }
  std::string out;
  for (const auto& key : order) {
    const std::vector<int>& list = by_gpu[key];
    if (list.size() < 2) continue;
    if (!out.empty()) out += "; ";
    out += "ranks " + list_ranks(list) + " share GPU " + key.second + " on host " + key.first;
  }
  return out;
}

std::string encode(const RankDevice& d) { return std::to_string(d.rank) + "\t" + d.host + "\t" + d.bus_id; }

RankDevice decode_rank_device(const std::string& line) {
  const size_t a = line.find('\t');
  const size_t b = a == std::string::npos ? a : line.find('\t', a + 1);
  if (b == std::string::npos) throw Error("device map: malformed entry '" + line + "'");
  RankDevice d;
  try {
    d.rank = std::stoi(line.substr(0, a));
  } catch (const std::exception&) {
    throw Error("device map: malformed rank in '" + line + "'");
  }
  d.host = line.substr(a + 1, b - a - 1);
  d.bus_id = line.substr(b + 1);
  return d;
}

}  // namespace squall::mpi
