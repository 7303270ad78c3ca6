// Rounds fitted to speed and the stream of a node's samples (src/train/pace.hpp): the steps each
// node trains against the rule written out here, the quorum's bound, and a walk of epochs in
// which a slow node lets steps pass, counting every sample it trains.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "src/train/pace.hpp"

using namespace squall::train;

TEST_CASE("a node k times slower than the typical one trains 1/k of a round, and the quorum bounds what the job leaves", "[pace]") {
  // Unknown seconds (the first rounds) train whole rounds.
  CHECK(fit_round_steps({0, 0, 0}, {1, 1, 1}, 8, 0.5) == std::vector<int64_t>{8, 8, 8});
  // Equal speed: every node the whole round, whatever the quorum.
  CHECK(fit_round_steps({0.1, 0.1}, {1, 1}, 8, 0.1) == std::vector<int64_t>{8, 8});
  // One node of four 3x slower: round(8 / 3) = 3 steps, which the job's quorum of 0.75 allows
  // (3 x 8 + 3 = 27 of 32 steps trained >= 24).
  CHECK(fit_round_steps({0.1, 0.1, 0.1, 0.3}, {1, 1, 1, 1}, 8, 0.75) == std::vector<int64_t>{8, 8, 8, 3});
  // A quorum of 0.9 needs ceil(0.9 x 32) = 29 steps: the slow node takes 5.
  CHECK(fit_round_steps({0.1, 0.1, 0.1, 0.3}, {1, 1, 1, 1}, 8, 0.9) == std::vector<int64_t>{8, 8, 8, 5});
  // The quorum 1 trains everything.
  CHECK(fit_round_steps({0.1, 0.1, 0.1, 0.3}, {1, 1, 1, 1}, 8, 1.0) == std::vector<int64_t>{8, 8, 8, 8});
  // At least one step, however slow.
  CHECK(fit_round_steps({0.1, 100.0}, {1, 1}, 8, 0.1) == std::vector<int64_t>{8, 1});
  // Up to 1.25 times slower than the typical node: the whole round (measured seconds vary that
  // much on shared nodes); beyond, fitted to the typical node, not to the fastest.
  CHECK(fit_round_steps({0.1, 0.12, 0.125, 0.3}, {1, 1, 1, 1}, 8, 0.5) == std::vector<int64_t>{8, 8, 8, 3});
  CHECK(fit_round_steps({0.1, 0.12, 0.13, 0.36}, {1, 1, 1, 1}, 8, 0.5) == std::vector<int64_t>{8, 8, 8, 3});
  CHECK(fit_round_steps({0.05, 0.1, 0.1, 0.2}, {1, 1, 1, 1}, 8, 0.5) == std::vector<int64_t>{8, 8, 8, 4});
  // Weights: a node of 3 ranks 2x slower than one of 1 rank (the typical node of two is the
  // faster); 0.75 of (3 + 1) x 10 = 30 rank-steps; 5 steps give 3 x 5 + 10 = 25, so the heavy
  // node takes 7 (3 x 7 + 10 = 31).
  CHECK(fit_round_steps({0.2, 0.1}, {3, 1}, 10, 0.75) == std::vector<int64_t>{7, 10});
  // Two slow nodes of four raised one step at a time, the smaller first, the lower node on a tie:
  // round(8 / 4) = 2 each, 20 of 32 trained, ceil(0.75 x 32) = 24 needed: 4 each.
  CHECK(fit_round_steps({0.1, 0.1, 0.4, 0.4}, {1, 1, 1, 1}, 8, 0.75) == std::vector<int64_t>{8, 8, 4, 4});
  CHECK(fit_round_steps({0.1, 0.1, 0.4, 0.4}, {1, 1, 1, 1}, 8, 0.7) == std::vector<int64_t>{8, 8, 4, 3});
  // Two slow nodes of three are the typical ones: the fast node waits for them, nobody is cut.
  CHECK(fit_round_steps({0.1, 0.4, 0.4}, {1, 1, 1}, 8, 0.5) == std::vector<int64_t>{8, 8, 8});
}

