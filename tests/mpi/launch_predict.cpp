// `squall predict`: a small climate run's checkpoint applied to held-out files writes one mask
// per file whose IoU against the labels is exactly what `squall eval` scores, with the grid,
// the class names and the softmax; the same files without labels, on 2 ranks, give the same
// masks; bad arguments end with exit 2 naming the thing.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "io/deepcam_file.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using nlohmann::json;
using squall::test::mpiexec;
using squall::test::run_command;
using squall::test::squall_bin;
using squall::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string k_climate = std::string(SQUALL_SOURCE_DIR) + "/configs/climate-tiny.toml";

void must_run(const std::string& cmd) {
  const auto r = run_command(cmd);
  INFO(cmd << "\n" << r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

// A mask file's /mask [t, h, w], /probabilities [t, c, h, w] (empty when absent) and the
// class names.
struct Mask {
  std::vector<hsize_t> dims;
  std::vector<uint8_t> mask;
  std::vector<float> probabilities;
  bool has_lat = false, has_lon = false;
  std::string model;
};

Mask read_mask(const std::string& path) {
  Mask m;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t ds = H5Dopen2(f, "/mask", H5P_DEFAULT);
  REQUIRE(ds >= 0);
  const hid_t space = H5Dget_space(ds);
  m.dims.resize(3);
  REQUIRE(H5Sget_simple_extent_ndims(space) == 3);
  H5Sget_simple_extent_dims(space, m.dims.data(), nullptr);
  m.mask.resize(m.dims[0] * m.dims[1] * m.dims[2]);
  REQUIRE(H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.mask.data()) >= 0);
  H5Sclose(space);
  H5Dclose(ds);
  if (H5Lexists(f, "/probabilities", H5P_DEFAULT) > 0) {
    const hid_t p = H5Dopen2(f, "/probabilities", H5P_DEFAULT);
    m.probabilities.resize(m.mask.size() * 3);
    REQUIRE(H5Dread(p, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.probabilities.data()) >= 0);
    H5Dclose(p);
  }
  m.has_lat = H5Lexists(f, "/lat", H5P_DEFAULT) > 0;
  m.has_lon = H5Lexists(f, "/lon", H5P_DEFAULT) > 0;
  H5Fclose(f);
  return m;
}

// The data file `src` copied to `dst` without /climate/labels_0: new simulation output.
void copy_without_labels(const fs::path& src, const fs::path& dst) {
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
  const hid_t f = H5Fopen(dst.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  REQUIRE(H5Ldelete(f, "/climate/labels_0", H5P_DEFAULT) >= 0);
  H5Fclose(f);
}

}  // namespace

TEST_CASE("predict writes masks that score exactly what eval scores, with or without labels, on 1 or 2 ranks",
          "[launch][predict]") {
  TempDir tmp("squall-launch-predict");
  const std::string bin = squall_bin();
  for (const auto& [split, samples, seed] : {std::tuple{"train", 8, 3}, std::tuple{"test", 4, 4}}) {
    must_run(bin + " data climate --out " + tmp.file(std::string("raw-") + split) + " --samples " +
             std::to_string(samples) + " --height 16 --width 24 --seed " + std::to_string(seed));
    must_run(bin + " data label --in " + tmp.file(std::string("raw-") + split) + " --out " + tmp.file(split));
  }
  const std::string run = tmp.file("run");
  must_run(bin + " train --config " + k_climate + " --set data.train=" + tmp.file("train") +
           " --set data.test=" + tmp.file("test") + " --set run.dir=" + run +
           " --set train.max_steps=4 --set train.batch_size=4 --set model.width=8 --set model.depth=2" +
           " --set schedule.warmup_steps=0");

  const auto ev = run_command(bin + " eval --run " + run + " --json");
  INFO(ev.out << ev.err);
  REQUIRE(ev.exit_code == 0);
  const json e = json::parse(ev.out);

  const std::string masks = tmp.file("masks");
  const auto p = run_command(bin + " predict --run " + run + " --data " + tmp.file("test") + " --out " + masks +
                             " --probabilities --png");
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, Catch::Contains("-mask.h5: 1 time step; background ") && Catch::Contains(" regions)") &&
                        Catch::Contains("4 files, masks in " + masks));

  // IoU from the masks against the labels: the confusion matrix eval builds.
  int64_t cm[3][3] = {};
  std::vector<std::vector<uint8_t>> labelled_masks;
  for (int i = 0; i < 4; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "data-%06d", i);
    const std::string input = tmp.file("test") + "/" + name + ".h5";
    const Mask m = read_mask(masks + "/" + name + "-mask.h5");
    REQUIRE(fs::exists(masks + "/" + name + "-mask.png"));
    CHECK(m.dims == std::vector<hsize_t>{1, 16, 24});
    CHECK((m.has_lat && m.has_lon));
    const std::vector<int32_t> labels = squall::io::read_deepcam_labels(input);
    REQUIRE(labels.size() == m.mask.size());
    for (size_t k = 0; k < labels.size(); ++k) ++cm[labels[k]][m.mask[k]];
    // The softmax: sums to 1, and its largest class is the mask's.
    const size_t hw = m.mask.size();
    size_t bad_sum = 0, bad_argmax = 0;
    for (size_t k = 0; k < hw; ++k) {
      const float a = m.probabilities[k], b = m.probabilities[hw + k], c = m.probabilities[2 * hw + k];
      bad_sum += std::abs(a + b + c - 1.0f) > 1e-5f;
      const int best = a >= b && a >= c ? 0 : (b >= c ? 1 : 2);
      bad_argmax += best != m.mask[k];
    }
    CHECK(bad_sum == 0);
    CHECK(bad_argmax == 0);
    labelled_masks.push_back(m.mask);
  }
  const json& iou = e.at("test_iou_per_class");
  for (int c = 0; c < 3; ++c) {
    int64_t row = 0, col = 0;
    for (int k = 0; k < 3; ++k) {
      row += cm[c][k];
      col += cm[k][c];
    }
    const int64_t uni = row + col - cm[c][c];
    INFO("class " << c);
    if (uni == 0) continue;
    CHECK(static_cast<double>(cm[c][c]) / static_cast<double>(uni) == Approx(iou.at(c).get<double>()).epsilon(1e-12));
  }

  // The same files without labels, on 2 ranks: the same masks.
  const fs::path bare = tmp.file("bare");
  fs::create_directories(bare);
  for (int i = 0; i < 4; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "data-%06d.h5", i);
    copy_without_labels(fs::path(tmp.file("test")) / name, bare / name);
  }
  const std::string masks2 = tmp.file("masks2");
  const auto p2 = run_command(mpiexec(2) + " " + bin + " predict --run " + run + " --data " + bare.string() +
                              " --out " + masks2);
  INFO(p2.out << p2.err);
  REQUIRE(p2.exit_code == 0);
  for (int i = 0; i < 4; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "data-%06d-mask.h5", i);
    const Mask m = read_mask(masks2 + "/" + name);
    CHECK(m.mask == labelled_masks[static_cast<size_t>(i)]);
    CHECK(m.probabilities.empty());
  }

  // Usage errors name what is wrong.
  const auto missing = run_command(bin + " predict --run " + run + " --data " + tmp.file("nowhere") + " --out " + masks2);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("nowhere"));
  const auto both = run_command(bin + " predict --run " + run + " --checkpoint x --data " + bare.string() + " --out " + masks2);
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.err, Catch::Contains("not both"));
}
