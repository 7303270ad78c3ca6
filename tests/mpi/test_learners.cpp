// The learners of several ranks, synchronised through the hierarchical allreduce: Crossbow's
// SMA against a reference the test computes for every learner of the job, step by step, and
// ssgd against one learner that trains on the job's whole batch. Runs under every np of the
// collectives suite and for ranks-per-node 1, 2 and 3.
#include <catch2/catch.hpp>

#include <algorithm>

#include <cmath>
#include <memory>

#include "mpi/allreduce.hpp"
#include "mpi/sum_check.hpp"
#include "mpi/topology.hpp"
#include "src/nn/backend.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using parallel::Algorithm;
using parallel::LearnerBatch;
using parallel::LearnerGroup;
using parallel::LearnerGroupOptions;

TEST_CASE("sma across ranks x 2 learners matches Crossbow's equations for every learner of the job", "[mpi][learners]") {
  const int k = GENERATE(1, 2, 3);
  const auto topo = mpi::Topology::create(k);
  const int ranks = topo.world_size(), me = topo.rank();
  mpi::AllreduceOptions ar_options;
  ar_options.chunk_bytes = 16;  // several pipeline chunks even for this tiny model
  // With SQUALL_CHECK_SUMS=1 (the MPI tests' environment), every sum is compared across ranks.
  const auto ar = mpi::with_sum_check(std::make_unique<mpi::HierAllreduce>(topo, ar_options), topo.world(), ar_options);
  mpi::Allreduce& reducer = *ar;
  auto backend = test::make_test_backend(1);
  const int L = 2;
  const int64_t b = 3;
  const double alpha = 0.15, mu = 0.8, lr = 0.25;
  LearnerGroupOptions o;
  o.algorithm = Algorithm::sma;
  o.learners = L;
  o.ranks = ranks;
  o.rank = me;
  o.alpha = alpha;
  o.momentum = mu;
  o.period = 1;
  LearnerGroup group(*backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o, reducer);

  const int n = ranks * L;  // learners in the job; learner (r, j) is n-index r*L + j
  const std::vector<float> z0 = test::on_host(group.central_params(), test::k_tiny_arena);
  std::vector<double> z(z0.begin(), z0.end()), z_prev = z;
  std::vector<std::vector<double>> w(static_cast<size_t>(n), z);
  for (int64_t step = 0; step < 5; ++step) {
    const test::TinyStep mine = test::tiny_step(me, L, step, b);
    group.step(mine.inputs, step, static_cast<float>(lr));

    std::vector<double> sum_w(z.size(), 0.0);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < z.size(); ++i) sum_w[i] += w[q][i];
    for (int q = 0; q < n; ++q) {
      const auto g = test::tiny_gradient(w[q], test::tiny_batch(q / L, q % L, step, b));
      for (size_t i = 0; i < z.size(); ++i) w[q][i] = w[q][i] - alpha * (w[q][i] - z[i]) - lr * g[i];
    }
    std::vector<double> z_new(z.size());
    // The centre moves by beta = min(alpha n, 1) towards the learners' mean: Crossbow's sum of
    // corrections while alpha n <= 1 (up to 3 ranks x 2 learners here),
    // capped beyond (4 ranks).
    const double beta = std::min(alpha * n, 1.0);
    for (size_t i = 0; i < z.size(); ++i) z_new[i] = z[i] + beta * (sum_w[i] / n - z[i]) + mu * (z[i] - z_prev[i]);
    z_prev = z;
    z = z_new;
    INFO("ranks " << ranks << " K " << k << " step " << step);
    for (int j = 0; j < L; ++j) CHECK(test::max_diff(group.replica_params(j), w[static_cast<size_t>(me * L + j)]) < 1e-5);
    CHECK(test::max_diff(group.central_params(), z) < 1e-5);
  }
}

