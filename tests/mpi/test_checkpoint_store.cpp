// CheckpointStore under a real launch, on node layouts emulated with Topology::from_plan
// (io/checkpoint/store.hpp): one file per node holding a group per rank, parts found by
// global rank on any layout and mapped onto the groups of a split job, checkpoints of earlier
// versions (a file per rank) still read, damaged or mismatched node files reported by name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "io/checkpoint/checkpoint_file.hpp"
#include "mpi/comm.hpp"
#include "mpi/node_plan.hpp"
#include "mpi/topology.hpp"
#include "src/core/error.hpp"
#include "io/checkpoint/store.hpp"

using squall::mpi::Communicator;
using squall::mpi::Topology;
using squall::checkpoint::CheckpointStore;
using squall::checkpoint::LoadedCheckpoint;
namespace fs = std::filesystem;
namespace checkpoint = squall::checkpoint;

namespace {

// A folder every rank sees (rank 0 names it), removed at the end.
struct SharedDir {
  fs::path path;
  const Communicator& world;
  explicit SharedDir(const Communicator& w) : world(w) {
    const std::string name = w.rank() == 0 ? (fs::temp_directory_path() /
                                              ("squall-ckstore-" + std::to_string(::getpid()))).string()
                                           : std::string();
    path = w.broadcast_string(name);
    if (w.rank() == 0) {
      fs::remove_all(path);
      fs::create_directories(path);
    }
    w.barrier();
  }
  ~SharedDir() {
    world.barrier();
    std::error_code ec;
    if (world.rank() == 0) fs::remove_all(path, ec);
  }
};

// A layout: the node of each world rank (node numbers in order of their lowest rank).
Topology layout(const std::vector<int>& node_of_rank) {
  return Topology::from_plan(squall::mpi::plan_nodes(node_of_rank, 0));
}
std::vector<int> blocks(int n, int per) {
  std::vector<int> out;
  for (int r = 0; r < n; ++r) out.push_back(r / per);
  return out;
}
std::vector<int> interleaved(int n) {
  std::vector<int> out;
  for (int r = 0; r < n; ++r) out.push_back(r % 2);
  return out;
}

checkpoint::CheckpointData shared_of(int world_size, int64_t step) {
  checkpoint::CheckpointData d;
  d.ints = {{"world_size", world_size}, {"per_rank_parts", 1}, {"step", step}};
  d.arrays["central/params"] = {1.5f, -2.25f, static_cast<float>(step)};
  d.texts["config"] = "[model]\nname = \"tiny\"\n";
  return d;
}
// Parts of different sizes and contents on every rank.
checkpoint::CheckpointData own_of(int rank, int64_t step) {
  checkpoint::CheckpointData d;
  d.ints = {{"rank", rank}, {"step", step}};
  d.reals["loss_scale"] = 0.5 + rank;
  d.arrays["learner_0/params"] = std::vector<float>(static_cast<size_t>(3 + 5 * rank), 0.25f * static_cast<float>(rank + 1));
  d.arrays["learner_0/params"].back() = static_cast<float>(step) + 1e-7f;
  d.arrays["learner_1/optimizer/momentum"] = {static_cast<float>(rank), -0.0f, 3.0e-38f};
  d.shapes["learner_1/optimizer/momentum"] = {3, 1};
  return d;
}

bool same(const checkpoint::CheckpointData& a, const checkpoint::CheckpointData& b) {
  return a.arrays == b.arrays && a.ints == b.ints && a.reals == b.reals && a.texts == b.texts && a.shapes == b.shapes;
}

std::vector<std::string> names_in(const fs::path& folder) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(folder)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The world ranks of each node of a layout.
std::vector<std::vector<std::string>> groups_of(const std::vector<int>& node_of_rank) {
  std::vector<std::vector<std::string>> out(
      static_cast<size_t>(*std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1));
  for (size_t r = 0; r < node_of_rank.size(); ++r)
    out[static_cast<size_t>(node_of_rank[r])].push_back(CheckpointStore::rank_group(static_cast<int>(r)));
  return out;
}

}  // namespace

