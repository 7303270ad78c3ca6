// The cross-node stage's cost model and choice (mpi/cross_algorithm.hpp) and how the
// allreduce states its rule (mpi::cross_rule): pure arithmetic, no MPI. The algorithms
// themselves run against MPI_Allreduce in tests/mpi/test_cross_node.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "mpi/allreduce.hpp"
#include "mpi/cross_algorithm.hpp"

using squall::mpi::AllreduceOptions;
using squall::mpi::choose_cross;
using squall::mpi::CrossAlgorithm;
using squall::mpi::LinkCost;

TEST_CASE("auto: halving-doubling where its log2(n) messages win, the ring where its bytes do", "[cross]") {
  const LinkCost link;  // 20 us, 10 Gbit/s
  for (double bytes : {0.0, 4e3, 64e3, 16e6}) {
    INFO(bytes << " bytes");
    // Two owners: the same exchange either way, and a tie goes to the ring.
    CHECK(choose_cross(bytes, 2, link) == CrossAlgorithm::ring);
    // Three: as many messages either way (the fold costs two), and more bytes for halving-doubling.
    CHECK(choose_cross(bytes, 3, link) == CrossAlgorithm::ring);
    // A power of two: fewer messages, the same bytes.
    for (int n : {4, 8, 1024})
      CHECK(choose_cross(bytes, n, link) == CrossAlgorithm::halving_doubling);
    // The forced algorithm whatever the cost.
    CHECK(choose_cross(bytes, 1024, link, CrossAlgorithm::ring) == CrossAlgorithm::ring);
    CHECK(choose_cross(bytes, 3, link, CrossAlgorithm::halving_doubling) == CrossAlgorithm::halving_doubling);
  }
  // 4,608 nodes (not a power of two): a 64 KiB part is 9,214 ring messages against 26.
  CHECK(choose_cross(65536, 4608, link) == CrossAlgorithm::halving_doubling);
  CHECK(squall::mpi::ring_seconds(65536, 4608, link) > 100 * squall::mpi::halving_doubling_seconds(65536, 4608, link));
  // 5 nodes: the fold's whole-part messages lose once the part is large.
  CHECK(choose_cross(4e3, 5, link) == CrossAlgorithm::halving_doubling);
  CHECK(choose_cross(1e6, 5, link) == CrossAlgorithm::ring);
}

TEST_CASE("cross_rule says what the cross-node stage does among n nodes", "[cross]") {
  AllreduceOptions o;
  o.cross_node = CrossAlgorithm::ring;
  CHECK(squall::mpi::cross_rule(o, 8) == "ring among 8 nodes (forced)");
  o.cross_node = CrossAlgorithm::halving_doubling;
  CHECK(squall::mpi::cross_rule(o, 3) == "halving-doubling among 3 nodes (forced)");
  o.cross_node = CrossAlgorithm::automatic;
  CHECK(squall::mpi::cross_rule(o, 8) == "auto among 8 nodes (link 20 us, 10 Gbit/s): halving-doubling for every part");
  CHECK(squall::mpi::cross_rule(o, 3) == "auto among 3 nodes (link 20 us, 10 Gbit/s): ring for every part");
  // 5 nodes: halving-doubling saves 2 alpha and its fold costs 1.9 bytes / bw more, so it
  // takes parts below 2 alpha bw / 1.9 bytes.
  const double threshold = 2 * o.cross_link.alpha_s * o.cross_link.bytes_per_s / 1.9;
  const std::string rule = squall::mpi::cross_rule(o, 5);
  const std::string head = "auto among 5 nodes (link 20 us, 10 Gbit/s): halving-doubling for parts below ";
  REQUIRE(rule.rfind(head, 0) == 0);
  CHECK_THAT(rule, Catch::EndsWith(" bytes, ring above"));
  CHECK(std::abs(std::stod(rule.substr(head.size())) - threshold) <= 1);
  // On either side of it, auto chooses accordingly.
  CHECK(choose_cross(threshold * 0.99, 5, o.cross_link) == CrossAlgorithm::halving_doubling);
  CHECK(choose_cross(threshold * 1.01, 5, o.cross_link) == CrossAlgorithm::ring);
  o.cross_link = {1e-6, 1.25e8};  // 1 us, 1 Gbit/s
  CHECK_THAT(squall::mpi::cross_rule(o, 6), Catch::StartsWith("auto among 6 nodes (link 1 us, 1 Gbit/s): "));
}
