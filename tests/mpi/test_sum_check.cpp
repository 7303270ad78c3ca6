// The sum check (mpi/sum_check.hpp): sums that agree pass through to the wrapped allreduce,
// and ranks that start different sums (another size, another type, or the same size under
// another name: another bucket) are stopped before the sum runs, every rank with the same
// message naming the two ranks and the two sums.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "mpi/allreduce.hpp"
#include "mpi/make_allreduce.hpp"
#include "mpi/node_sum.hpp"
#include "mpi/sum_check.hpp"
#include "mpi/topology.hpp"
#include "src/core/error.hpp"

using namespace squall;
using mpi::CheckedAllreduce;

namespace {

// Sets an environment variable for a scope, and puts back what was there (the CTest entries
// set SQUALL_CHECK_SUMS=1 for the whole binary).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (m_old)
      setenv(m_name, m_old->c_str(), 1);
    else
      unsetenv(m_name);
  }

 private:
  const char* m_name;
  std::optional<std::string> m_old;
};

std::unique_ptr<CheckedAllreduce> checked(const mpi::Topology& topo) {
  return std::make_unique<CheckedAllreduce>(std::make_unique<mpi::HierAllreduce>(topo), topo.world(), "", 60, 1800,
                                            mpi::OnMismatch::throw_error);
}

}  // namespace

TEST_CASE("the sum check passes sums that agree on to the allreduce", "[mpi][sum-check]") {
  const auto topo = mpi::Topology::create(GENERATE(1, 2));
  const int n = topo.world_size();
  auto ar = checked(topo);
  std::vector<float> x(4096), y(5);
  for (int round = 0; round < 3; ++round) {
    std::iota(x.begin(), x.end(), static_cast<float>(topo.rank()));
    std::fill(y.begin(), y.end(), 1.0f);
    const auto tx = ar->start(x.data(), x.size(), "gradients bucket 1");
    const auto ty = ar->start(y.data(), y.size(), "gradients state");
    ar->wait(ty);
    ar->wait(tx);
    // sum over r of (i + r) = n i + n (n - 1) / 2
    CHECK(x[7] == static_cast<float>(n * 7 + n * (n - 1) / 2));
    CHECK(y[4] == static_cast<float>(n));
  }
  CHECK(ar->checked() == 6);
  CHECK(ar->mode() == ar->inner().mode());
  CHECK(ar->ranks() == n);
}

TEST_CASE("ranks that start different sums are stopped with both named", "[mpi][sum-check]") {
  const auto topo = mpi::Topology::create(1);
  const int n = topo.world_size(), me = topo.rank(), last = n - 1;
  if (n == 1) {
    // Nothing to compare against: one rank's allreduce is not wrapped.
    mpi::AllreduceOptions o;
    o.check_sums = true;
    const auto ar = mpi::with_sum_check(std::make_unique<mpi::OneRankAllreduce>(), topo.world(), o);
    CHECK(dynamic_cast<CheckedAllreduce*>(ar.get()) == nullptr);
    return;
  }
  std::vector<float> x(4097, 1.0f);
  const std::string last_rank = std::to_string(last);

  SECTION("another size") {
    auto ar = checked(topo);
    ar->sum(x.data(), 16, "warm-up");  // sum 1 agrees
    CHECK_THROWS_WITH(ar->start(x.data(), me == last ? 4097 : 4096, "gradients step 3 bucket 2"),
                      "sum check: rank 0 started sum 2 'gradients step 3 bucket 2' (4096 f32) where rank " +
                          last_rank + " started sum 2 'gradients step 3 bucket 2' (4097 f32)");
  }
  SECTION("the same size, another bucket") {
    auto ar = checked(topo);
    for (int i = 0; i < 6; ++i) ar->sum(x.data(), 16, "warm-up");
    const std::string bucket = me == last ? "gradients step 3 bucket 3" : "gradients step 3 bucket 2";
    CHECK_THROWS_WITH(ar->start(x.data(), 4096, bucket),
                      "sum check: rank 0 started sum 7 'gradients step 3 bucket 2' (4096 f32) where rank " +
                          last_rank + " started sum 7 'gradients step 3 bucket 3' (4096 f32)");
  }
  SECTION("another type") {
    auto ar = checked(topo);
    std::vector<double> d(8, 1.0);
    if (me == last)
      CHECK_THROWS_WITH(ar->start(d.data(), d.size(), mpi::DType::f64, "norms"),
                        "sum check: rank 0 started sum 1 'norms' (8 f32) where rank " + last_rank +
                            " started sum 1 'norms' (8 f64)");
    else
      CHECK_THROWS_WITH(ar->start(x.data(), 8, "norms"), "sum check: rank 0 started sum 1 'norms' (8 f32) where rank " +
                                                             last_rank + " started sum 1 'norms' (8 f64)");
  }
  SECTION("a long name is cut in the message, compared whole") {
    auto ar = checked(topo);
    const std::string stem(100, 'x');
    const std::string name = stem + (me == last ? "b" : "a");
    CHECK_THROWS_WITH(ar->start(x.data(), 4, name),
                      Catch::StartsWith("sum check: rank 0 started sum 1 '" + stem.substr(0, 92) + "...' (4 f32) where rank " +
                                        last_rank + " started sum 1 '" + stem.substr(0, 92) + "...' (4 f32)"));
  }
}

