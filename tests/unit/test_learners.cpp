// The learners of one rank: each algorithm against a reference written out in the test
// (Crossbow's SMA equations, ssgd against one large batch, local SGD's averaging), the
// central model and its averaged BatchNorm statistics, and adding a learner mid-run.
// tests/mpi/test_learners.cpp runs the same checks across ranks.
#include <catch2/catch.hpp>

#include <algorithm>

#include <cmath>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using parallel::Algorithm;
using parallel::LearnerBatch;
using parallel::LearnerGroup;
using parallel::LearnerGroupOptions;

namespace {

std::vector<double> to_double(const float* p, size_t n) {
  const std::vector<float> host = test::on_host(p, n);
  return std::vector<double>(host.begin(), host.end());
}

}  // namespace

TEST_CASE("sma on one rank follows Crossbow's equations step by step", "[learners]") {
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  const int L = 3;
  const int64_t b = 4;
  const double alpha = 0.2, mu = 0.7, lr = 0.3;
  const int64_t period = GENERATE(1, 2);
  LearnerGroupOptions o;
  o.algorithm = Algorithm::sma;
  o.learners = L;
  o.alpha = alpha;
  o.momentum = mu;
  o.period = period;
  LearnerGroup group(*backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o, alone);
  REQUIRE(group.parameter_count() == test::k_tiny_params);
  REQUIRE(group.param_arena_floats() == test::k_tiny_arena);
  REQUIRE(group.replica_graph(0).param_info()[0].name.find("weight") != std::string::npos);

  // Every replica starts as the central model.
  std::vector<double> z = to_double(group.central_params(), test::k_tiny_arena), z_prev = z;
  std::vector<std::vector<double>> w(L, z);
  for (int j = 0; j < L; ++j) REQUIRE(test::max_diff(group.replica_params(j), z) == 0.0);

  for (int64_t step = 0; step < 6; ++step) {
    const test::TinyStep batches = test::tiny_step(0, L, step, b);
    const auto& data = batches.data;
    group.step(batches.inputs, step, static_cast<float>(lr));

    std::vector<std::vector<double>> g;
    for (int j = 0; j < L; ++j) g.push_back(test::tiny_gradient(w[j], data[j]));
    if ((step + 1) % period == 0) {
      std::vector<double> sum_w(z.size(), 0.0);
      for (int j = 0; j < L; ++j)
        for (size_t i = 0; i < z.size(); ++i) sum_w[i] += w[j][i];
      for (int j = 0; j < L; ++j)
        for (size_t i = 0; i < z.size(); ++i) w[j][i] = w[j][i] - alpha * (w[j][i] - z[i]) - lr * g[j][i];
      std::vector<double> z_new(z.size());
      // alpha L = 0.6 <= 1: the centre moves by Crossbow's sum of the corrections.
      const double beta = std::min(alpha * L, 1.0);
      for (size_t i = 0; i < z.size(); ++i) z_new[i] = z[i] + beta * (sum_w[i] / L - z[i]) + mu * (z[i] - z_prev[i]);
      z_prev = z;
      z = z_new;
    } else {
      for (int j = 0; j < L; ++j)
        for (size_t i = 0; i < z.size(); ++i) w[j][i] -= lr * g[j][i];
    }
    INFO("period " << period << " step " << step);
    for (int j = 0; j < L; ++j) CHECK(test::max_diff(group.replica_params(j), w[j]) < 1e-5);
    CHECK(test::max_diff(group.central_params(), z) < 1e-5);
  }
  // The replicas moved apart and the central model moved: the check above was not vacuous.
  CHECK(test::max_diff(group.replica_params(0), group.replica_params(1), test::k_tiny_arena) > 1e-4);
  CHECK(test::max_diff(group.central_params(), z_prev) > 1e-5);
}

