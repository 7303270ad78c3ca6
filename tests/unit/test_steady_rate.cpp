// The steady rate's arithmetic (io/records/steady_rate.hpp) on made-up step ends: which steps
// it leaves out, what it takes out of a step's time, and when it has nothing to say.
#include <catch2/catch.hpp>

#include "io/records/steady_rate.hpp"

using squall::records::SteadyRate;

TEST_CASE("steady rate: max(10, 5% of the planned steps) are left out", "[steady_rate]") {
  CHECK(SteadyRate::skip_for(1) == 10);
  CHECK(SteadyRate::skip_for(200) == 10);
  CHECK(SteadyRate::skip_for(219) == 10);
  CHECK(SteadyRate::skip_for(220) == 11);
  CHECK(SteadyRate::skip_for(1000) == 50);
}

TEST_CASE("steady rate: the steps after the skip over their own seconds", "[steady_rate]") {
  SteadyRate r;
  r.start(100);  // skip 10
  // Ten slow warm-up steps of 1 s, then 0.1 s steps of 64 samples.
  double t = 0;
  for (int i = 0; i < 10; ++i) r.step_ended(t += 1.0, 64);
  CHECK_FALSE(r.samples_per_s().has_value());
  for (int i = 0; i < 20; ++i) r.step_ended(t += 0.1, 64);
  REQUIRE(r.samples_per_s().has_value());
  CHECK(r.steps() == 20);
  CHECK(r.samples() == 20 * 64);
  CHECK(r.seconds() == Approx(2.0));
  CHECK(*r.samples_per_s() == Approx(640.0));
}

TEST_CASE("steady rate: evaluations and checkpoints between two steps are taken out", "[steady_rate]") {
  SteadyRate r;
  r.start(30);
  double t = 0;
  for (int i = 0; i < 10; ++i) r.step_ended(t += 0.5, 8);
  // An evaluation right after the last warm-up step: it falls inside the first measured step.
  r.exclude(3.0);
  r.step_ended(t += 3.0 + 0.25, 8);
  // A checkpoint and an evaluation between two later steps.
  r.exclude(1.0);
  r.exclude(2.0);
  r.step_ended(t += 3.0 + 0.25, 8);
  r.step_ended(t += 0.25, 8);
  // An evaluation after the last step belongs to no step: it changes nothing.
  r.exclude(5.0);
  CHECK(r.steps() == 3);
  CHECK(r.seconds() == Approx(0.75));
  CHECK(*r.samples_per_s() == Approx(24 / 0.75));
}

TEST_CASE("steady rate: excluded time during the warm-up is not carried past it", "[steady_rate]") {
  SteadyRate r;
  r.start(0);
  double t = 0;
  for (int i = 0; i < 9; ++i) r.step_ended(t += 0.5, 8);
  r.exclude(10.0);  // an evaluation before step 10: step 10 is a warm-up step anyway
  r.step_ended(t += 10.5, 8);
  r.step_ended(t += 0.5, 8);
  CHECK(r.seconds() == Approx(0.5));
}

TEST_CASE("steady rate: a run of no more steps than the skip has none", "[steady_rate]") {
  SteadyRate r;
  r.start(3);
  r.step_ended(1.0, 32);
  r.step_ended(2.0, 32);
  r.step_ended(3.0, 32);
  CHECK(r.skip() == 10);
  CHECK(r.steps() == 0);
  CHECK_FALSE(r.samples_per_s().has_value());
  // start() begins a new attempt: nothing of the last one remains.
  for (int i = 1; i <= 12; ++i) r.step_ended(3.0 + i, 32);
  REQUIRE(r.samples_per_s().has_value());
  r.start(3);
  CHECK(r.steps() == 0);
  CHECK_FALSE(r.samples_per_s().has_value());
}

TEST_CASE("steady rate: the learner count may change between steps", "[steady_rate]") {
  SteadyRate r;
  r.start(10);
  double t = 0;
  for (int i = 0; i < 10; ++i) r.step_ended(t += 1.0, 32);
  r.step_ended(t += 1.0, 32);
  r.exclude(4.0);  // the auto-tuner adds a learner
  r.step_ended(t += 4.0 + 1.0, 64);
  CHECK(r.samples() == 96);
  CHECK(*r.samples_per_s() == Approx(48.0));
}
