// The sampler's promises, checked over many job shapes and datasets: every epoch each sample
// is read exactly once, by one rank; epochs differ; every rank computes the same plan alone.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <set>

#include "io/input/sampler.hpp"
#include "src/core/error.hpp"

using squall::input::Sampler;
using squall::input::Sampling;

namespace {

// Uneven shard sizes (some may be empty) summing to n, the same for the same arguments.
std::vector<int64_t> uneven_offsets(int64_t n, int shards, uint64_t salt) {
  std::vector<int64_t> cuts{0, n};
  uint64_t s = salt * 2654435761u + static_cast<uint64_t>(n) * 40503u + static_cast<uint64_t>(shards);
  for (int i = 1; i < shards; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    cuts.push_back(n == 0 ? 0 : static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(n + 1)));
  }
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

struct Shape {
  std::vector<int> node_sizes;
  int world() const { return std::accumulate(node_sizes.begin(), node_sizes.end(), 0); }
};

std::vector<Shape> job_shapes() {
  std::vector<Shape> shapes;
  for (int ranks = 1; ranks <= 9; ++ranks)
    for (int per_node = 1; per_node <= ranks; ++per_node)
      shapes.push_back({squall::input::uniform_node_sizes(ranks, per_node)});
  shapes.push_back({{3, 1, 2}});  // unequal nodes, as physical nodes may be
  shapes.push_back({{1, 4}});
  return shapes;
}

// Every rank's list in an epoch, each from its own Sampler, as separate ranks would build it.
std::vector<std::vector<int64_t>> all_lists(Sampling mode, const std::vector<int64_t>& offsets, const Shape& shape,
                                            uint64_t seed, int64_t epoch) {
  std::vector<std::vector<int64_t>> lists;
  for (int node = 0; node < static_cast<int>(shape.node_sizes.size()); ++node)
    for (int lr = 0; lr < shape.node_sizes[static_cast<size_t>(node)]; ++lr)
      lists.push_back(Sampler(mode, offsets, shape.node_sizes, seed).indices(epoch, node, lr));
  return lists;
}

int file_of(const std::vector<int64_t>& offsets, int64_t index) {
  return static_cast<int>(std::upper_bound(offsets.begin(), offsets.end(), index) - offsets.begin()) - 1;
}

}  // namespace

TEST_CASE("every epoch every sample is read exactly once, by one rank", "[sampler]") {
  const std::vector<int64_t> sample_counts{0, 1, 2, 5, 13, 37, 64, 101};
  int combos = 0;
  for (const Sampling mode : {Sampling::global, Sampling::local})
    for (const Shape& shape : job_shapes())
      for (const int64_t n : sample_counts)
        for (int shards = 1; shards <= 7; ++shards) {
          const auto offsets = uneven_offsets(n, shards, static_cast<uint64_t>(shape.world()));
          const Sampler sampler(mode, offsets, shape.node_sizes, 7);
          INFO("mode " << squall::input::k_sampling_modes.name(mode) << ", nodes " << shape.node_sizes.size()
                       << ", ranks " << shape.world() << ", samples " << n << ", shards " << shards);
          for (int64_t epoch = 0; epoch < 3; ++epoch) {
            const auto lists = all_lists(mode, offsets, shape, 7, epoch);
            std::vector<int> seen(static_cast<size_t>(n), 0);
            int64_t smallest = n;
            size_t slot = 0;
            for (int node = 0; node < sampler.nodes(); ++node) {
              const auto [first, last] = sampler.node_range(node);
              const std::vector<int> files = sampler.files_for_node(node);
              const int local_size = shape.node_sizes[static_cast<size_t>(node)];
              for (int lr = 0; lr < local_size; ++lr, ++slot) {
                const auto& list = lists[slot];
                REQUIRE(static_cast<int64_t>(list.size()) == sampler.share(node, lr));
                smallest = std::min(smallest, static_cast<int64_t>(list.size()));
                // Remainder rule: the first M mod K ranks get one more.
                const int64_t m = mode == Sampling::global ? n : last - first;
                const int64_t k = mode == Sampling::global ? shape.world() : local_size;
                const int64_t pos = mode == Sampling::global ? static_cast<int64_t>(slot) : lr;
                REQUIRE(static_cast<int64_t>(list.size()) == m / k + (pos < m % k ? 1 : 0));
                for (const int64_t i : list) {
                  REQUIRE(i >= first);
                  REQUIRE(i < last);
                  ++seen[static_cast<size_t>(i)];
                  // A node reads only the files it was given (what `squall stage` copies).
                  REQUIRE(std::binary_search(files.begin(), files.end(), file_of(offsets, i)));
                }
              }
            }
            REQUIRE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
            for (const int64_t batch : {1, 3, 8}) REQUIRE(sampler.steps_per_epoch(batch) == smallest / batch);
          }
          ++combos;
        }
  CHECK(combos > 1000);
}

