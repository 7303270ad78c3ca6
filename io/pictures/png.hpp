#pragma once
// A minimal PNG writer (8-bit RGB, no interlace, one IDAT deflated by zlib): enough for the
// pictures squall writes into run directories (predictions/epoch-N.png, docs/training.md).
#include <cstdint>
#include <string>
#include <vector>

namespace squall::pictures {

// An RGB image, row-major from the top row, 3 bytes per pixel.
struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
  RgbImage() = default;
  RgbImage(int64_t w, int64_t h, uint8_t fill = 0)
      : width(w), height(h), rgb(static_cast<size_t>(w * h * 3), fill) {}
  void set(int64_t x, int64_t y, uint8_t r, uint8_t g, uint8_t b) {
    uint8_t* p = rgb.data() + (y * width + x) * 3;
    p[0] = r;
    p[1] = g;
    p[2] = b;
  }
};

// The PNG file's bytes.
std::vector<uint8_t> encode_png(const RgbImage& image);
// Written to `path`.tmp and renamed; throws squall::Error naming the path.
void write_png(const std::string& path, const RgbImage& image);

}  // namespace squall::pictures