TEST_CASE("a rank's pace is the mean of its last steps: a node's slow steps count as the time they take", "[pace]") {
  StepTimes t(8);
  CHECK(t.mean() == 0);  // nothing trained yet: the fit trains whole rounds
  // Every node held to a CPU quota alike: each has 3 of every 8 steps stretched from 0.1 to 0.3 s
  // by the quota's periods, so each node's mean is the same 0.175 s and nobody is cut.
  for (int i = 0; i < 8; ++i) t.add(i < 3 ? 0.3 : 0.1);
  CHECK(t.mean() == Approx(0.175));
  CHECK(fit_round_steps({0.175, 0.175, 0.175, t.mean()}, {1, 1, 1, 1}, 8, 0.5) == std::vector<int64_t>{8, 8, 8, 8});
  // One slow step in 8 (a noisy neighbour) stays within the fit's 1.25x tolerance.
  StepTimes noisy(8);
  for (int i = 0; i < 8; ++i) noisy.add(i == 0 ? 0.25 : 0.1);
  CHECK(fit_round_steps({0.1, 0.1, 0.1, noisy.mean()}, {1, 1, 1, 1}, 8, 0.5) == std::vector<int64_t>{8, 8, 8, 8});
  // A slow node that trains 2 steps a round starts each round with its quota whole: its first
  // step fast (0.1 s), its second slow (0.5 s). Its mean, 0.3 s, is 3x the typical node's and
  // fits it to 3 steps; the upper median of that alternation (0.5 s) would have fitted it to 2.
  StepTimes slow(8);
  for (int i = 0; i < 8; ++i) slow.add(i % 2 == 0 ? 0.1 : 0.5);
  CHECK(slow.mean() == Approx(0.3));
  CHECK(fit_round_steps({0.1, 0.1, 0.1, slow.mean()}, {1, 1, 1, 1}, 8, 0.5) == std::vector<int64_t>{8, 8, 8, 3});
  // Only the last 8 count: slow for good, the mean follows.
  for (int i = 0; i < 8; ++i) t.add(0.2);
  CHECK(t.size() == 8);
  CHECK(t.mean() == Approx(0.2));
}

TEST_CASE("a sample stream takes from its front and keeps the carried samples", "[pace]") {
  SampleStream s;
  s.append({1, 0, 0, 10});
  s.append({1, 0, 10, 12});  // joins the range before it
  REQUIRE(s.ranges().size() == 1);
  CHECK(s.size() == 12);
  s.take(4);
  CHECK(s.ranges()[0] == SampleRange{1, 0, 4, 12});
  s.keep_first(5);
  CHECK(s.ranges()[0] == SampleRange{1, 0, 4, 9});
  s.append({2, 0, 0, 6});
  CHECK(s.size() == 11);
  s.take(7);  // the rest of epoch 1's and 2 of epoch 2's
  REQUIRE(s.ranges().size() == 1);
  CHECK(s.ranges()[0] == SampleRange{2, 0, 2, 6});
  s.keep_first(0);
  CHECK(s.size() == 0);
}

namespace {

// Epoch e's list of `n` samples: a permutation of 0..n-1 that differs per epoch (a shuffle).
std::vector<int64_t> list_of(int64_t epoch, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * (2 * epoch + 1) + epoch) % n;
  return v;
}

}  // namespace

TEST_CASE("with a node at half speed and a quorum of 0.5, every sample is trained once per two epochs", "[pace]") {
  // The loop of trainer.cpp for one slow node, written out: rounds of H steps, the node trains
  // the fitted steps of each and lets the rest pass; the stream carries what it did not reach.
  // n = 61 samples, batch 2, 1 learner: 30 steps an epoch (one sample is the epoch's own
  // leftover, which no run trains).
  const int64_t n = 61, batch = 2, period = 5, steps_per_epoch = 30;
  const int64_t h = fit_round_steps({0.1, 0.2}, {1, 1}, period, 0.5)[1];
  REQUIRE(h == 3);  // round(5 x 0.1 / 0.2) = round(2.5) = 3 (half away from zero)
  SampleStream stream;
  int64_t carried = 0;
  std::map<int64_t, std::vector<int64_t>> trained;  // epoch -> samples, in order
  for (int64_t epoch = 1; epoch <= 4; ++epoch) {
    stream.append({epoch, 0, 0, n});
    for (int64_t step = 0; step < steps_per_epoch; ++step) {
      if (step % period < h) {
        // The step's batch: the stream's first samples.
        const SampleRange& r = stream.ranges().front();
        REQUIRE(r.end - r.begin >= batch);  // ranges of one list: a batch never straddles here
        const std::vector<int64_t> list = list_of(r.epoch, n);
        for (int64_t i = r.begin; i < r.begin + batch; ++i) trained[epoch].push_back(list[static_cast<size_t>(i)]);
        stream.take(batch);
      } else {
        carried += batch;
      }
    }
    stream.keep_first(carried);
    CHECK(stream.size() == carried);
  }
  // Each epoch trains 18 of its 30 steps (6 rounds x 3) and carries 12 steps' samples more.
  CHECK(carried == 4 * 12 * batch);
  // What the node trained over the epochs is its stream in order: epoch 1's first 60 samples,
  // then epoch 2's, and so on, each once, none skipped, none twice.
  std::vector<int64_t> all, expected;
  for (int64_t e = 1; e <= 4; ++e) all.insert(all.end(), trained[e].begin(), trained[e].end());
  for (int64_t e = 1; all.size() > expected.size(); ++e) {
    const std::vector<int64_t> list = list_of(e, n);
    expected.insert(expected.end(), list.begin(), list.begin() + steps_per_epoch * batch);
  }
  expected.resize(all.size());
  CHECK(all == expected);
  // Epochs 1 and 2 together trained epoch 1's 60 samples exactly once (18 + 12 steps).
  std::vector<int64_t> two(trained[1]);
  two.insert(two.end(), trained[2].begin(), trained[2].begin() + 2 * 12);
  std::sort(two.begin(), two.end());
  std::vector<int64_t> first = list_of(1, n);
  first.resize(60);
  std::sort(first.begin(), first.end());
  CHECK(two == first);
}