TEST_CASE("local mode: node ranges tile the samples, and files stay whole where cheap", "[sampler]") {
  for (const Shape& shape : job_shapes())
    for (int shards = 1; shards <= 7; ++shards) {
      const auto offsets = uneven_offsets(90, shards, 3);
      const Sampler sampler(Sampling::local, offsets, shape.node_sizes, 1);
      int64_t expect_first = 0;
      std::set<int> files_used;
      for (int node = 0; node < sampler.nodes(); ++node) {
        const auto [first, last] = sampler.node_range(node);
        CHECK(first == expect_first);
        CHECK(last >= first);
        expect_first = last;
        for (const int f : sampler.files_for_node(node)) files_used.insert(f);
      }
      CHECK(expect_first == 90);
      std::set<int> nonempty;
      for (int f = 0; f < shards; ++f)
        if (offsets[static_cast<size_t>(f) + 1] > offsets[static_cast<size_t>(f)]) nonempty.insert(f);
      CHECK(files_used == nonempty);
    }

  // 16 equal shards on 4 nodes: 4 whole shards each.
  std::vector<int64_t> equal(17);
  for (size_t i = 0; i < equal.size(); ++i) equal[i] = static_cast<int64_t>(i) * 10;
  const Sampler four(Sampling::local, equal, {2, 2, 2, 2}, 1);
  for (int node = 0; node < 4; ++node) {
    CHECK(four.files_for_node(node) == std::vector<int>{4 * node, 4 * node + 1, 4 * node + 2, 4 * node + 3});
    CHECK(four.node_range(node) == std::pair<int64_t, int64_t>{40 * node, 40 * node + 40});
  }
  // 3 shards of 10 on 2 nodes: whole shards would leave a node a third short; balance wins
  // and the middle shard is split by sample range.
  const Sampler two(Sampling::local, {0, 10, 20, 30}, {1, 1}, 1);
  CHECK(two.node_range(0) == std::pair<int64_t, int64_t>{0, 15});
  CHECK(two.files_for_node(0) == std::vector<int>{0, 1});
  CHECK(two.files_for_node(1) == std::vector<int>{1, 2});
  // More nodes than files: one file split among 5 nodes.
  const Sampler many(Sampling::local, {0, 23}, {1, 1, 1, 1, 1}, 1);
  CHECK(many.steps_per_epoch(1) == 4);
  for (int node = 0; node < 5; ++node) CHECK(many.files_for_node(node) == std::vector<int>{0});
}

TEST_CASE("global mode: after c samples per rank a job has read the first c x ranks of the epoch's order, and a job "
          "of another shape goes on from there, each sample once",
          "[sampler][elastic]") {
  const auto offsets = uneven_offsets(1000, 7, 3);
  const int64_t n = 1000;
  // The order itself: one rank reads it all.
  const std::vector<int64_t> order = Sampler(Sampling::global, offsets, {1}, 5).indices(2, 0, 0);
  REQUIRE(static_cast<int64_t>(order.size()) == n);
  for (const int from : {4, 2, 5})
    for (const int to : {3, 6, 1, 4}) {
      for (const int64_t batch : {1, 8, 13}) {
        INFO(from << " ranks, batches of " << batch << ", then " << to << " ranks");
        const Sampler before(Sampling::global, offsets, {from}, 5);
        const int64_t used = before.steps_per_epoch(batch) / 2;  // batches each rank read
        std::vector<int> seen(static_cast<size_t>(n), 0);
        std::set<int64_t> prefix;
        for (int r = 0; r < from; ++r) {
          const std::vector<int64_t> list = before.indices(2, 0, r);
          for (int64_t i = 0; i < used * batch; ++i) {
            ++seen[static_cast<size_t>(list[static_cast<size_t>(i)])];
            prefix.insert(list[static_cast<size_t>(i)]);
          }
        }
        // Exactly the first used x batch x from samples of the order.
        const int64_t position = used * batch * from;
        REQUIRE(static_cast<int64_t>(prefix.size()) == position);
        CHECK(std::all_of(order.begin(), order.begin() + position, [&](int64_t i) { return prefix.count(i) == 1; }));
        // The new shape reads the rest: each sample once over both jobs.
        const Sampler after(Sampling::global, offsets, {to}, 5);
        int64_t smallest = n;
        for (int r = 0; r < to; ++r) {
          const std::vector<int64_t> list = after.indices(2, 0, r, position);
          CHECK(static_cast<int64_t>(list.size()) == after.share(0, r, position));
          smallest = std::min<int64_t>(smallest, static_cast<int64_t>(list.size()));
          for (const int64_t i : list) ++seen[static_cast<size_t>(i)];
        }
        CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
        CHECK(after.steps_per_epoch(batch, position) == smallest / batch);
        // The same shape from that position reads what the first job had left: the
        // continuation of each rank's own list (a resume on the same shape is bit for bit).
        const std::vector<int64_t> whole = before.indices(2, 0, from - 1);
        const std::vector<int64_t> rest = before.indices(2, 0, from - 1, position);
        CHECK(std::equal(rest.begin(), rest.end(), whole.begin() + used * batch, whole.end()));
      }
    }
  // Local mode keeps its shards on their nodes: no position but the start.
  const Sampler local(Sampling::local, offsets, {2, 2}, 5);
  CHECK_THROWS_WITH(local.indices(0, 0, 0, 8), Catch::Contains("data.sampling = local"));
  CHECK_THROWS_WITH(Sampler(Sampling::global, offsets, {2}, 5).indices(0, 0, 0, n + 1),
                    Catch::Contains("outside the epoch's 1000 samples"));
}

