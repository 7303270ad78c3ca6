// covered_seconds (src/core/clock.hpp): the wall time of overlapping intervals, which the
// gradient buckets' exposed and hidden allreduce time is made of; ScopedSpan, which times the
// learner group's phases by the scope they run in.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <utility>
#include <vector>

#include "src/core/clock.hpp"

using squall::covered_seconds;
using squall::ScopedSpan;
using squall::steady_seconds;

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

namespace {

using Spans = std::vector<std::pair<double, double>>;

// Makes a span while an exception unwinds past it: the span belongs to the destructor's own
// scope, which ends normally, so it records.
struct SpanInDestructor {
  Spans* spans;
  ~SpanInDestructor() {
    const ScopedSpan span([this](double t0, double t1) { spans->emplace_back(t0, t1); });
  }
};

}  // namespace

TEST_CASE("ScopedSpan reports its scope's begin and end once, when the scope ends", "[clock]") {
  Spans spans;
  const double before = steady_seconds();
  double inside_begin = 0, inside_end = 0;
  {
    const ScopedSpan span([&](double t0, double t1) { spans.emplace_back(t0, t1); });
    inside_begin = steady_seconds();
    while (steady_seconds() == inside_begin) {
    }
    inside_end = steady_seconds();
    CHECK(spans.empty());
  }
  const double after = steady_seconds();
  REQUIRE(spans.size() == 1);
  CHECK(spans[0].first >= before);
  CHECK(spans[0].first <= inside_begin);
  CHECK(spans[0].second >= inside_end);
  CHECK(spans[0].second <= after);
  CHECK(spans[0].second > spans[0].first);
}

TEST_CASE("ScopedSpan records nothing for a scope an exception leaves", "[clock]") {
  Spans spans;
  CHECK_THROWS_AS(
      [&] {
        const ScopedSpan span([&](double t0, double t1) { spans.emplace_back(t0, t1); });
        throw std::runtime_error("the timed work failed");
      }(),
      std::runtime_error);
  CHECK(spans.empty());
  // A span made while another exception is already in flight still records its own scope.
  CHECK_THROWS_AS(
      [&] {
        const SpanInDestructor guard{&spans};
        throw std::runtime_error("unwinding");
      }(),
      std::runtime_error);
  CHECK(spans.size() == 1);
}

TEST_CASE("what a ScopedSpan's recorder throws reaches the caller", "[clock]") {
  CHECK_THROWS_WITH(
      [] {
        const ScopedSpan span([](double, double) { throw std::runtime_error("the recorder failed"); });
      }(),
      "the recorder failed");
}
