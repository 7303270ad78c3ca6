// PNG: signature, IHDR, one IDAT (zlib stream of filter-0 scanlines), IEND; each chunk's CRC
// is zlib's crc32 over its type and data (the PNG specification's CRC).
#include "io/pictures/png.hpp"

#include <zlib.h>

#include <cstdio>
#include <filesystem>

#include "src/core/error.hpp"

namespace squall::pictures {
namespace {

void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void chunk(std::vector<uint8_t>& out, const char type[5], const std::vector<uint8_t>& data) {
  put32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), out.data() + start, static_cast<uInt>(out.size() - start));
  put32(out, static_cast<uint32_t>(crc));
}

}  // namespace

std::vector<uint8_t> encode_png(const RgbImage& image) {
  if (image.width < 1 || image.height < 1 || image.width > 0x7fffffff || image.height > 0x7fffffff ||
      image.rgb.size() != static_cast<size_t>(image.width * image.height * 3))
    throw Error("png: bad image " + std::to_string(image.width) + "x" + std::to_string(image.height) + " with " +
                std::to_string(image.rgb.size()) + " bytes");
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put32(ihdr, static_cast<uint32_t>(image.width));
  put32(ihdr, static_cast<uint32_t>(image.height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, filter method 0, no interlace
  chunk(out, "IHDR", ihdr);
  // Scanlines, each with filter type 0 (none).
  const size_t row = static_cast<size_t>(image.width) * 3;
  std::vector<uint8_t> raw;
  raw.reserve((row + 1) * static_cast<size_t>(image.height));
  for (int64_t y = 0; y < image.height; ++y) {
    raw.push_back(0);
    const uint8_t* p = image.rgb.data() + static_cast<size_t>(y) * row;
    raw.insert(raw.end(), p, p + row);
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> idat(size);
  if (compress2(idat.data(), &size, raw.data(), static_cast<uLong>(raw.size()), 6) != Z_OK)
    throw Error("png: zlib could not compress the image");
  idat.resize(size);
  chunk(out, "IDAT", idat);
  chunk(out, "IEND", {});
  return out;
}

void write_png(const std::string& path, const RgbImage& image) {
  const std::vector<uint8_t> bytes = encode_png(image);
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(path + ": cannot create " + tmp);
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot rename from " + tmp + ": " + ec.message());
}

}  // namespace squall::pictures
