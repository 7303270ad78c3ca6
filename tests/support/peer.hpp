#pragma once
// Reference data written by a PyTorch script (tests/peer/*.py) for a peer test to compare
// against. A case directory holds manifest.json:
//   {"cases": [{"name": "conv3x3_s2", "params": {...},
//               "tensors": {"x": {"file": "conv3x3_s2.x.f32", "shape": [2,3,8,8]}, ...}}]}
// and one raw little-endian float32 file per tensor (int tensors are stored as float32).
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace squall::test {

struct PeerTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct PeerCase {
  std::string name;
  nlohmann::json params;
  std::map<std::string, PeerTensor> tensors;
  const PeerTensor& at(const std::string& key) const;  // throws naming the case and key
};

// Loads every case of dir/manifest.json.
std::vector<PeerCase> load_peer_cases(const std::string& dir);

// Largest |a - b| / (atol + rtol |b|) over the elements; <= 1 means "close".
double closeness(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol);

}  // namespace squall::test