TEST_CASE("make_allreduce checks the job's sums when asked, on every rank alike", "[mpi][sum-check]") {
  const auto topo = mpi::Topology::create(GENERATE(1, 2));
  const bool several = topo.world_size() > 1;
  {
    ScopedEnv env("SQUALL_CHECK_SUMS", "0");
    CHECK(dynamic_cast<CheckedAllreduce*>(mpi::make_allreduce(mpi::AllreduceKind::host, topo, 0).get()) == nullptr);
    mpi::AllreduceOptions o;
    o.check_sums = true;  // parallel.check_sums
    CHECK((dynamic_cast<CheckedAllreduce*>(mpi::make_allreduce(mpi::AllreduceKind::host, topo, 0, o).get()) !=
           nullptr) == several);
  }
  {
    // Set on one rank only, it is on for all: a check on some ranks would wait forever.
    ScopedEnv env("SQUALL_CHECK_SUMS", topo.rank() == 0 ? "1" : nullptr);
    auto ar = mpi::make_allreduce(mpi::AllreduceKind::host, topo, 0);
    CHECK((dynamic_cast<CheckedAllreduce*>(ar.get()) != nullptr) == several);
    std::vector<float> x(10, 1.0f);
    ar->sum(x.data(), x.size(), "agreed");
    CHECK(x[9] == static_cast<float>(topo.world_size()));
  }
  {
    ScopedEnv env("SQUALL_CHECK_SUMS", topo.rank() == 0 ? "yes" : "1");
    // Malformed on one rank: every rank refuses alike.
    if (several) CHECK_THROWS_AS(mpi::make_allreduce(mpi::AllreduceKind::host, topo, 0), UsageError);
    if (topo.rank() == 0)
      CHECK_THROWS_WITH(mpi::sum_check_from_environment(), "SQUALL_CHECK_SUMS must be 0 or 1, got 'yes'");
    else
      CHECK(mpi::sum_check_from_environment());
  }
  {
    // The node sum of averaging by level: checked among the node's ranks.
    mpi::AllreduceOptions o;
    o.check_sums = true;
    ScopedEnv env("SQUALL_CHECK_SUMS", nullptr);
    auto node = mpi::make_node_allreduce(topo, o);
    CHECK((dynamic_cast<CheckedAllreduce*>(node.get()) != nullptr) == (topo.local_size() > 1));
    std::vector<double> x(3, 1.0);
    node->sum(x.data(), x.size(), "node model sum step 1");
    CHECK(x[2] == static_cast<double>(topo.local_size()));
  }
}
