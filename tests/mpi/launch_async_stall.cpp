// The asynchronous centre's stall guard (mpi/async_centre.hpp, AsyncCentreOptions::stall_abort_s):
// a node that waits past the stall limit for answers that never come ends the job with a message
// naming the shards still silent, instead of hanging (the hidden case of test_async_centre.cpp,
// launched here under mpiexec so that its end of the job can be observed).
#include <catch2/catch.hpp>

#include <string>

#include "tests/support/process.hpp"

using squall::test::mpiexec;
using squall::test::output_tail;
using squall::test::run_command;
using Catch::Matchers::Contains;

TEST_CASE("an asynchronous node waiting past the stall limit ends the job, naming the silent shards",
          "[launch][outer][async]") {
  const auto r = run_command("timeout 120 " + mpiexec(2) + " " + std::string(SQUALL_MPI_TESTS) +
                             " \"[.async-centre-stall]\"");
  INFO(output_tail(r));
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);  // not the timeout: the guard ended it
  const std::string all = r.out + r.err;
  CHECK_THAT(all, Contains("asynchronous outer steps: node 0 has waited "));
  CHECK_THAT(all, Contains("s (the stall limit) for the centre's shards on node(s) 0, 1, which answer once every node "
                           "has pushed"));
  CHECK_THAT(all, !Contains("the settling push was answered"));
}
