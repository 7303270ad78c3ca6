// ssgd across ranks when one rank sees its buckets' events complete out of order
// (tests/support/out_of_order_backend.hpp): every rank must still start the same sums in the
// same order. The sum check is on (mpi/sum_check.hpp), so a rank that started bucket 2 where
// the others started bucket 1 ends the job with a line naming both; without the check such
// sums of tiny buckets would be blocking MPI_Allreduces of different sizes.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "mpi/allreduce.hpp"
#include "mpi/sum_check.hpp"
#include "mpi/topology.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/out_of_order_backend.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using parallel::LearnerGroup;
using parallel::LearnerGroupOptions;

TEST_CASE("ssgd across ranks starts the same bucket sums when one rank sees its events out of order",
          "[mpi][learners]") {
  const int k = GENERATE(1, 2);
  const auto topo = mpi::Topology::create(k);
  const int ranks = topo.world_size(), me = topo.rank();
  mpi::AllreduceOptions options;
  options.check_sums = true;
  const auto ar = mpi::with_sum_check(std::make_unique<mpi::HierAllreduce>(topo, options), topo.world(), options);
  if (ranks > 1) CHECK(dynamic_cast<mpi::CheckedAllreduce*>(ar.get()) != nullptr);
  // The last rank is the one whose events look complete out of order.
  const bool adversary = me == ranks - 1;
  std::unique_ptr<nn::Backend> backend;
  if (adversary)
    backend = std::make_unique<test::OutOfOrderBackend>(1);
  else
    backend = test::make_test_backend(1);
  const int L = 2;
  const int64_t b = 2;
  LearnerGroupOptions o;
  o.learners = L;
  o.ranks = ranks;
  o.rank = me;
  o.bucket_floats = 3;  // a bucket per tensor: the bias (3 floats and its padding), the weight, then the state
  LearnerGroup group(*backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o, *ar);
  mpi::OneRankAllreduce alone;
  auto plain = test::make_test_backend(1);
  const int64_t big = b * L * ranks;
  LearnerGroup whole(*plain, test::make_tiny_graph, big, big, test::plain_sgd(), {}, LearnerGroupOptions{}, alone);
  for (int64_t step = 0; step < 6; ++step) {
    const test::TinyStep mine = test::tiny_step(me, L, step, b);
    group.step(mine.inputs, step, 0.3f);
    test::TinyBatch all;
    for (int q = 0; q < L * ranks; ++q) {
      const auto d = test::tiny_batch(q / L, q % L, step, b);
      all.images.insert(all.images.end(), d.images.begin(), d.images.end());
      all.labels.insert(all.labels.end(), d.labels.begin(), d.labels.end());
    }
    whole.step({{all.images.data(), all.labels.data()}}, step, 0.3f);
    const std::vector<float> whole_host = test::on_host(whole.central_params(), test::k_tiny_arena);
    INFO("ranks " << ranks << " K " << k << " step " << step << (adversary ? " (out of order here)" : ""));
    CHECK(test::max_diff(group.central_params(), std::vector<double>(whole_host.begin(), whole_host.end())) < 1e-6);
  }
  if (ranks > 1) {
    CHECK(group.buckets() == 2u);
    // Six steps of two buckets and the state part, each compared across the ranks.
    CHECK(dynamic_cast<mpi::CheckedAllreduce&>(*ar).checked() == 6 * 3);
    // The adversary had its chance: a bucket's event was said not to be complete while a
    // later one's on the group stream (the first stream its backend made) was.
    if (adversary) CHECK(dynamic_cast<test::OutOfOrderBackend&>(*backend).held_on_stream(0) > 0);
  }
}
