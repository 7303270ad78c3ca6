// `squall predict`'s pieces that need no model: the inputs a --data list names, and the
// connected regions of a class on a grid whose longitude wraps around.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

#include "src/core/error.hpp"
#include "src/eval/predict.hpp"
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
