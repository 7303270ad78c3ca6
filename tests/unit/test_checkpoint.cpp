// Checkpoint files (io/checkpoint/checkpoint_file.hpp): what is written is read back exactly, and a
// truncated or corrupt file is an error naming it; the learner group's state (learners.hpp,
// save_shared/save_own/restore) restored into a fresh group continues bit for bit.
// tests/mpi/launch_checkpoint.cpp checks whole jobs: crash, resume, signals, full disks.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "io/checkpoint/checkpoint_file.hpp"
#include "src/core/error.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

checkpoint::CheckpointData sample_data() {
  checkpoint::CheckpointData d;
  std::vector<float> big((size_t{1} << 20) + 5);  // more than one chunk
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25f - 3.0f;
  d.arrays["central/params"] = big;
  d.arrays["learner_1/optimizer/momentum"] = {1.5f, -2.0f, 1e-30f};
  d.arrays["central/state"] = {};  // a model without BatchNorm
  d.ints["step"] = 45;
  d.ints["negative"] = -7;
  d.reals["loss_scale"] = 65536.0;
  d.reals["window_loss_sum"] = 0.1 + 0.2;  // not a float: kept as a double
  d.texts["config"] = "[run]\ndir = \"runs/x\"\n";
  return d;
}

void flip_byte(const fs::path& file, uintmax_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  char byte = 0;
  f.seekg(static_cast<std::streamoff>(at));
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x41);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&byte, 1);
}

}  // namespace

TEST_CASE("a checkpoint file reads back exactly what was written", "[checkpoint]") {
  test::TempDir t("squall-ckfile");
  const checkpoint::CheckpointData d = sample_data();
  checkpoint::write_checkpoint_file(t.file("model.h5"), d);
  const checkpoint::CheckpointData r = checkpoint::read_checkpoint_file(t.file("model.h5"));
  CHECK(r.arrays == d.arrays);
  CHECK(r.ints == d.ints);
  CHECK(r.reals == d.reals);
  CHECK(r.texts == d.texts);
  CHECK(r.origin == t.file("model.h5"));
  CHECK(r.array("learner_1/optimizer/momentum", 3)[2] == 1e-30f);
  CHECK_THROWS_WITH(r.array("central/params", 7), Contains(t.file("model.h5")) && Contains("central/params") &&
                                                      Contains("expected 7"));
  CHECK_THROWS_WITH(r.integer("epoch"), Contains("epoch") && Contains("missing"));

  // The broadcast form carries the same.
  const checkpoint::CheckpointData b = checkpoint::CheckpointData::deserialize(d.serialize(), "sent");
  CHECK(b.arrays == d.arrays);
  CHECK(b.ints == d.ints);
  CHECK(b.reals == d.reals);
  CHECK(b.texts == d.texts);
  CHECK_THROWS_WITH(checkpoint::CheckpointData::deserialize(d.serialize().substr(0, 100), "sent"),
                    Contains("cut short"));
}

TEST_CASE("a truncated, corrupt or foreign checkpoint file is an error naming it", "[checkpoint]") {
  test::TempDir t("squall-ckbad");
  const fs::path file = t.file("model.h5");
  checkpoint::write_checkpoint_file(file.string(), sample_data());
  const uintmax_t size = fs::file_size(file);

  SECTION("truncated") {
    fs::resize_file(file, size / 2);
    CHECK_THROWS_WITH(checkpoint::read_checkpoint_file(file.string()), Contains(file.string()));
  }
  SECTION("a byte flipped inside the data: the chunk's Fletcher-32 sum finds it") {
    flip_byte(file, size / 2);  // inside central/params, 4 MiB of the file's 4 MiB
    CHECK_THROWS_WITH(checkpoint::read_checkpoint_file(file.string()),
                      Contains(file.string()) && Contains("central/params") && Contains("corrupt"));
  }
  SECTION("not HDF5 at all") {
    std::ofstream(file, std::ios::trunc) << "not a checkpoint";
    CHECK_THROWS_WITH(checkpoint::read_checkpoint_file(file.string()),
                      Contains(file.string()) && Contains("not an HDF5 file"));
  }
  SECTION("missing") {
    CHECK_THROWS_WITH(checkpoint::read_checkpoint_file(t.file("absent.h5")), Contains("absent.h5"));
  }
  SECTION("written where it cannot be: the reason is named and no file is left") {
    CHECK_THROWS_WITH(checkpoint::write_checkpoint_file(t.file("no/such/dir/model.h5"), sample_data()),
                      Contains("no/such/dir/model.h5") && Contains("cannot write"));
    CHECK_FALSE(fs::exists(t.file("no/such/dir/model.h5")));
  }
}