TEST_CASE("ssgd: L learners of batch b equal one learner of batch L*b on the same samples", "[learners]") {
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  const int L = 3;
  const int64_t b = 4;
  optim::OptimizerConfig sgd = test::plain_sgd();
  sgd.momentum = 0.9;
  sgd.weight_decay = 1e-3;

  SECTION("tiny model") {
    LearnerGroupOptions many, one;
    many.learners = L;
    LearnerGroup split(*backend, test::make_tiny_graph, b, b, sgd, {}, many, alone);
    LearnerGroup whole(*backend, test::make_tiny_graph, L * b, L * b, sgd, {}, one, alone);
    for (int64_t step = 0; step < 5; ++step) {
      const test::TinyStep batches = test::tiny_step(0, L, step, b);
      test::TinyBatch all;
      for (const auto& d : batches.data) {
        all.images.insert(all.images.end(), d.images.begin(), d.images.end());
        all.labels.insert(all.labels.end(), d.labels.begin(), d.labels.end());
      }
      const auto l_split = split.step(batches.inputs, step, 0.2f);
      const auto l_whole = whole.step({{all.images.data(), all.labels.data()}}, step, 0.2f);
      double mean = 0;
      for (float l : l_split) mean += l / L;
      CHECK(mean == Approx(l_whole[0]).epsilon(1e-5));
      CHECK(test::max_diff(split.central_params(), whole.central_params(), test::k_tiny_arena) < 1e-6);
      for (int j = 1; j < L; ++j)  // every replica is the central model
        CHECK(test::max_diff(split.replica_params(j), split.central_params(), test::k_tiny_arena) == 0.0);
    }
  }

  SECTION("lenet5") {
    nn::ModelSpec spec;
    spec.name = "lenet5";
    const nn::Shape sample(1, 1, 28, 28);
    auto make = [&] { return nn::make_model(spec, sample); };
    LearnerGroupOptions many, one;
    many.learners = 2;
    LearnerGroup split(*backend, make, b, b, sgd, {}, many, alone);
    LearnerGroup whole(*backend, make, 2 * b, 2 * b, sgd, {}, one, alone);
    std::vector<float> images(static_cast<size_t>(2 * b * 28 * 28));
    std::vector<int32_t> labels(static_cast<size_t>(2 * b));
    const std::vector<double> before = to_double(whole.central_params(), whole.param_arena_floats());
    for (int64_t step = 0; step < 3; ++step) {
      for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(std::sin(0.01 * i + step));
      for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 3 + step) % 10);
      const size_t half = images.size() / 2;
      split.step({{images.data(), labels.data()}, {images.data() + half, labels.data() + b}}, step, 0.05f);
      whole.step({{images.data(), labels.data()}}, step, 0.05f);
    }
    CHECK(test::max_diff(split.central_params(), whole.central_params(), whole.param_arena_floats()) < 1e-5);
    CHECK(test::max_diff(whole.central_params(), before) > 1e-4);  // it trained
  }
}

TEST_CASE("local-sgd: ssgd before start_step, then replicas replaced by their average every period", "[learners]") {
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  const int L = 2;
  const int64_t b = 3;
  LearnerGroupOptions o;
  o.algorithm = Algorithm::local_sgd;
  o.learners = L;
  o.period = 3;
  o.start_step = 2;
  LearnerGroup group(*backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o, alone);
  std::vector<std::vector<double>> w(L, to_double(group.central_params(), test::k_tiny_arena));
  const double lr = 0.4;
  for (int64_t step = 0; step < 8; ++step) {
    const test::TinyStep batches = test::tiny_step(0, L, step, b);
    const auto& data = batches.data;
    group.step(batches.inputs, step, static_cast<float>(lr));
    std::vector<std::vector<double>> g;
    for (int j = 0; j < L; ++j) g.push_back(test::tiny_gradient(w[j], data[j]));
    if (step < o.start_step) {  // synchronous: the mean gradient everywhere
      for (size_t i = 0; i < w[0].size(); ++i) {
        const double mean = (g[0][i] + g[1][i]) / 2;
        for (int j = 0; j < L; ++j) w[j][i] -= lr * mean;
      }
    } else {
      for (int j = 0; j < L; ++j)
        for (size_t i = 0; i < w[j].size(); ++i) w[j][i] -= lr * g[j][i];
      if ((step - o.start_step + 1) % o.period == 0)
        for (size_t i = 0; i < w[0].size(); ++i) w[0][i] = w[1][i] = (w[0][i] + w[1][i]) / 2;
    }
    INFO("step " << step);
    for (int j = 0; j < L; ++j) CHECK(test::max_diff(group.replica_params(j), w[j]) < 1e-5);
    const bool synced = step < o.start_step || (step - o.start_step + 1) % o.period == 0;
    if (synced) CHECK(test::max_diff(group.central_params(), w[0]) < 1e-5);
    else CHECK(test::max_diff(group.replica_params(0), group.replica_params(1), test::k_tiny_arena) > 1e-6);
  }
}