TEST_CASE("a checkpoint is model.h5 and one file per node, each a group per rank, and loads bit for bit",
          "[checkpoint-store]") {
  const auto world = Communicator::world();
  const int n = world.size();
  for (const auto& nodes : {blocks(n, 1), blocks(n, 2), blocks(n, n), interleaved(n)}) {
    INFO("ranks " << n << ", node of rank 0.." << n - 1 << ": " << Catch::Detail::stringify(nodes));
    SharedDir dir(world);
    const Topology topo = layout(nodes);
    CheckpointStore store(dir.path, topo, 2);
    const checkpoint::CheckpointData own = own_of(world.rank(), 10);
    const fs::path folder = store.save(10, shared_of(n, 10), &own);
    CHECK(folder.filename() == "step-00000010");
    if (world.rank() == 0) {
      std::vector<std::string> expected{"model.h5"};
      for (int k = 0; k < topo.nodes(); ++k) expected.push_back(CheckpointStore::node_file(folder, k).filename());
      std::sort(expected.begin(), expected.end());
      CHECK(names_in(folder) == expected);  // no rank-*.h5, no partial folder left
      CHECK(names_in(dir.path / "checkpoints") == std::vector<std::string>{"step-00000010"});
      // Each node file holds exactly its node's ranks, each a plain checkpoint group.
      const auto groups = groups_of(nodes);
      for (int k = 0; k < topo.nodes(); ++k) {
        const std::string file = CheckpointStore::node_file(folder, k).string();
        CHECK(checkpoint::read_checkpoint_group_names(file) == groups[static_cast<size_t>(k)]);
      }
      const std::string first = groups[1 % groups.size()].front();
      const int r = std::stoi(first.substr(5));
      const auto read =
          checkpoint::read_checkpoint_groups(CheckpointStore::node_file(folder, 1 % topo.nodes()).string(), {first});
      CHECK(same(read.at(0), own_of(r, 10)));
      CHECK_THROWS_WITH(checkpoint::read_checkpoint_file(CheckpointStore::node_file(folder, 0).string()),
                        Catch::Contains("node-00000.h5") && Catch::Contains("not a squall checkpoint"));
    }
    const auto loaded = store.load_newest();
    CHECK(loaded.has_value());
    if (loaded) {
      CHECK(loaded->path == folder);
      CHECK(loaded->has_own);
      CHECK(same(loaded->shared, shared_of(n, 10)));
      CHECK(same(loaded->own, own));
      CHECK_THAT(loaded->own.origin, Catch::Contains("node-") && Catch::Contains(CheckpointStore::rank_group(world.rank())));
    }
  }
}

TEST_CASE("a checkpoint written on one node layout resumes on another: parts are found by global rank",
          "[checkpoint-store]") {
  const auto world = Communicator::world();
  const int n = world.size();
  SharedDir dir(world);
  {
    const Topology wrote = layout(blocks(n, 2));
    const checkpoint::CheckpointData own = own_of(world.rank(), 20);
    CheckpointStore(dir.path, wrote, 3).save(20, shared_of(n, 20), &own);
  }
  for (const auto& nodes : {blocks(n, n), blocks(n, 1), interleaved(n), blocks(n, 3)}) {
    INFO("read on node of rank 0.." << n - 1 << ": " << Catch::Detail::stringify(nodes));
    const Topology reads = layout(nodes);
    CheckpointStore store(dir.path, reads, 3);
    const LoadedCheckpoint ck = store.load(dir.path / "checkpoints/step-00000020");
    CHECK(ck.has_own);
    CHECK(same(ck.own, own_of(world.rank(), 20)));
    CHECK(same(ck.shared, shared_of(n, 20)));
  }
}

