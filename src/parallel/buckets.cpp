#include "src/parallel/buckets.hpp"

#include <string>

#include "src/core/error.hpp"

namespace squall::parallel {

std::vector<std::pair<size_t, size_t>> plan_buckets(const std::vector<size_t>& offsets, size_t total,
                                                    size_t bucket_floats) {
  for (size_t i = 0; i < offsets.size(); ++i)
    if (offsets[i] > total || (i > 0 && offsets[i] < offsets[i - 1]) || (i == 0 && offsets[0] != 0))
      throw Error("gradient buckets: tensor " + std::to_string(i) + " starts at float " + std::to_string(offsets[i]) +
                  ", out of order in an arena of " + std::to_string(total));
  std::vector<std::pair<size_t, size_t>> buckets;
  size_t hi = total;
  for (size_t i = offsets.size(); i-- > 0;) {
    const size_t lo = offsets[i];
    if (hi - lo >= bucket_floats || i == 0) {
      if (hi > lo) buckets.push_back({lo, hi});
      hi = lo;
    }
  }
  return buckets;
}

}  // namespace squall::parallel