TEST_CASE("epochs are reshuffled, reproducible from the seed, and the remainder changes", "[sampler]") {
  const auto offsets = uneven_offsets(100, 5, 1);
  for (const Sampling mode : {Sampling::global, Sampling::local}) {
    const Shape shape{{2, 2}};
    const auto e0 = all_lists(mode, offsets, shape, 11, 0);
    const auto e1 = all_lists(mode, offsets, shape, 11, 1);
    CHECK(e0 == all_lists(mode, offsets, shape, 11, 0));   // deterministic
    CHECK(e0 != all_lists(mode, offsets, shape, 12, 0));   // the seed matters
    for (size_t r = 0; r < e0.size(); ++r) CHECK(e0[r] != e1[r]);  // every rank's list changes

    // 25 samples per rank, batches of 8: 3 steps, one sample left over per rank and epoch.
    const Sampler sampler(mode, offsets, shape.node_sizes, 11);
    REQUIRE(sampler.steps_per_epoch(8) == 3);
    std::set<int64_t> unused;
    for (int64_t epoch = 0; epoch < 10; ++epoch) unused.insert(sampler.indices(epoch, 0, 0).back());
    CHECK(unused.size() > 1);
  }
  // Global mode mixes samples across nodes; local mode does not.
  const Sampler global(Sampling::global, offsets, {2, 2}, 11);
  const auto first_node = global.indices(0, 0, 0);
  CHECK(std::any_of(first_node.begin(), first_node.end(), [](int64_t i) { return i >= 50; }));
}

TEST_CASE("files_for_node in global mode is every file that holds a sample", "[sampler]") {
  const Sampler s(Sampling::global, {0, 5, 5, 9, 20}, {1, 1, 1}, 1);
  for (int node = 0; node < 3; ++node) CHECK(s.files_for_node(node) == std::vector<int>{0, 2, 3});
  const Sampler empty(Sampling::local, {0}, {2}, 1);
  CHECK(empty.files_for_node(0).empty());
  CHECK(empty.indices(0, 0, 1).empty());
  CHECK(empty.steps_per_epoch(4) == 0);
}

TEST_CASE("bad sampler arguments are errors that say what is wrong", "[sampler]") {
  CHECK(squall::input::k_sampling_modes.parse("local", "--sampling", "") == Sampling::local);
  CHECK_THROWS_WITH(squall::input::k_sampling_modes.parse("nodewise", "--sampling", ""),
                    Catch::Contains("\"nodewise\"") && Catch::Contains("global | local"));
  CHECK_THROWS_AS(Sampler(Sampling::global, {0, 5, 3}, {1}, 1), squall::Error);
  CHECK_THROWS_AS(Sampler(Sampling::global, {1, 5}, {1}, 1), squall::Error);
  CHECK_THROWS_AS(Sampler(Sampling::global, {0, 5}, {}, 1), squall::Error);
  CHECK_THROWS_AS(Sampler(Sampling::global, {0, 5}, {2, 0}, 1), squall::Error);
  CHECK_THROWS_AS(Sampler(Sampling::global, {0, 5}, {1}, 1).steps_per_epoch(0), squall::Error);
  CHECK_THROWS_AS(Sampler(Sampling::global, {0, 5}, {1}, 1).indices(0, 0, 1), squall::Error);
  CHECK(squall::input::node_sizes_from(std::vector<int>{0, 0, 1, 2, 2, 2}) == std::vector<int>{2, 1, 3});
  CHECK(squall::input::uniform_node_sizes(5, 2) == std::vector<int>{2, 2, 1});
}
