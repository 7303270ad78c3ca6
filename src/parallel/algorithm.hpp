#pragma once
// How a job's learners stay together (parallel.algorithm, docs/training.md): the learner
// group's own enum and its names, which the config reads through (src/config/config_enums.hpp).
#include <cstdint>

#include "src/core/enum_table.hpp"

namespace squall::parallel {

// parallel.algorithm: how the job's learners stay together (docs/training.md).
enum class Algorithm { ssgd, sma, local_sgd, outer };
inline constexpr auto k_algorithms = enum_table<Algorithm>({{"ssgd", Algorithm::ssgd},
                                                            {"sma", Algorithm::sma},
                                                            {"local-sgd", Algorithm::local_sgd},
                                                            {"outer", Algorithm::outer}});
inline const char* algorithm_name(Algorithm a) { return k_algorithms.name(a); }

// Where a step falls in the rounds of outer steps: its 0-based position in a round of `length`
// steps (a round ends with the step at length - 1). Algorithms without rounds: every step a
// round of one.
struct RoundSpot {
  int64_t position = 0;
  int64_t length = 1;
};

}  // namespace squall::parallel
