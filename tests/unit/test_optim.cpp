// Optimizers against a double-precision reference written out from the formulas (3 steps on
// a few tensors, one without weight decay, one all zeros), trust ratios, and the schedule.
#include <catch2/catch.hpp>

#include <cmath>

#include "src/nn/backend.hpp"
#include "src/optim/optimizer.hpp"
#include "src/optim/schedule.hpp"
#include "tests/support/test_backend.hpp"

using squall::optim::MilestoneUnit;
using squall::optim::OptimizerConfig;
using squall::optim::OptimizerKind;
using squall::optim::ParamGroup;
using squall::optim::Schedule;
using squall::optim::ScheduleConfig;
using squall::optim::ScheduleKind;
using squall::optim::scaled_peak_lr;

namespace {

using Vec = std::vector<double>;

struct Problem {
  std::vector<Vec> w;                 // per tensor
  std::vector<bool> decay;            // weight decay on this tensor
  std::vector<std::vector<Vec>> g;    // [step][tensor]
  Vec lr;                             // per step
};

Problem make_problem(int steps) {
  Problem p;
  const std::vector<size_t> sizes = {6, 3, 4, 5};
  p.decay = {true, false, true, true};
  for (size_t t = 0; t < sizes.size(); ++t) {
    Vec w(sizes[t]);
    for (size_t i = 0; i < w.size(); ++i) w[i] = t == 2 ? 0.0 : 0.5 * std::sin(1.3 * i + t) + 0.1 * t;
    p.w.push_back(w);
  }
  for (int s = 0; s < steps; ++s) {
    std::vector<Vec> gs;
    for (size_t t = 0; t < sizes.size(); ++t) {
      Vec g(sizes[t]);
      for (size_t i = 0; i < g.size(); ++i) g[i] = 0.3 * std::cos(0.7 * i + 2.1 * t + s) * (1 + 0.4 * s);
      gs.push_back(g);
    }
    p.g.push_back(gs);
    p.lr.push_back(0.1 * (1 + 0.5 * s));
  }
  return p;
}

double norm(const Vec& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// The formulas, in double, one tensor at a time.
std::vector<Vec> reference(const OptimizerConfig& c, const Problem& p) {
  std::vector<Vec> w = p.w;
  std::vector<Vec> m, v;
  for (const auto& t : w) m.emplace_back(t.size(), 0.0), v.emplace_back(t.size(), 0.0);
  for (size_t s = 0; s < p.g.size(); ++s) {
    const double lr = p.lr[s];
    const int step = static_cast<int>(s) + 1;
    for (size_t t = 0; t < w.size(); ++t) {
      Vec g = p.g[s][t];
      double wd = p.decay[t] ? c.weight_decay : 0.0;
      if (c.larc) {  // apex LARC: fold the decay in, scale the gradient, inner runs without decay
        const double wn = norm(w[t]), gn = norm(g);
        double f = 1.0;
        if (wn > 0 && gn > 0) {
          f = c.larc_eta * wn / (gn + wd * wn);
          if (c.larc_clip) f = std::min(f / lr, 1.0);
        }
        for (size_t i = 0; i < g.size(); ++i) g[i] = (g[i] + wd * w[t][i]) * f;
        wd = 0;
      }
      const size_t n = g.size();
      if (c.name == OptimizerKind::sgd) {
        for (size_t i = 0; i < n; ++i) {
          const double gd = g[i] + wd * w[t][i];
          m[t][i] = c.momentum * m[t][i] + gd;
          w[t][i] -= lr * (c.nesterov ? gd + c.momentum * m[t][i] : m[t][i]);
        }
        continue;
      }
      const double bc1 = 1 - std::pow(c.beta1, step), bc2 = 1 - std::pow(c.beta2, step);
      Vec u(n);
      for (size_t i = 0; i < n; ++i) {
        const double gd = g[i] + (c.name == OptimizerKind::adam ? wd * w[t][i] : 0.0);
        m[t][i] = c.beta1 * m[t][i] + (1 - c.beta1) * gd;
        v[t][i] = c.beta2 * v[t][i] + (1 - c.beta2) * gd * gd;
        u[i] = (m[t][i] / bc1) / (std::sqrt(v[t][i] / bc2) + c.eps);
      }
      if (c.name == OptimizerKind::adam) {
        for (size_t i = 0; i < n; ++i) w[t][i] -= lr * u[i];
      } else if (c.name == OptimizerKind::adamw) {
        for (size_t i = 0; i < n; ++i) w[t][i] -= lr * wd * w[t][i] + lr * u[i];
      } else {  // lamb
        for (size_t i = 0; i < n; ++i) u[i] += wd * w[t][i];
        const double wn = norm(w[t]), un = norm(u);
        const double trust = (wn > 0 && un > 0) ? wn / un : 1.0;
        for (size_t i = 0; i < n; ++i) w[t][i] -= lr * trust * u[i];
      }
    }
  }
  return w;
}

// The same problem through make_optimizer on the backend under test.
std::vector<Vec> run_squall(const OptimizerConfig& c, const Problem& p) {
  auto be = squall::test::make_test_backend(1);
  auto stream = be->create_stream();
  size_t total = 0;
  for (const auto& t : p.w) total += t.size();
  auto w_buf = be->allocate(total), g_buf = be->allocate(total);
  std::vector<ParamGroup> groups;
  size_t off = 0;
  for (size_t t = 0; t < p.w.size(); ++t) {
    std::vector<float> host(p.w[t].begin(), p.w[t].end());
    be->copy_from_host(*stream, w_buf.data() + off, host.data(), host.size());
    groups.push_back({w_buf.data() + off, g_buf.data() + off, host.size(), p.decay[t], "t" + std::to_string(t)});
    off += host.size();
  }
  auto opt = squall::optim::make_optimizer(c, *be, groups);
  for (size_t s = 0; s < p.g.size(); ++s) {
    for (size_t t = 0; t < p.w.size(); ++t) {
      std::vector<float> host(p.g[s][t].begin(), p.g[s][t].end());
      be->copy_from_host(*stream, groups[t].g, host.data(), host.size());
    }
    opt->step(*be, *stream, static_cast<float>(p.lr[s]));
  }
  CHECK(opt->steps() == static_cast<int64_t>(p.g.size()));
  std::vector<Vec> out;
  for (const auto& g : groups) {
    std::vector<float> host(g.n);
    be->copy_to_host(*stream, host.data(), g.w, g.n);
    be->synchronize(*stream);
    out.emplace_back(host.begin(), host.end());
  }
  return out;
}

void check_against_reference(const OptimizerConfig& c) {
  const Problem p = make_problem(3);
  const auto want = reference(c, p);
  const auto got = run_squall(c, p);
  REQUIRE(got.size() == want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    INFO("tensor " << t);
    for (size_t i = 0; i < want[t].size(); ++i) {
      INFO("element " << i);
      CHECK(got[t][i] == Approx(want[t][i]).epsilon(1e-5 * squall::test::slack()).margin(1e-6 * squall::test::slack()));
    }
  }
}

OptimizerConfig config(const std::string& name) {
  OptimizerConfig c;
  c.name = squall::optim::k_optimizer_kinds.parse(name, "optimizer.name", "test_optim");
  c.weight_decay = 0.05;
  c.beta1 = 0.8;
  c.beta2 = 0.95;
  c.eps = 1e-6;
  return c;
}

}  // namespace

TEST_CASE("sgd matches the reference", "[optim]") {
  auto c = config("sgd");
  SECTION("plain") { c.momentum = 0; c.weight_decay = 0; check_against_reference(c); }
  SECTION("momentum and weight decay") { c.momentum = 0.9; check_against_reference(c); }
  SECTION("nesterov") { c.momentum = 0.9; c.nesterov = true; check_against_reference(c); }
}

TEST_CASE("adam, adamw and lamb match the reference", "[optim]") {
  for (const char* name : {"adam", "adamw", "lamb"}) {
    DYNAMIC_SECTION(name) { check_against_reference(config(name)); }
    DYNAMIC_SECTION(name << " without weight decay") {
      auto c = config(name);
      c.weight_decay = 0;
      check_against_reference(c);
    }
  }
}

TEST_CASE("larc wraps every optimizer", "[optim]") {
  for (const char* name : {"sgd", "adam", "adamw", "lamb"}) {
    for (const bool clip : {true, false}) {
      DYNAMIC_SECTION(name << (clip ? " clip" : " scale")) {
        auto c = config(name);
        c.momentum = 0.9;
        c.larc = true;
        c.larc_clip = clip;
        c.larc_eta = clip ? 0.02 : 0.5;  // clip: some tensors clipped at 1, some not
        check_against_reference(c);
      }
    }
  }
}

TEST_CASE("trust ratios", "[optim]") {
  using squall::optim::lamb_trust_ratio;
  using squall::optim::larc_factor;
  CHECK(lamb_trust_ratio(3, 4) == Approx(0.75));
  CHECK(lamb_trust_ratio(0, 4) == 1.0);
  CHECK(lamb_trust_ratio(3, 0) == 1.0);
  CHECK(larc_factor(2, 1, 0, 0.001, false, 0.1) == Approx(0.002));
  CHECK(larc_factor(2, 1, 0, 0.001, true, 0.1) == Approx(0.02));     // local lr 0.002 < lr 0.1
  CHECK(larc_factor(2, 1, 0, 0.001, true, 0.001) == Approx(1.0));    // local lr 0.002 clipped to lr
  CHECK(larc_factor(2, 1, 0.5, 0.001, false, 0.1) == Approx(0.001)); // 0.001*2 / (1 + 0.5*2)
  CHECK(larc_factor(0, 1, 0, 0.001, true, 0.1) == 1.0);
  CHECK(larc_factor(2, 0, 0, 0.001, false, 0.1) == 1.0);
}

TEST_CASE("optimizer state is exposed and named", "[optim]") {
  auto be = squall::test::make_test_backend(1);
  auto w = be->allocate(10), g = be->allocate(10);
  std::vector<ParamGroup> groups = {{w.data(), g.data(), 4, true, "a"}, {w.data() + 4, g.data() + 4, 6, false, "b"}};
  auto sgd = squall::optim::make_optimizer(config("sgd"), *be, groups);
  REQUIRE(sgd->state().size() == 1);
  CHECK(sgd->state()[0].name == "momentum");
  CHECK(sgd->state()[0].count == 10);
  auto adam = squall::optim::make_optimizer(config("adamw"), *be, groups);
  REQUIRE(adam->state().size() == 2);
  CHECK(adam->state()[1].name == "exp_avg_sq");
  adam->set_steps(41);
  CHECK(adam->steps() == 41);
  auto c = config("lamb");
  c.larc = true;
  auto larc = squall::optim::make_optimizer(c, *be, groups);
  CHECK(larc->name() == "larc(lamb)");
  CHECK(larc->groups().size() == 2);
  CHECK_THROWS_WITH(config("rmsprop"), Catch::Contains("optimizer.name must be one of sgd | adam | adamw | lamb") &&
                                           Catch::Contains("\"rmsprop\""));
}

TEST_CASE("schedules at key steps", "[optim][schedule]") {
  ScheduleConfig c;
  SECTION("warm-up then constant") {
    c.warmup_steps = 10;
    Schedule s(c, 0.1, 0);
    CHECK(s.lr_at(0, 100) == Approx(0.01));
    CHECK(s.lr_at(4, 100) == Approx(0.05));
    CHECK(s.lr_at(9, 100) == Approx(0.1));
    CHECK(s.lr_at(10, 100) == Approx(0.1));
    CHECK(s.lr_at(99, 100) == Approx(0.1));
  }
  SECTION("multistep in steps") {
    c.kind = ScheduleKind::multistep;
    c.milestones = {20, 30};
    c.gamma = 0.1;
    Schedule s(c, 0.1, 0);
    CHECK(s.lr_at(0, 100) == Approx(0.1));
    CHECK(s.lr_at(19, 100) == Approx(0.1));
    CHECK(s.lr_at(20, 100) == Approx(0.01));
    CHECK(s.lr_at(29, 100) == Approx(0.01));
    CHECK(s.lr_at(30, 100) == Approx(0.001));
  }
  SECTION("multistep in epochs") {
    c.kind = ScheduleKind::multistep;
    c.milestones = {2};
    c.milestone_unit = MilestoneUnit::epochs;
    c.gamma = 0.5;
    Schedule s(c, 0.2, 5);
    CHECK(s.milestone_steps() == std::vector<int64_t>{10});
    CHECK(s.lr_at(9, 100) == Approx(0.2));
    CHECK(s.lr_at(10, 100) == Approx(0.1));
  }
  SECTION("cosine after warm-up") {
    c.kind = ScheduleKind::cosine;
    c.warmup_steps = 10;
    c.min_lr = 0.001;
    Schedule s(c, 0.1, 0);
    CHECK(s.lr_at(9, 110) == Approx(0.1));
    CHECK(s.lr_at(10, 110) == Approx(0.1));
    CHECK(s.lr_at(60, 110) == Approx((0.1 + 0.001) / 2));
    CHECK(s.lr_at(110, 110) == Approx(0.001));
    CHECK(s.lr_at(500, 110) == Approx(0.001));
  }
  SECTION("linear scaling rule") {
    c.scale_lr_with_batch = true;
    c.warmup_steps = 4;
    Schedule s(c, scaled_peak_lr(c, 0.1, 1024), 0);  // reference batch 256
    CHECK(s.peak_lr() == Approx(0.4));
    // elastic.batch's factor on top; without the rule the factor alone.
    CHECK(scaled_peak_lr(c, 0.1, 1024, 0.5) == Approx(0.2));
    c.scale_lr_with_batch = false;
    CHECK(scaled_peak_lr(c, 0.1, 1024) == 0.1);
    CHECK(scaled_peak_lr(c, 0.1, 1024, 1.5) == Approx(0.15));
    CHECK(s.lr_at(0, 100) == Approx(0.1));
    CHECK(s.lr_at(50, 100) == Approx(0.4));
  }
}