TEST_CASE("ssgd across ranks x 2 learners equals one learner on the job's whole batch", "[mpi][learners]") {
  const int k = GENERATE(1, 2, 3);
  // Buckets of 3 floats: the bias (3, last) and the weight (12) go to the allreduce separately while
  // the backward pass runs; the default: one bucket.
  const size_t bucket = GENERATE(size_t{3}, size_t{1} << 18);
  const auto topo = mpi::Topology::create(k);
  const int ranks = topo.world_size(), me = topo.rank();
  const auto ar = mpi::with_sum_check(std::make_unique<mpi::HierAllreduce>(topo), topo.world(), {});
  mpi::Allreduce& reducer = *ar;
  mpi::OneRankAllreduce alone;
  auto backend = test::make_test_backend(1);
  const int L = 2;
  const int64_t b = 2;
  optim::OptimizerConfig sgd = test::plain_sgd();
  sgd.momentum = 0.9;
  LearnerGroupOptions o;
  o.learners = L;
  o.ranks = ranks;
  o.rank = me;
  o.bucket_floats = bucket;
  LearnerGroup group(*backend, test::make_tiny_graph, b, b, sgd, {}, o, reducer);
  const int64_t big = b * L * ranks;
  LearnerGroup whole(*backend, test::make_tiny_graph, big, big, sgd, {}, LearnerGroupOptions{}, alone);
  for (int64_t step = 0; step < 4; ++step) {
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
    const std::vector<double> want(whole_host.begin(), whole_host.end());
    INFO("ranks " << ranks << " K " << k << " bucket " << bucket << " step " << step);
    CHECK(test::max_diff(group.central_params(), want) < 1e-6);
    for (int j = 1; j < L; ++j) CHECK(test::max_diff(group.replica_params(j), want) < 1e-6);
  }
  CHECK(group.buckets() == (bucket == 3 ? 2u : 1u));
}

TEST_CASE("ssgd with bf16 gradient sums stays within bf16's rounding of the f32 sums", "[mpi][learners]") {
  const int k = GENERATE(1, 2);
  const auto topo = mpi::Topology::create(k);
  const int ranks = topo.world_size(), me = topo.rank();
  mpi::AllreduceOptions ar_options;
  ar_options.chunk_bytes = 16;
  // With SQUALL_CHECK_SUMS=1 (the MPI tests' environment), every sum is compared across ranks.
  const auto ar = mpi::with_sum_check(std::make_unique<mpi::HierAllreduce>(topo, ar_options), topo.world(), ar_options);
  mpi::Allreduce& reducer = *ar;
  auto backend = test::make_test_backend(1);
  const int L = 2;
  const int64_t b = 3;
  LearnerGroupOptions o;
  o.algorithm = Algorithm::ssgd;
  o.learners = L;
  o.ranks = ranks;
  o.rank = me;
  o.bucket_floats = 4;  // several buckets, each summed in bf16
  LearnerGroupOptions o16 = o;
  o16.bf16_gradients = true;
  LearnerGroup g32(*backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o, reducer);
  LearnerGroup g16(*backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o16, reducer);
  const size_t P = test::k_tiny_arena;
  const auto initial = test::on_host(g32.central_params(), P);
  for (int64_t step = 0; step < 6; ++step) {
    const test::TinyStep mine = test::tiny_step(me, L, step, b);
    g32.step(mine.inputs, step, 0.3f);
    g16.step(mine.inputs, step, 0.3f);
  }
  const auto p32 = test::on_host(g32.central_params(), P), p16 = test::on_host(g16.central_params(), P);
  double moved = 0, diff = 0;
  for (size_t i = 0; i < P; ++i) {
    moved = std::max(moved, std::abs(double(p32[i]) - initial[i]));
    diff = std::max(diff, std::abs(double(p16[i]) - p32[i]));
  }
  INFO("ranks " << ranks << " K " << k << ": moved " << moved << ", bf16 differs by " << diff);
  CHECK(moved > 0.05);
  // Each update is lr x a gradient rounded to bf16 (8 bits) per addition: a few parts in 256.
  CHECK(diff < 0.02 * moved);
  if (ranks > 1) CHECK(diff > 0);  // the sums really were bf16
}
