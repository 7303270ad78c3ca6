// The halo exchanger (mpi/halo.hpp) under mpiexec: messages of several sizes in both directions
// round a ring of ranks, moving while the caller computes; sizes that do not match, tags and
// peers outside the communicator; exchanges dropped or outliving their exchanger; gathers.
// Every case runs with the progress thread and without it (every MPI call on the caller's
// thread, as where the library grants less than MPI_THREAD_MULTIPLE).
#include <catch2/catch.hpp>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mpi/comm.hpp"
#include "mpi/halo.hpp"
#include "src/core/error.hpp"

namespace {

using namespace squall;
using mpi::HaloExchanger;
using mpi::HaloMessage;
using Clock = std::chrono::steady_clock;

bool library_is_multiple() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level == MPI_THREAD_MULTIPLE;
}

// The byte i of what rank `from` sends in direction `dir` (0 forward, 1 back) at size `n`.
uint8_t pattern(int from, int dir, size_t n, size_t i) {
  return static_cast<uint8_t>((from * 131 + dir * 71 + static_cast<int>(n % 251) + i * 7 + i / 251) & 0xff);
}

// Arithmetic for `seconds`, with no MPI call: the caller busy with its own work. Returns the
// result so that the compiler keeps it.
double compute_for(double seconds) {
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  double x = 1.0;
  while (Clock::now() < end)
    for (int i = 0; i < 1000; ++i) x = std::sqrt(x * 1.000001 + 0.5);
  return x;
}

struct Ring {
  int rank, size, next, prev;
  explicit Ring(const mpi::Communicator& c)
      : rank(c.rank()), size(c.size()), next((c.rank() + 1) % c.size()), prev((c.rank() + c.size() - 1) % c.size()) {}
};

// One exchange round the ring at n bytes: forward to next (tag 2k), back to prev (tag 2k+1).
struct RingExchange {
  std::vector<uint8_t> to_next, to_prev, from_prev, from_next;
  std::vector<HaloMessage> sends, receives;
  RingExchange(const Ring& r, size_t n, int64_t k) : to_next(n), to_prev(n), from_prev(n, 0), from_next(n, 0) {
    for (size_t i = 0; i < n; ++i) {
      to_next[i] = pattern(r.rank, 0, n, i);
      to_prev[i] = pattern(r.rank, 1, n, i);
    }
    sends = {{r.next, 2 * k, to_next.data(), n}, {r.prev, 2 * k + 1, to_prev.data(), n}};
    receives = {{r.prev, 2 * k, from_prev.data(), n}, {r.next, 2 * k + 1, from_next.data(), n}};
  }
  // Whether what arrived is what the neighbours sent (the first wrong byte in `why`).
  bool intact(const Ring& r, std::string& why) const {
    const size_t n = to_next.size();
    for (size_t i = 0; i < n; ++i) {
      if (from_prev[i] != pattern(r.prev, 0, n, i)) {
        why = "byte " + std::to_string(i) + " of " + std::to_string(n) + " from rank " + std::to_string(r.prev);
        return false;
      }
      if (from_next[i] != pattern(r.next, 1, n, i)) {
        why = "byte " + std::to_string(i) + " of " + std::to_string(n) + " from rank " + std::to_string(r.next);
        return false;
      }
    }
    return true;
  }
};

const std::vector<size_t> k_sizes{1, 7, 4096, 65537, size_t{1} << 20};

}  // namespace

TEST_CASE("halo messages of 1 byte to 1 MiB arrive intact both ways while the caller computes", "[mpi][.halo]") {
  const mpi::Communicator world = mpi::Communicator::world();
  const Ring ring(world);
  for (const bool threaded : {true, false}) {
    INFO((threaded ? "with" : "without") << " a progress thread");
    mpi::HaloOptions options;
    options.progress_thread = threaded;
    HaloExchanger ex(world, options);
    CHECK(ex.threaded() == (threaded && library_is_multiple()));
    CHECK(ex.max_tag() >= 32767);
    double sent = 0;
    int64_t k = 0;
    for (const size_t n : k_sizes) {
      INFO(n << " bytes");
      RingExchange r(ring, n, k++);
      auto e = ex.start(r.sends, r.receives);
      if (ex.threaded()) {
        // The messages move with no MPI call on this thread: the exchange completes while it
        // computes (a minute at most, so that a broken thread fails rather than hangs).
        const auto limit = Clock::now() + std::chrono::seconds(60);
        while (!e.ready() && Clock::now() < limit) compute_for(1e-3);
        CHECK(e.ready());
      } else {
        compute_for(5e-3);
      }
      e.wait();
      std::string why;
      CHECK(r.intact(ring, why));
      INFO(why);
      sent += 2.0 * static_cast<double>(n);
    }
    const mpi::HaloTotals t = ex.totals();
    CHECK(t.exchanges == static_cast<int64_t>(k_sizes.size()));
    CHECK(t.bytes_sent == sent);
    CHECK(t.bytes_received == sent);
    CHECK(t.exposed_s >= 0);
    CHECK(t.hidden_s > 0);
  }
}

