#include "tests/support/peer.hpp"

#include <cmath>
#include <fstream>
#include <stdexcept>

namespace squall::test {

const PeerTensor& PeerCase::at(const std::string& key) const {
  const auto it = tensors.find(key);
  if (it == tensors.end()) throw std::runtime_error("peer case '" + name + "' has no tensor '" + key + "'");
  return it->second;
}

std::vector<PeerCase> load_peer_cases(const std::string& dir) {
  std::ifstream mf(dir + "/manifest.json");
  if (!mf) throw std::runtime_error("cannot open " + dir + "/manifest.json");
  const auto manifest = nlohmann::json::parse(mf);
  std::vector<PeerCase> cases;
  for (const auto& c : manifest.at("cases")) {
    PeerCase pc;
    pc.name = c.at("name").get<std::string>();
    pc.params = c.value("params", nlohmann::json::object());
    for (const auto& [key, t] : c.at("tensors").items()) {
      PeerTensor pt;
      pt.shape = t.at("shape").get<std::vector<int64_t>>();
      int64_t n = 1;
      for (auto d : pt.shape) n *= d;
      pt.data.resize(static_cast<size_t>(n));
      const std::string path = dir + "/" + t.at("file").get<std::string>();
      std::ifstream f(path, std::ios::binary);
      if (!f.read(reinterpret_cast<char*>(pt.data.data()), static_cast<std::streamsize>(n * 4)))
        throw std::runtime_error("cannot read " + std::to_string(n) + " floats from " + path);
      pc.tensors.emplace(key, std::move(pt));
    }
    cases.push_back(std::move(pc));
  }
  return cases;
}

double closeness(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]) / (atol + rtol * std::fabs(static_cast<double>(b[i])));
    if (!(d <= worst)) worst = d;  // NaN propagates as "not close"
  }
  return worst;
}

}  // namespace squall::test
