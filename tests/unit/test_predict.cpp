// `squall predict`'s pieces that need no model: the inputs a --data list names, and the
// connected regions of a class on a grid whose longitude wraps around; and the command's
// refusals and its inputs as a user meets them (a classifier's checkpoint, masks written into
// the input folder).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

#include "src/core/error.hpp"
#include "src/eval/predict.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace squall;

TEST_CASE("count_regions: 8-neighbours, and the longitude's two ends touch", "[predict]") {
  // 4 x 6, row-major; class 1 at the seam (columns 0 and 5 of row 1) is one region, a diagonal
  // pair is one region, a lone pixel another.
  const std::vector<uint8_t> m = {
      0, 0, 0, 0, 0, 0,  //
      1, 0, 0, 0, 0, 1,  //
      0, 0, 1, 0, 0, 0,  //
      0, 0, 0, 1, 0, 2,  //
  };
  CHECK(eval::count_regions(m.data(), 4, 6, 1) == 2);
  CHECK(eval::count_regions(m.data(), 4, 6, 2) == 1);
  CHECK(eval::count_regions(m.data(), 4, 6, 0) == 1);
  // Without the wrap the seam pair would be two: cut the grid to columns 0..4 of a copy.
  std::vector<uint8_t> cut = {1, 0, 0, 0, 1, 0};
  CHECK(eval::count_regions(cut.data(), 1, 6, 1) == 2);
  cut = {1, 0, 0, 0, 0, 1};
  CHECK(eval::count_regions(cut.data(), 1, 6, 1) == 1);
  // Nothing of that class: none.
  CHECK(eval::count_regions(m.data(), 4, 6, 3) == 0);
}

TEST_CASE("count_event_regions: every event class's regions in one pass, as count_regions counts them per class",
          "[predict]") {
  const std::vector<uint8_t> m = {
      0, 0, 0, 0, 0, 0,  //
      1, 0, 0, 0, 0, 1,  //
      0, 0, 1, 0, 0, 0,  //
      0, 0, 0, 1, 0, 2,  //
  };
  CHECK(eval::count_event_regions(m.data(), 4, 6, 3) == std::vector<int64_t>{0, 2, 1});
  // Random maps of 3 classes, from mostly background to mostly events, on grids whose width
  // makes the wrap degenerate (1 and 2 columns) and on wider ones; a value past the classes
  // (never an argmax) is left out, as a class of its own would be counted by count_regions.
  uint32_t state = 12345;
  const auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (const auto& [h, w] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 1}, {4, 2}, {1, 9}, {7, 13}, {32, 48}})
    for (const uint32_t background : {10u, 50u, 90u}) {
      INFO(h << " x " << w << ", " << background << "% background");
      std::vector<uint8_t> map(static_cast<size_t>(h * w));
      for (uint8_t& v : map) v = next() % 100 < background ? 0 : static_cast<uint8_t>(1 + (next() >> 8) % 2);
      const std::vector<int64_t> all = eval::count_event_regions(map.data(), h, w, 3);
      CHECK(all[0] == 0);
      for (uint8_t c = 1; c < 3; ++c) CHECK(all[c] == eval::count_regions(map.data(), h, w, c));
      map[0] = 7;
      const std::vector<int64_t> past = eval::count_event_regions(map.data(), h, w, 3);
      for (uint8_t c = 1; c < 3; ++c) CHECK(past[c] == eval::count_regions(map.data(), h, w, c));
    }
}

