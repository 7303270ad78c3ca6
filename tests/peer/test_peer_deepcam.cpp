// open_deepcam against DeepCAM-layout files written by h5py and the tensors numpy expects
// (tests/peer/gen_deepcam.py): channels-last to CHW, zscore and minmax normalisation from
// stats.h5, float and integer labels.
#include <catch2/catch.hpp>

#include "io/formats/dataset.hpp"
#include "io/formats/inspect.hpp"
#include "tests/support/peer.hpp"

TEST_CASE("DeepCAM files read as numpy expects", "[peer][io]") {
  const std::string dir = std::string(SQUALL_PEER_DIR) + "/deepcam";
  const auto cases = squall::test::load_peer_cases(dir);
  REQUIRE(cases.size() == 3);
  CHECK(squall::formats::detect_format(dir) == squall::formats::DatasetFormat::deepcam);

  for (const char* mode : {"raw", "zscore", "minmax"}) {
    const std::string m = mode;
    const auto* kind = squall::data::k_normalization_kinds.find(m);  // null: raw
    auto src = squall::formats::open_deepcam(
        dir, squall::formats::OpenOptions{kind != nullptr, kind ? *kind : squall::data::NormalizationKind::zscore});
    REQUIRE(src->size() == 3);
    const auto& info = src->info();
    CHECK(info.sample == squall::nn::Shape(1, 16, 16, 24));
    CHECK(info.classes == 3);
    CHECK(info.per_pixel_labels);
    CHECK(src->file_offsets() == std::vector<int64_t>{0, 1, 2, 3});
    for (const auto& pc : cases) {
      DYNAMIC_SECTION(m << " " << pc.name) {
        const int64_t index = pc.params.at("index").get<int64_t>();
        CHECK(src->files()[static_cast<size_t>(index)] == dir + "/" + pc.params.at("file").get<std::string>());
        std::vector<float> image(16 * 16 * 24);
        std::vector<int32_t> labels(16 * 24);
        src->read(std::span<const int64_t>(&index, 1), image.data(), labels.data());
        const auto& want = pc.at(m);
        REQUIRE(want.data.size() == image.size());
        if (m == "raw") CHECK(image == want.data);
        else CHECK(squall::test::closeness(image, want.data, 1e-6, 1e-6) <= 1.0);
        const auto& want_labels = pc.at("labels").data;
        for (size_t p = 0; p < labels.size(); ++p) REQUIRE(labels[p] == static_cast<int32_t>(want_labels[p]));
      }
    }
  }

  const auto report = squall::formats::inspect_paths({dir});
  CHECK(report.format == squall::formats::DatasetFormat::deepcam);
  CHECK(report.samples == 3);
  CHECK(report.errors.empty());
  CHECK(report.stored.mean.size() == 16);
}