TEST_CASE("a learner group restored from its saved state continues bit for bit", "[checkpoint][learners]") {
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  const int64_t b = 4;
  optim::OptimizerConfig sgd = test::plain_sgd();
  sgd.momentum = 0.9;  // optimizer state that must travel
  parallel::LearnerGroupOptions o;
  o.learners = 2;
  const auto algorithm = GENERATE(parallel::Algorithm::ssgd, parallel::Algorithm::sma, parallel::Algorithm::local_sgd);
  o.algorithm = algorithm;
  o.period = algorithm == parallel::Algorithm::ssgd ? 1 : 2;
  o.start_step = algorithm == parallel::Algorithm::local_sgd ? 2 : 0;
  INFO(parallel::algorithm_name(algorithm));

  parallel::LearnerGroup a(*backend, test::make_tiny_graph, b, b, sgd, {}, o, alone);
  checkpoint::CheckpointData shared, own;
  bool per_rank = false;
  for (int64_t step = 0; step < 8; ++step) {
    a.step(test::tiny_step(0, 2, step, b).inputs, step, 0.1f);
    if (step == 4) {
      a.save_shared(shared);
      per_rank = a.replicas_differ();
      if (per_rank) a.save_own(own);
    }
  }
  CHECK(per_rank == (algorithm != parallel::Algorithm::ssgd));  // local-sgd is past its warm-up at step 4

  parallel::LearnerGroup c(*backend, test::make_tiny_graph, b, b, sgd, {}, o, alone);
  shared.origin = "saved";
  c.restore(shared, per_rank ? &own : nullptr);
  for (int64_t step = 5; step < 8; ++step) c.step(test::tiny_step(0, 2, step, b).inputs, step, 0.1f);
  CHECK(test::max_diff(a.central_params(), c.central_params(), a.param_arena_floats()) == 0.0);
  for (int j = 0; j < 2; ++j) CHECK(test::max_diff(a.replica_params(j), c.replica_params(j), a.param_arena_floats()) == 0.0);

  // Without its momentum the continuation differs: the test sees the optimizer state.
  if (!per_rank) {
    checkpoint::CheckpointData no_momentum = shared;
    for (auto& [name, values] : no_momentum.arrays)
      if (name.find("optimizer") != std::string::npos) std::fill(values.begin(), values.end(), 0.0f);
    parallel::LearnerGroup d(*backend, test::make_tiny_graph, b, b, sgd, {}, o, alone);
    d.restore(no_momentum, nullptr);
    for (int64_t step = 5; step < 8; ++step) d.step(test::tiny_step(0, 2, step, b).inputs, step, 0.1f);
    CHECK(test::max_diff(a.central_params(), d.central_params(), a.param_arena_floats()) > 0.0);
  }

  // State of another shape is refused, naming the checkpoint and the entry.
  parallel::LearnerGroupOptions three = o;
  three.learners = 3;
  parallel::LearnerGroup e(*backend, test::make_tiny_graph, b, b, sgd, {}, three, alone);
  CHECK_THROWS_WITH(e.restore(shared, per_rank ? &own : nullptr), Contains("saved") && Contains("learner"));
  checkpoint::CheckpointData cut = shared;
  cut.arrays.erase("central/params");
  parallel::LearnerGroup f(*backend, test::make_tiny_graph, b, b, sgd, {}, o, alone);
  if (!per_rank) CHECK_THROWS_WITH(f.restore(cut, nullptr), Contains("central/params") && Contains("missing"));
}

