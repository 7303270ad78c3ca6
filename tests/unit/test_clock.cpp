// covered_seconds (src/core/clock.hpp): the wall time of overlapping intervals, which the
// gradient buckets' exposed and hidden allreduce time is made of.
#include <catch2/catch.hpp>

#include "src/core/clock.hpp"

using squall::covered_seconds;

TEST_CASE("covered_seconds counts overlapping intervals once", "[clock]") {
  CHECK(covered_seconds({}) == 0.0);
  CHECK(covered_seconds({{1.0, 3.0}}) == Approx(2.0));
  // Three sums in flight at once, as the gradient buckets are: 1-4, 2-5 and 2.5-3 cover 1-5.
  CHECK(covered_seconds({{2.0, 5.0}, {1.0, 4.0}, {2.5, 3.0}}) == Approx(4.0));
  // Apart: both count; touching: no gap, no double count.
  CHECK(covered_seconds({{1.0, 2.0}, {3.0, 4.5}}) == Approx(2.5));
  CHECK(covered_seconds({{1.0, 2.0}, {2.0, 3.0}}) == Approx(2.0));
  // Empty and reversed intervals (a sum that ended before the passes did) count nothing.
  CHECK(covered_seconds({{3.0, 3.0}, {5.0, 4.0}}) == 0.0);
  CHECK(covered_seconds({{5.0, 4.0}, {1.0, 2.0}}) == Approx(1.0));
}