TEST_CASE("predict_inputs: files as given, folders' data files in name order, no stats.h5", "[predict]") {
  test::TempDir tmp("squall-predict-inputs");
  const std::filesystem::path dir = tmp.file("in");
  std::filesystem::create_directories(dir);
  for (const char* name : {"data-b.h5", "data-a.h5", "stats.h5", "notes.txt"}) std::ofstream(dir / name) << "x";
  const std::string lone = tmp.file("lone.h5");
  std::ofstream(lone) << "x";
  const auto files = eval::predict_inputs({lone, dir.string()});
  REQUIRE(files.size() == 3);
  CHECK(files[0] == lone);
  CHECK(std::filesystem::path(files[1]).filename() == "data-a.h5");
  CHECK(std::filesystem::path(files[2]).filename() == "data-b.h5");
  CHECK_THROWS_WITH(eval::predict_inputs({tmp.file("nowhere")}),
                    Catch::Contains("nowhere") && Catch::Contains("no such"));
  const std::filesystem::path empty = tmp.file("empty");
  std::filesystem::create_directories(empty);
  CHECK_THROWS_WITH(eval::predict_inputs({empty.string()}), Catch::Contains("no data files"));
}

namespace {

// Synthetic climate files (DeepCAM's layout) in `dir`: 4 samples of 16 x 24.
void make_climate(const std::string& dir) {
  const auto r = test::run_command(test::squall_bin() + " data climate --out " + dir + " --samples 4 --height 16 --width 24");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

}  // namespace

TEST_CASE("predict refuses a classifier's checkpoint with exit 2, naming its model.h5", "[predict]") {
  test::TempDir tmp("squall-predict-classifier");
  const std::string run = tmp.file("lenet");
  const auto t = test::run_command(test::squall_bin() + " train --config " + SQUALL_SOURCE_DIR +
                                   "/configs/fashion-mnist-lenet5.toml --set train.max_steps=2 --set data.test_samples=64" +
                                   " --set schedule.warmup_steps=0 --set run.dir=" + run);
  INFO(t.out << t.err);
  REQUIRE(t.exit_code == 0);
  make_climate(tmp.file("clim"));
  for (const std::string from : {"--run " + run, "--checkpoint " + run + "/checkpoints/step-00000002"}) {
    const auto r = test::run_command(test::squall_bin() + " predict " + from + " --data " + tmp.file("clim") +
                                     " --out " + tmp.file("masks"));
    INFO(from << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(run + "/checkpoints/step-00000002/model.h5 holds lenet5, a classifier") &&
                          Catch::Contains("cannot write masks") && Catch::Contains("unet"));
  }
}

TEST_CASE("predict --out into the input folder leaves the masks it wrote there out of the inputs", "[predict]") {
  test::TempDir tmp("squall-predict-same-folder");
  const std::string data = tmp.file("clim"), run = tmp.file("unet");
  make_climate(data);
  const auto t = test::run_command(test::squall_bin() + " train --config " + SQUALL_SOURCE_DIR +
                                   "/configs/climate-tiny.toml --set data.train=" + data + " --set data.test=" + data +
                                   " --set run.dir=" + run + " --set train.max_steps=2 --set train.batch_size=2" +
                                   " --set model.width=4 --set model.depth=2 --set schedule.warmup_steps=0");
  INFO(t.out << t.err);
  REQUIRE(t.exit_code == 0);
  const std::string predict = test::squall_bin() + " predict --run " + run + " --data " + data + " --out " + data;
  // Twice in netCDF, then in HDF5: each run reads the 4 inputs and nothing it wrote.
  for (const std::string format : {"nc", "nc", "h5"}) {
    const auto r = test::run_command(predict + " --format " + format);
    INFO(format << ": " << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains(": 4 files,") && !Catch::Contains("-mask-mask") &&
                          !Catch::Contains("-mask.nc ->") && !Catch::Contains("-mask.h5 ->"));
  }
  CHECK_FALSE(std::filesystem::exists(data + "/data-000000-mask-mask.nc"));
  for (const char* mask : {"/data-000000-mask.nc", "/data-000000-mask.h5"}) {
    // A mask named on its own is refused, naming it.
    const auto r = test::run_command(test::squall_bin() + " predict --run " + run + " --data " + data + mask +
                                     " --out " + tmp.file("again"));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(data + mask) && Catch::Contains("a mask file squall predict wrote"));
  }
}