TEST_CASE("checkpoints hold the arenas packed, as earlier versions wrote them", "[checkpoint][learners][alignment]") {
  // In memory the tiny model's bias starts at a 256-byte boundary (float 64), after padding; a
  // checkpoint holds weight then bias back to back (15 values), which is also what squall wrote
  // before the tensors were aligned: such a checkpoint must resume bit for bit.
  REQUIRE(test::k_tiny_bias > test::k_tiny_in * test::k_tiny_out);
  auto backend = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  const int64_t b = 4;
  optim::OptimizerConfig sgd = test::plain_sgd();
  sgd.momentum = 0.9;
  parallel::LearnerGroupOptions o;
  o.learners = 2;
  o.algorithm = parallel::Algorithm::sma;  // a central model of its own, and per-rank parts
  o.period = 2;
  // The layout of earlier versions, written out here: each tensor right after the one before.
  auto packed_by_hand = [](const float* arena_mem) {
    const std::vector<float> arena = test::on_host(arena_mem, test::k_tiny_arena);
    std::vector<float> out(arena.begin(), arena.begin() + test::k_tiny_in * test::k_tiny_out);
    out.insert(out.end(), arena.begin() + test::k_tiny_bias, arena.begin() + test::k_tiny_bias + test::k_tiny_out);
    return out;
  };

  parallel::LearnerGroup a(*backend, test::make_tiny_graph, b, b, sgd, {}, o, alone);
  for (int64_t step = 0; step < 3; ++step) a.step(test::tiny_step(0, 2, step, b).inputs, step, 0.1f);
  checkpoint::CheckpointData shared, own;
  a.save_shared(shared);
  a.save_own(own);
  REQUIRE(a.replicas_differ());
  for (const char* name : {"central/params", "central/z", "central/z_prev"})
    CHECK(shared.array(name, test::k_tiny_params).size() == test::k_tiny_params);
  CHECK(shared.arrays.at("central/params") == packed_by_hand(a.central_params()));
  for (int j = 0; j < 2; ++j)
    CHECK(own.arrays.at("learner_" + std::to_string(j) + "/params") == packed_by_hand(a.replica_params(j)));

  // Restored: the same arenas, padding zero, and the same steps after.
  parallel::LearnerGroup c(*backend, test::make_tiny_graph, b, b, sgd, {}, o, alone);
  c.restore(shared, &own);
  CHECK(test::on_host(c.central_params(), test::k_tiny_arena) == test::on_host(a.central_params(), test::k_tiny_arena));
  for (int64_t step = 3; step < 7; ++step) {
    a.step(test::tiny_step(0, 2, step, b).inputs, step, 0.1f);
    c.step(test::tiny_step(0, 2, step, b).inputs, step, 0.1f);
  }
  CHECK(test::max_diff(a.central_params(), c.central_params(), test::k_tiny_arena) == 0.0);
  for (int j = 0; j < 2; ++j)
    CHECK(test::max_diff(a.replica_params(j), c.replica_params(j), test::k_tiny_arena) == 0.0);

  // An array of the arena's length (padding included) is no checkpoint of this model.
  checkpoint::CheckpointData padded = shared;
  padded.origin = "padded.h5";
  padded.arrays["central/z"] = test::on_host(a.central_params(), test::k_tiny_arena);
  parallel::LearnerGroup d(*backend, test::make_tiny_graph, b, b, sgd, {}, o, alone);
  CHECK_THROWS_WITH(d.restore(padded, &own), Contains("padded.h5") && Contains("central/z") &&
                                                 Contains(std::to_string(test::k_tiny_arena) + " values"));
}
