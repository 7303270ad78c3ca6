// mpi::run_agreed under a real launch: every rank throws the same CollectiveError, worded from
// the lowest rank that failed, with the highest exit status; with a wording of the caller's, the
// wording gets the lowest failing rank, the count, the size and that rank's message.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "mpi/agreement.hpp"
#include "mpi/comm.hpp"
#include "src/core/error.hpp"

using squall::CollectiveError;
using squall::Error;
using squall::UsageError;
using squall::mpi::Communicator;
using squall::mpi::run_agreed;

namespace {

// What run_agreed threw on this rank: its message and exit status ("" and 0 when nothing).
struct Outcome {
  std::string message;
  int code = 0;
};

template <typename... Wording>
Outcome agreed(const Communicator& world, const std::function<void()>& work, const Wording&... wording) {
  try {
    run_agreed(world, work, wording...);
  } catch (const CollectiveError& e) {
    return {e.what(), e.exit_code()};
  }
  return {};
}

}  // namespace

TEST_CASE("run_agreed: nobody failed, nobody throws", "[mpi][agreement]") {
  const auto world = Communicator::world();
  int runs = 0;
  const Outcome o = agreed(world, [&] { ++runs; });
  CHECK(runs == 1);
  CHECK(o.message.empty());
  CHECK(o.code == 0);
}

TEST_CASE("run_agreed: a failure of every rank reads as thrown; of some ranks it names the lowest and counts the rest",
          "[mpi][agreement]") {
  const auto world = Communicator::world();
  const int n = world.size(), me = world.rank();

  const Outcome all = agreed(world, [] { throw Error("cfg.toml: config file not found"); });
  CHECK(all.message == "cfg.toml: config file not found");
  CHECK(all.code == squall::k_exit_failure);

  if (n >= 2) {  // every rank but rank 0 fails, each with its own message
    const Outcome some = agreed(world, [&] {
      if (me > 0) throw Error("disk full on rank " + std::to_string(me));
    });
    const std::string others = n > 2 ? " (and " + std::to_string(n - 2) + " other rank(s))" : "";
    CHECK(some.message == "rank 1: disk full on rank 1" + others);
    CHECK(some.code == squall::k_exit_failure);
  }

  // A usage error on one rank and a failure at run time on another: the job exits 2.
  const Outcome mixed = agreed(world, [&] {
    if (me == 0) throw UsageError("--flag: bad value");
    if (me == n - 1) throw Error("unreadable file");
  });
  // With one or two ranks every rank failed: the message reads as rank 0 threw it.
  CHECK(mixed.message == (n <= 2 ? "--flag: bad value" : "rank 0: --flag: bad value (and 1 other rank(s))"));
  CHECK(mixed.code == squall::k_exit_usage);
}

TEST_CASE("run_agreed with a wording: it gets the lowest failing rank, the count, the size and that rank's message",
          "[mpi][agreement]") {
  const auto world = Communicator::world();
  const int n = world.size(), me = world.rank();
  std::vector<std::string> calls;
  const squall::mpi::FailureWording wording = [&](int first, int failed, int size, const std::string& message) {
    calls.push_back(std::to_string(first) + "/" + std::to_string(failed) + "/" + std::to_string(size) + "/" + message);
    return "worded: " + message;
  };

  const Outcome last = agreed(world, [&] {
    if (me == n - 1) throw Error("file " + std::to_string(me));
  }, wording);
  CHECK(last.message == "worded: file " + std::to_string(n - 1));
  CHECK(last.code == squall::k_exit_failure);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0] == std::to_string(n - 1) + "/1/" + std::to_string(n) + "/file " + std::to_string(n - 1));

  // Every rank fails: the wording still gets the lowest rank (a job of one rank included).
  calls.clear();
  const Outcome every = agreed(world, [&] { throw Error("file " + std::to_string(me)); }, wording);
  CHECK(every.message == "worded: file 0");
  REQUIRE(calls.size() == 1);
  CHECK(calls[0] == "0/" + std::to_string(n) + "/" + std::to_string(n) + "/file 0");

  calls.clear();
  CHECK(agreed(world, [] {}, wording).code == 0);
  CHECK(calls.empty());
}

TEST_CASE("FlagAgreement: flags and a gathered value come back one call late, in rank order, however late each rank "
          "calls",
          "[mpi][agreement]") {
  const auto world = Communicator::world();
  const int rank = world.rank(), size = world.size();
  squall::mpi::FlagAgreement flags(world);
  std::vector<double> values;
  // Round k: rank k % size raises flag bit k % 3 and every rank posts 100 k + its rank; the
  // ranks arrive in a different order each round (a rank's delay depends on the round), so a
  // result that followed arrival rather than the call would show here.
  for (int k = 0; k < 24; ++k) {
    std::this_thread::sleep_for(std::chrono::microseconds(((rank + 1) * (k + 3) * 7919) % 5000));
    const uint64_t mine = rank == k % size ? uint64_t{1} << (k % 3) : 0;
    uint64_t got = 0;
    if (k % 8 == 7) {
      got = flags.exchange(mine);  // flags alone: the next call's values are none
    } else {
      got = flags.exchange(mine, 100.0 * k + rank, values);
      INFO("call " << k);
      if (k == 0 || k % 8 == 0) {
        CHECK(values.empty());
      } else {
        REQUIRE(std::ssize(values) == size);
        for (int r = 0; r < size; ++r) CHECK(values[static_cast<size_t>(r)] == 100.0 * (k - 1) + r);
      }
    }
    CHECK(got == (k == 0 ? 0 : uint64_t{1} << ((k - 1) % 3)));
  }
}
