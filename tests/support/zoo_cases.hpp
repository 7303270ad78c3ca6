#pragma once
// Every model of the zoo at a small input, for tests that build each one and compare two ways
// of computing it (gradient aliases, activation memory).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/nn/graph.hpp"

namespace squall::test {

struct ZooCase {
  std::string name;
  nn::Shape sample;  // one sample, batch 1
  int64_t width;     // model.width (0: the model's own)
};

inline const std::vector<ZooCase>& small_zoo() {
  static const std::vector<ZooCase> cases{{"lenet5", nn::Shape(1, 1, 28, 28), 0},
                                          {"resnet20", nn::Shape(1, 3, 16, 16), 0},
                                          {"unet", nn::Shape(1, 4, 16, 16), 4},
                                          {"deeplabv3plus", nn::Shape(1, 4, 16, 24), 4}};
  return cases;
}

// The case's model with 3 classes, unbuilt, its activations of type t in layout l.
inline std::unique_ptr<nn::Graph> make_zoo_model(const ZooCase& c, nn::DType t, nn::Layout l) {
  nn::ModelSpec spec;
  spec.name = c.name;
  spec.classes = 3;
  spec.width = c.width;
  auto g = nn::make_model(spec, c.sample);
  g->set_dtype(t);
  g->set_layout(l);
  return g;
}

}  // namespace squall::test