TEST_CASE("the central model's BatchNorm statistics are the learners' average", "[learners]") {
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  auto make = [] {
    auto g = std::make_unique<nn::Graph>(nn::Shape(1, 2, 2, 2));
    const int bn = g->add("bn", nn::batch_norm(), nn::Graph::k_input);
    const int f = g->add("flatten", nn::flatten(), bn);
    g->set_output(g->add("fc", nn::linear(3), f));
    return g;
  };
  const int64_t b = 4;
  const auto algorithm = GENERATE(Algorithm::ssgd, Algorithm::sma, Algorithm::local_sgd);
  LearnerGroupOptions o;
  o.algorithm = algorithm;
  o.learners = 2;
  LearnerGroup group(*backend, make, b, b, test::plain_sgd(), {}, o, alone);
  REQUIRE(group.state_value_count() > 0);
  std::vector<float> images(static_cast<size_t>(2 * b * 8));
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i < images.size() / 2 ? std::sin(i) : 3 + std::cos(i));
  std::vector<int32_t> labels = {0, 1, 2, 0, 1, 2, 0, 1};
  const auto before = to_double(group.central_state(), group.state_arena_floats());
  group.step({{images.data(), labels.data()}, {images.data() + b * 8, labels.data() + b}}, 0, 0.1f);
  // Recompute what each learner's running statistics became from its own batch: run one
  // more learner-free check by comparing against two single-learner groups.
  LearnerGroupOptions single;
  single.algorithm = Algorithm::sma;  // keeps its replica's state apart from the central one
  LearnerGroup a(*backend, make, b, b, test::plain_sgd(), {}, single, alone), c(*backend, make, b, b, test::plain_sgd(), {}, single, alone);
  a.step({{images.data(), labels.data()}}, 0, 0.1f);
  c.step({{images.data() + b * 8, labels.data() + b}}, 0, 0.1f);
  const size_t n = group.state_arena_floats();
  std::vector<double> want(n);
  const auto sa = test::on_host(a.replica_graph(0).state(), n), sc = test::on_host(c.replica_graph(0).state(), n);
  for (size_t i = 0; i < n; ++i) want[i] = (sa[i] + sc[i]) / 2.0;
  INFO("algorithm " << parallel::algorithm_name(algorithm));
  CHECK(test::max_diff(group.central_state(), want) < 1e-6);
  CHECK(test::max_diff(group.central_state(), before) > 1e-3);  // the statistics did move
  // The evaluation graph holds the central model.
  nn::Graph& eval = group.eval_graph();
  CHECK(test::max_diff(eval.state(), want) < 1e-6);
  CHECK(test::max_diff(eval.params(), group.central_params(), group.param_arena_floats()) == 0.0);
}

TEST_CASE("an added learner starts from the central model and keeps ssgd replicas identical", "[learners]") {
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  const int64_t b = 2;
  optim::OptimizerConfig sgd = test::plain_sgd();
  sgd.momentum = 0.9;
  LearnerGroupOptions o;  // ssgd, one learner
  LearnerGroup group(*backend, test::make_tiny_graph, b, b, sgd, {}, o, alone);
  auto run = [&](int64_t step) {
    group.step(test::tiny_step(0, group.learners(), step, b).inputs, step, 0.1f);
  };
  run(0);
  run(1);
  group.add_learner();
  REQUIRE(group.learners() == 2);
  CHECK(test::max_diff(group.replica_params(1), group.central_params(), test::k_tiny_arena) == 0.0);
  run(2);
  run(3);
  CHECK(test::max_diff(group.replica_params(1), group.replica_params(0), test::k_tiny_arena) == 0.0);
  group.remove_learner();
  CHECK(group.learners() == 1);
  run(4);
  CHECK_THROWS_AS(group.remove_learner(), squall::Error);
  CHECK_THROWS_WITH(parallel::k_algorithms.parse("easgd", "parallel.algorithm", ""),
                    Catch::Contains("easgd") && Catch::Contains("ssgd | sma | local-sgd"));
}

TEST_CASE("a learner group built without a config refuses inconsistent options in their own terms", "[learners]") {
  auto backend = test::make_test_backend(1);
  mpi::OneRankAllreduce alone;
  auto refused = [&](const LearnerGroupOptions& o) {
    try {
      LearnerGroup group(*backend, test::make_tiny_graph, 2, 2, test::plain_sgd(), {}, o, alone);
    } catch (const squall::Error& e) {
      return std::string(e.what());
    }
    return std::string("nothing thrown");
  };
  // The config names its keys (test_config.cpp, test_periods.cpp); the group names none.
  const auto key = Catch::Contains("parallel.");
  LearnerGroupOptions o;
  o.learners = 0;
  CHECK_THAT(refused(o), Catch::Contains("learner group: learners = 0, must be >= 1") && !key);
  o = {};
  o.algorithm = Algorithm::sma;
  o.period = 0;
  CHECK_THAT(refused(o), Catch::Contains("period = 0, must be >= 1") && !key);
  o.period = 4;
  o.inside_period = 3;
  CHECK_THAT(refused(o), Catch::Contains("inside_period = 3 and period = 4") && Catch::Contains("multiple") && !key);
  o = {};
  o.period = 4;
  o.inside_period = 2;  // ssgd has no node level
  CHECK_THAT(refused(o), Catch::Contains("inside_period = 2 and period = 4") && Catch::Contains("not ssgd's") && !key);
  o = {};
  o.algorithm = Algorithm::outer;
  o.outer.period = 0;
  CHECK_THAT(refused(o), Catch::Contains("outer.period = 0, must be >= 1") && !key);
}
