// The three ways a shard sample is read (cached in memory; streamed chunk by chunk with the
// filters undone by squall; streamed through HDF5 when the layout is unusual) must return
// exactly what was written, for every sample type, filter pipeline and label kind.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include "io/formats/dataset.hpp"
#include "io/formats/shard.hpp"

using namespace squall;

namespace {

struct Written {
  std::vector<float> images;    // normalised as the reader must return them
  std::vector<int32_t> labels;
};

}  // namespace

TEST_CASE("cached and streamed shard reads agree with what was written", "[io]") {
  const auto dir = std::filesystem::temp_directory_path() / "squall-test-shard-paths";
  struct Case { formats::SampleType type; int compression; bool per_pixel; };
  for (const Case c : {Case{formats::SampleType::uint8, 0, false}, Case{formats::SampleType::uint8, 5, false},
                       Case{formats::SampleType::float32, 0, true}, Case{formats::SampleType::float32, 3, true}}) {
    INFO("type " << (c.type == formats::SampleType::uint8 ? "uint8" : "float32") << " compression " << c.compression
                 << (c.per_pixel ? " per-pixel labels" : ""));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const nn::Shape sample(1, 3, 5, 7);
    const int64_t per = sample.per_sample(), plane = 35, shards = 2, per_shard = 9;
    formats::ShardMeta meta;
    meta.class_names = {"a", "b", "c", "d"};
    meta.channel_names = {"x", "y", "z"};
    meta.mean = {10.0f, 20.0f, 30.0f};
    meta.std = {2.0f, 4.0f, 5.0f};
    meta.min = {0, 0, 0};
    meta.max = {255, 255, 255};
    Written w;
    std::mt19937 rng(5);
    for (int s = 0; s < shards; ++s) {
      formats::ShardWriter writer((dir / formats::shard_name("train", s, static_cast<int>(shards))).string(), sample,
                                  c.type, c.per_pixel, c.compression, meta);
      for (int i = 0; i < per_shard; ++i) {
        std::vector<uint8_t> u8(static_cast<size_t>(per));
        std::vector<float> f32(static_cast<size_t>(per));
        for (int64_t k = 0; k < per; ++k) {
          u8[static_cast<size_t>(k)] = static_cast<uint8_t>(rng() % 256);
          f32[static_cast<size_t>(k)] = static_cast<float>(rng() % 100000) / 37.0f;
        }
        std::vector<int32_t> lab(static_cast<size_t>(c.per_pixel ? plane : 1));
        for (auto& l : lab) l = static_cast<int32_t>(rng() % 4);
        if (c.type == formats::SampleType::uint8)
          writer.append(u8.data(), lab.data());
        else
          writer.append(f32.data(), lab.data());
        for (int64_t k = 0; k < per; ++k) {
          const size_t ch = static_cast<size_t>(k / plane);
          const float raw = c.type == formats::SampleType::uint8 ? static_cast<float>(u8[static_cast<size_t>(k)])
                                                            : f32[static_cast<size_t>(k)];
          w.images.push_back((raw - meta.mean[ch]) * (1.0f / meta.std[ch]));
        }
        w.labels.insert(w.labels.end(), lab.begin(), lab.end());
      }
      writer.close();
    }
    for (const int64_t cache : {int64_t{1} << 30, int64_t{0}}) {
      INFO((cache ? "cached" : "streamed"));
      formats::OpenOptions options;
      options.cache_bytes = cache;
      const auto source = formats::open_shards(dir.string(), "train", options);
      REQUIRE(source->size() == shards * per_shard);
      const int64_t n = source->size(), label_count = c.per_pixel ? plane : 1;
      std::vector<int64_t> indices(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) indices[static_cast<size_t>(i)] = (i * 7) % n;  // out of order, across shards
      std::vector<float> images(static_cast<size_t>(n * per));
      std::vector<int32_t> labels(static_cast<size_t>(n * label_count));
      source->read(indices, images.data(), labels.data());
      int mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t src = indices[static_cast<size_t>(i)];
        for (int64_t k = 0; k < per; ++k)
          mismatches += images[static_cast<size_t>(i * per + k)] != Approx(w.images[static_cast<size_t>(src * per + k)]).epsilon(1e-6);
        for (int64_t k = 0; k < label_count; ++k)
          mismatches += labels[static_cast<size_t>(i * label_count + k)] != w.labels[static_cast<size_t>(src * label_count + k)];
      }
      CHECK(mismatches == 0);
    }
  }
  std::filesystem::remove_all(dir);
}