TEST_CASE("a checkpoint of an earlier version, with a file per rank, still loads", "[checkpoint-store]") {
  const auto world = Communicator::world();
  const int n = world.size();
  SharedDir dir(world);
  const fs::path folder = dir.path / "checkpoints" / CheckpointStore::folder_name(30);
  if (world.rank() == 0) {
    fs::create_directories(folder);
    checkpoint::write_checkpoint_file((folder / CheckpointStore::k_model_file).string(), shared_of(n, 30));
  }
  world.barrier();
  checkpoint::write_checkpoint_file(CheckpointStore::part_file(folder, world.rank()).string(),
                                    own_of(world.rank(), 30));
  world.barrier();
  const Topology topo = layout(blocks(n, 2));
  CheckpointStore store(dir.path, topo, 3);
  const auto ck = store.load_newest();
  CHECK(ck.has_value());
  if (ck) {
    CHECK(ck->has_own);
    CHECK(same(ck->own, own_of(world.rank(), 30)));
    CHECK_THAT(ck->own.origin, Catch::EndsWith(CheckpointStore::part_file(folder, world.rank()).filename().string()));
  }
  // The next checkpoint of the resumed run is written in the new layout.
  const checkpoint::CheckpointData own = own_of(world.rank(), 40);
  const fs::path next = store.save(40, shared_of(n, 40), &own);
  if (world.rank() == 0) CHECK_FALSE(fs::exists(CheckpointStore::part_file(next, 0)));
  if (world.rank() == 0) CHECK(fs::exists(CheckpointStore::node_file(next, 0)));
}

TEST_CASE("a damaged node file or one that lacks a rank is reported by name and an older checkpoint used",
          "[checkpoint-store]") {
  const auto world = Communicator::world();
  const int n = world.size();
  SharedDir dir(world);
  const Topology topo = layout(blocks(n, 2));
  CheckpointStore store(dir.path, topo, 5);
  for (const int step : {10, 20, 30}) {
    const checkpoint::CheckpointData own = own_of(world.rank(), step);
    store.save(step, shared_of(n, step), &own);
  }
  const fs::path ck = dir.path / "checkpoints";
  const int last_node = topo.nodes() - 1;
  const int last_rank = n - 1;
  if (world.rank() == 0) {
    // step 30: the last node's file cut in half; step 20: the same file without its last rank.
    const fs::path cut = CheckpointStore::node_file(ck / "step-00000030", last_node);
    fs::resize_file(cut, fs::file_size(cut) / 2);
    const fs::path lacking = CheckpointStore::node_file(ck / "step-00000020", last_node);
    std::vector<std::string> names = checkpoint::read_checkpoint_group_names(lacking.string());
    names.pop_back();
    const std::vector<checkpoint::CheckpointData> kept = checkpoint::read_checkpoint_groups(lacking.string(), names);
    std::vector<checkpoint::CheckpointGroup> groups;
    for (size_t i = 0; i < names.size(); ++i) groups.push_back({names[i], &kept[i]});
    checkpoint::write_checkpoint_groups(lacking.string(), groups);
  }
  world.barrier();
  const std::string cut_name = CheckpointStore::node_file("", last_node).string();
  CHECK_THROWS_WITH(store.load(ck / "step-00000030"),
                    Catch::Contains("cannot use this checkpoint") && Catch::Contains(cut_name));
  CHECK_THROWS_WITH(store.load(ck / "step-00000020"),
                    Catch::Contains("no node file holds the part of rank " + std::to_string(last_rank)) &&
                        Catch::Contains(CheckpointStore::rank_group(last_rank)));
  const auto newest = store.load_newest();
  CHECK(newest.has_value());
  if (newest) {
    CHECK(newest->path.filename() == "step-00000010");
    CHECK(same(newest->own, own_of(world.rank(), 10)));
  }
}

TEST_CASE("a checkpoint of a job of another size: each rank it had takes its part, a new rank none", "[checkpoint-store]") {
  const auto world = Communicator::world();
  const int n = world.size();
  SharedDir dir(world);
  const Topology topo = layout(blocks(n, 2));
  CheckpointStore store(dir.path, topo, 3);
  const checkpoint::CheckpointData own = own_of(world.rank(), 10);
  // Written by a job of n + 1 ranks (this job is the smaller one): every rank here had one.
  store.save(10, shared_of(n + 1, 10), &own);
  {
    const auto loaded = store.load_newest();
    REQUIRE(loaded.has_value());
    CHECK(loaded->has_own);
    CHECK_FALSE(loaded->from_centre);
    CHECK(same(loaded->own, own));
  }
  // Written by a job of n - 1 ranks (this job is the larger one): the last rank is new.
  if (n >= 2) {
    const checkpoint::CheckpointData own20 = own_of(world.rank(), 20);
    store.save(20, shared_of(n - 1, 20), &own20);
    const auto loaded = store.load_newest();
    REQUIRE(loaded.has_value());
    CHECK(loaded->path.filename() == "step-00000020");
    const bool is_new = world.rank() == n - 1;
    CHECK(loaded->has_own == !is_new);
    CHECK(loaded->from_centre == is_new);
    if (!is_new) CHECK(same(loaded->own, own20));
  }
}