TEST_CASE("several halo exchanges in flight, waited for in any order, beside a gather", "[mpi][.halo]") {
  const mpi::Communicator world = mpi::Communicator::world();
  const Ring ring(world);
  for (const bool threaded : {true, false}) {
    INFO((threaded ? "with" : "without") << " a progress thread");
    mpi::HaloOptions options;
    options.progress_thread = threaded;
    HaloExchanger ex(world, options);
    std::vector<std::unique_ptr<RingExchange>> rings;
    std::vector<HaloExchanger::Exchange> exchanges;
    for (size_t j = 0; j < k_sizes.size(); ++j) {
      rings.push_back(std::make_unique<RingExchange>(ring, k_sizes[j], static_cast<int64_t>(j)));
      exchanges.push_back(ex.start(rings.back()->sends, rings.back()->receives));
    }
    // A gather while they are in flight: every rank's values in rank order.
    const size_t n = 5;
    std::vector<double> mine(n), all(n * static_cast<size_t>(ring.size));
    for (size_t i = 0; i < n; ++i) mine[i] = ring.rank * 1000.0 + static_cast<double>(i);
    ex.gather(mine.data(), n, all.data());
    for (int r = 0; r < ring.size; ++r)
      for (size_t i = 0; i < n; ++i) CHECK(all[static_cast<size_t>(r) * n + i] == r * 1000.0 + static_cast<double>(i));
    for (size_t j = exchanges.size(); j-- > 0;) {
      exchanges[j].wait();
      std::string why;
      CHECK(rings[j]->intact(ring, why));
      INFO(why);
    }
  }
}

TEST_CASE("a halo message of another size than its receive buffer is reported with its peer and tag",
          "[mpi][.halo]") {
  const mpi::Communicator world = mpi::Communicator::world();
  const Ring ring(world);
  for (const bool threaded : {true, false}) {
    INFO((threaded ? "with" : "without") << " a progress thread");
    mpi::HaloOptions options;
    options.progress_thread = threaded;
    HaloExchanger ex(world, options);
    // Longer than the buffer (MPI truncates it), then shorter.
    for (const size_t sent : {size_t{100}, size_t{32}}) {
      INFO("sent " << sent << " bytes into 64");
      std::vector<uint8_t> out(sent, 1), in(64, 0), good_out(16, 2), good_in(16, 0);
      const int64_t tag = sent == 100 ? 41 : 43;
      // A good message beside the bad one, which must still be completed before wait() throws.
      auto e = ex.start({{ring.next, tag, out.data(), sent}, {ring.next, 7, good_out.data(), 16}},
                        {{ring.prev, tag, in.data(), 64}, {ring.prev, 7, good_in.data(), 16}});
      const std::string want_peer = "from rank " + std::to_string(ring.prev) + " (tag " + std::to_string(tag);
      if (sent > 64)
        CHECK_THROWS_WITH(e.wait(), Catch::Contains(want_peer) && Catch::Contains("longer than the 64 bytes"));
      else
        CHECK_THROWS_WITH(e.wait(), Catch::Contains(want_peer) && Catch::Contains("carries 32 bytes") &&
                                        Catch::Contains("expects 64"));
      CHECK(good_in == std::vector<uint8_t>(16, 2));
    }
    // The exchanger goes on working after a failed exchange.
    RingExchange r(ring, 4096, 50);
    auto e = ex.start(r.sends, r.receives);
    e.wait();
    std::string why;
    CHECK(r.intact(ring, why));
  }
}

TEST_CASE("halo messages with a tag, peer or size MPI cannot carry are refused before anything is sent",
          "[mpi][.halo]") {
  const mpi::Communicator world = mpi::Communicator::world();
  HaloExchanger ex(world);
  uint8_t byte = 0;
  const int64_t ub = ex.max_tag();
  CHECK_THROWS_WITH(ex.start({{0, ub + 1, &byte, 1}}, {}),
                    Catch::Contains("halo send to rank 0 (tag " + std::to_string(ub + 1)) &&
                        Catch::Contains("MPI_TAG_UB"));
  CHECK_THROWS_WITH(ex.start({}, {{0, -1, &byte, 1}}), Catch::Contains("tag -1") && Catch::Contains("outside"));
  CHECK_THROWS_WITH(ex.start({{world.size(), 3, &byte, 1}}, {}),
                    Catch::Contains("rank " + std::to_string(world.size()) + " is outside the communicator"));
  CHECK_THROWS_WITH(ex.start({{0, 3, nullptr, 8}}, {}), Catch::Contains("no buffer"));
  CHECK(ex.totals().exchanges == 0);
}

TEST_CASE("an exchange dropped without a wait, or outliving its exchanger, is still completed", "[mpi][.halo]") {
  const mpi::Communicator world = mpi::Communicator::world();
  const Ring ring(world);
  for (const bool threaded : {true, false}) {
    INFO((threaded ? "with" : "without") << " a progress thread");
    mpi::HaloOptions options;
    options.progress_thread = threaded;
    RingExchange dropped(ring, size_t{1} << 20, 1), outliving(ring, 65537, 2);
    HaloExchanger::Exchange kept;
    {
      HaloExchanger ex(world, options);
      { auto e = ex.start(dropped.sends, dropped.receives); }  // its destructor waits
      std::string why;
      CHECK(dropped.intact(ring, why));
      INFO(why);
      kept = ex.start(outliving.sends, outliving.receives);
    }  // the exchanger's destructor completes `kept`
    CHECK(kept.ready());
    kept.wait();
    std::string why;
    CHECK(outliving.intact(ring, why));
    INFO(why);
  }
}
