// The PNG writer (io/pictures/png.hpp), decoded here with zlib to check what it claims, and the
// predictions picture (io/pictures/prediction_picture.hpp): its size, its panels and north up.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <cstring>

#include "io/pictures/png.hpp"
#include "src/core/error.hpp"
#include "io/pictures/prediction_picture.hpp"

using namespace squall;

namespace {

uint32_t get32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | uint32_t{b[at + 3]};
}

// Decodes what encode_png writes (8-bit RGB, filter 0), checking every chunk's CRC.
pictures::RgbImage decode(const std::vector<uint8_t>& png) {
  const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  REQUIRE(png.size() > 8);
  REQUIRE(std::memcmp(png.data(), signature, 8) == 0);
  pictures::RgbImage img;
  std::vector<uint8_t> idat;
  bool ended = false;
  for (size_t at = 8; at < png.size();) {
    const uint32_t len = get32(png, at);
    const std::string type(reinterpret_cast<const char*>(png.data() + at + 4), 4);
    const uint8_t* data = png.data() + at + 8;
    const uLong crc = crc32(crc32(0L, Z_NULL, 0), png.data() + at + 4, len + 4);
    CHECK(get32(png, at + 8 + len) == static_cast<uint32_t>(crc));
    if (type == "IHDR") {
      img.width = get32(png, at + 8);
      img.height = get32(png, at + 12);
      CHECK(data[8] == 8);  // bit depth
      CHECK(data[9] == 2);  // RGB
    } else if (type == "IDAT") {
      idat.insert(idat.end(), data, data + len);
    } else if (type == "IEND") {
      ended = true;
    }
    at += 12 + len;
  }
  CHECK(ended);
  const size_t row = static_cast<size_t>(img.width) * 3;
  std::vector<uint8_t> raw((row + 1) * static_cast<size_t>(img.height));
  uLongf size = raw.size();
  REQUIRE(uncompress(raw.data(), &size, idat.data(), idat.size()) == Z_OK);
  REQUIRE(size == raw.size());
  for (int64_t y = 0; y < img.height; ++y) {
    CHECK(raw[static_cast<size_t>(y) * (row + 1)] == 0);  // filter type none
    img.rgb.insert(img.rgb.end(), raw.begin() + static_cast<long>(y * (row + 1) + 1),
                   raw.begin() + static_cast<long>((y + 1) * (row + 1)));
  }
  return img;
}

std::vector<uint8_t> pixel(const pictures::RgbImage& img, int64_t x, int64_t y) {
  const uint8_t* p = img.rgb.data() + (y * img.width + x) * 3;
  return {p[0], p[1], p[2]};
}

}  // namespace

TEST_CASE("png: what encode_png writes decodes to the same pixels", "[png]") {
  pictures::RgbImage img(5, 3, 0);
  for (int64_t y = 0; y < 3; ++y)
    for (int64_t x = 0; x < 5; ++x)
      img.set(x, y, static_cast<uint8_t>(40 * x), static_cast<uint8_t>(80 * y), static_cast<uint8_t>(x + y));
  const pictures::RgbImage back = decode(pictures::encode_png(img));
  CHECK(back.width == 5);
  CHECK(back.height == 3);
  CHECK(back.rgb == img.rgb);
  CHECK_THROWS_AS(pictures::encode_png(pictures::RgbImage()), Error);
}

TEST_CASE("the predictions picture: channel, labels and predictions side by side, north up", "[png]") {
  const int64_t h = 4, w = 6;
  std::vector<pictures::PredictionSample> samples(2);
  for (auto& s : samples) {
    s.channel.assign(h * w, 0.0f);
    s.label.assign(h * w, 0);
    s.pred.assign(h * w, 0);
  }
  samples[0].channel[(h - 1) * w + 0] = 10.0f;  // the northernmost row, first column: brightest
  samples[0].label[(h - 1) * w + 1] = 1;         // a cyclone pixel in the label ...
  samples[0].pred[0 * w + 2] = 2;                // ... and a river in the prediction, southernmost row
  samples[1].label[5] = -1;                      // an ignored pixel
  const pictures::RgbImage img = decode(pictures::encode_png(pictures::prediction_picture(samples, h, w)));
  CHECK(img.width == 3 * w + 2 * pictures::k_gap);
  CHECK(img.height == 2 * h + pictures::k_gap);
  const int64_t label_x = w + pictures::k_gap, pred_x = 2 * (w + pictures::k_gap);
  CHECK(pixel(img, 0, 0) == std::vector<uint8_t>{255, 255, 255});      // the channel's maximum, at the top
  CHECK(pixel(img, 1, 0) == std::vector<uint8_t>{0, 0, 0});            // its minimum elsewhere
  CHECK(pixel(img, label_x + 1, 0) == std::vector<uint8_t>{230, 50, 40});       // cyclone: red, top row
  CHECK(pixel(img, pred_x + 2, h - 1) == std::vector<uint8_t>{40, 120, 240});   // river: blue, bottom row
  CHECK(pixel(img, label_x, 0) == std::vector<uint8_t>{127, 127, 127});  // background: the channel dimmed
  CHECK(pixel(img, w, 0) == std::vector<uint8_t>{255, 255, 255});      // the gap between panels is white
  // Sample 1's ignored pixel (grid row 0, column 5) is black, on its strip's bottom row.
  CHECK(pixel(img, label_x + 5, h + pictures::k_gap + h - 1) == std::vector<uint8_t>{0, 0, 0});
  samples[1].pred.pop_back();
  CHECK_THROWS_AS(pictures::prediction_picture(samples, h, w), Error);
}