TEST_CASE("a part source maps the ranks onto the writing job's groups: a part several ranks take, and none",
          "[checkpoint-store]") {
  // The trainer's mapping under parallel.spatial (docs/training.md, "One sample across ranks"):
  // a rank takes the part of the writing job's group of its own group's index, that group's
  // first rank's part, or none where the writing job had fewer groups.
  const auto world = Communicator::world();
  const int n = world.size();
  SharedDir dir(world);
  const Topology topo = layout(blocks(n, 2));
  {
    CheckpointStore writer(dir.path, topo, 3);
    const checkpoint::CheckpointData own = own_of(world.rank(), 10);
    writer.save(10, shared_of(n, 10), &own);
  }
  // Written in groups of 2 ranks, read by ranks of whole samples: rank r takes group r's part
  // (rank 2r's); read by one group of every rank: each takes group 0's (rank 0's, read once).
  for (const int per_group_then : {2, n}) {
    for (const int per_group_now : {1, n}) {
      INFO("groups of " << per_group_then << " rank(s) read by groups of " << per_group_now);
      const int64_t group = world.rank() / per_group_now;
      const int64_t groups_then = n / per_group_then;
      CheckpointStore reader(dir.path, topo, 3, [&](const checkpoint::CheckpointData& shared) -> int64_t {
        CHECK(shared.integer("world_size") == n);
        return group < groups_then ? group * per_group_then : -1;
      });
      const auto loaded = reader.load_newest();
      REQUIRE(loaded.has_value());
      const bool has = group < groups_then;
      CHECK(loaded->has_own == has);
      CHECK(loaded->from_centre == !has);
      if (has) CHECK(same(loaded->own, own_of(static_cast<int>(group * per_group_then), 10)));
    }
  }
}

TEST_CASE("a checkpoints folder that cannot be made fails the save on every rank, naming it", "[checkpoint-store]") {
  const auto world = Communicator::world();
  SharedDir dir(world);
  if (world.rank() == 0) std::ofstream(dir.path / "checkpoints") << "not a folder\n";
  world.barrier();
  const Topology topo = layout(blocks(world.size(), 2));
  CheckpointStore store(dir.path, topo, 2);
  const checkpoint::CheckpointData own = own_of(world.rank(), 10);
  try {
    store.save(10, shared_of(world.size(), 10), &own);
    FAIL("the save did not throw");
  } catch (const squall::CollectiveError& e) {
    CHECK_THAT(e.what(), Catch::Contains("checkpoint of step 10 not written") && Catch::Contains("checkpoints") &&
                             Catch::Contains("there is no earlier checkpoint"));
  }
}

TEST_CASE("a checkpoint whose model.h5 says it has parts but holds no part file is reported", "[checkpoint-store]") {
  const auto world = Communicator::world();
  const int n = world.size();
  SharedDir dir(world);
  const Topology topo = layout(blocks(n, 2));
  CheckpointStore store(dir.path, topo, 2);
  const checkpoint::CheckpointData own = own_of(world.rank(), 10);
  const fs::path folder = store.save(10, shared_of(n, 10), &own);
  if (world.rank() == 0)
    for (int k = 0; k < topo.nodes(); ++k) fs::remove(CheckpointStore::node_file(folder, k));
  world.barrier();
  CHECK_THROWS_WITH(store.load(folder), Catch::Contains("step-00000010") && Catch::Contains("holds neither") &&
                                            Catch::Contains("node-00000.h5") && Catch::Contains("rank-00000.h5"));
}
