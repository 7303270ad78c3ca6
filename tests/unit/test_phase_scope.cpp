// GroupCore::phase_scope (src/parallel/group_core.hpp), which times the learner group's phases:
// the timeline gets the scope's span under the phase's name, and an allreduce's seconds, the
// same span's, land in the step's wait for it (reduce_s).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/nn/backend.hpp"
#include "src/parallel/group_core.hpp"

using namespace squall;
using namespace squall::parallel;

namespace {

struct Phase {
  std::string name;
  int learner;
  double t0, t1;
};

}  // namespace

TEST_CASE("a phase scope puts one span on the timeline and the same seconds in its counter",
          "[learners][timeline]") {
  auto backend = std::make_unique<squall::cpu::CpuBackend>(1);
  const LearnerGroupOptions options;
  GroupCore core(*backend, options);
  std::vector<Phase> phases;
  core.hook = [&](const char* name, int learner, double t0, double t1) { phases.push_back({name, learner, t0, t1}); };
  core.reduce_s = 0.25;  // earlier steps' wait: added to, not replaced
  {
    const auto span = core.phase_scope("allreduce", &core.reduce_s);
    const double begin = steady_seconds();
    while (steady_seconds() == begin) {
    }
    CHECK(phases.empty());
  }
  REQUIRE(phases.size() == 1);
  CHECK(phases[0].name == "allreduce");
  CHECK(phases[0].learner == -1);
  CHECK(phases[0].t1 > phases[0].t0);
  CHECK(core.reduce_s == 0.25 + (phases[0].t1 - phases[0].t0));
  // A phase without a counter, and the step's host wait, touch no counter.
  { const auto span = core.phase_scope("update"); }
  core.host_wait();
  REQUIRE(phases.size() == 3);
  CHECK(phases[1].name == "update");
  CHECK(phases[2].name == "host_wait");
  CHECK(core.host_waits == 1);
  CHECK(core.reduce_s == 0.25 + (phases[0].t1 - phases[0].t0));
  CHECK(core.overlapped_s == 0.0);
}

TEST_CASE("a phase scope without a timeline still adds its seconds", "[learners][timeline]") {
  auto backend = std::make_unique<squall::cpu::CpuBackend>(1);
  const LearnerGroupOptions options;
  GroupCore core(*backend, options);
  const double before = steady_seconds();
  {
    const auto span = core.phase_scope("allreduce", &core.reduce_s);
    const double begin = steady_seconds();
    while (steady_seconds() == begin) {
    }
  }
  const double after = steady_seconds();
  CHECK(core.reduce_s > 0.0);
  CHECK(core.reduce_s <= after - before);
}
