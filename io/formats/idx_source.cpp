// Fashion-MNIST in IDX format (LeCun's MNIST layout), as Debian's dataset-fashion-mnist
// installs it: {train,t10k}-{images-idx3,labels-idx1}-ubyte, gzipped or not. The whole split
// is small (47 MB for train) so it is read once into memory; read() then only converts.
#include <zlib.h>

#include <array>
#include <cstring>
#include <filesystem>

#include "io/formats/dataset.hpp"
#include "src/core/error.hpp"

namespace squall::formats {

using data::DataSource;
using data::DatasetInfo;
namespace {

constexpr uint32_t k_images_magic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t k_labels_magic = 0x00000801;  // unsigned byte, 1 dimension
constexpr float k_mean = 0.2860f, k_std = 0.3530f;  // of the training set's pixels in [0, 1]
constexpr int64_t k_idx_classes = 10;

const std::vector<std::string>& class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

std::string package_hint() { return "install Debian's dataset-fashion-mnist package"; }

// The file for `stem`, uncompressed or with .gz (gzread reads both).
std::string find_file(const std::string& dir, const std::string& stem) {
  for (const std::string& candidate : {dir + "/" + stem, dir + "/" + stem + ".gz"})
    if (std::filesystem::is_regular_file(candidate)) return candidate;
  throw Error(dir + "/" + stem + "(.gz): not found; " + package_hint());
}

class GzFile {
 public:
  explicit GzFile(const std::string& path) : m_path(path), m_file(gzopen(path.c_str(), "rb")) {
    if (!m_file) throw Error(path + ": cannot open: " + std::strerror(errno));
  }
  ~GzFile() { if (m_file) gzclose(m_file); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Exactly `count` bytes or an error naming the file and what was being read.
  void read(void* dst, size_t count, const char* what) {
    auto* out = static_cast<unsigned char*>(dst);
    size_t done = 0;
    while (done < count) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(count - done, 1u << 30));
      const int got = gzread(m_file, out + done, chunk);
      if (got < 0) {
        int code = 0;
        throw Error(m_path + ": corrupt (reading " + what + "): " + gzerror(m_file, &code));
      }
      if (got == 0)
        throw Error(m_path + ": truncated: " + what + " needs " + std::to_string(count) + " bytes, file has " +
                    std::to_string(done));
      done += static_cast<size_t>(got);
    }
  }
  uint32_t read_u32(const char* what) {
    std::array<unsigned char, 4> b{};
    read(b.data(), 4, what);
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};  // big-endian
  }

 private:
  std::string m_path;
  gzFile m_file;
};

class IdxSource final : public data::DataSource {
 public:
  IdxSource(const std::string& dir, const std::string& split) {
    if (split != "train" && split != "test")
      throw Error("IDX split must be \"train\" or \"test\" (got \"" + split + "\")");
    if (!std::filesystem::is_directory(dir)) throw Error(dir + ": no such directory; " + package_hint());
    const std::string prefix = split == "train" ? "train" : "t10k";
    const std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte");
    const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");

    GzFile images(images_path);
    const uint32_t magic = images.read_u32("the header");
    if (magic != k_images_magic)
      throw Error(images_path + ": not an IDX image file (magic " + hex(magic) + ", expected " + hex(k_images_magic) + ")");
    m_count = images.read_u32("the header");
    m_rows = images.read_u32("the header");
    m_cols = images.read_u32("the header");
    if (m_count == 0 || m_rows == 0 || m_cols == 0 || m_rows > 4096 || m_cols > 4096)
      throw Error(images_path + ": implausible dimensions " + std::to_string(m_count) + " x " +
                  std::to_string(m_rows) + " x " + std::to_string(m_cols));
    m_pixels.resize(static_cast<size_t>(m_count) * m_rows * m_cols);
    images.read(m_pixels.data(), m_pixels.size(), "the pixels");

    GzFile labels(labels_path);
    const uint32_t lmagic = labels.read_u32("the header");
    if (lmagic != k_labels_magic)
      throw Error(labels_path + ": not an IDX label file (magic " + hex(lmagic) + ", expected " + hex(k_labels_magic) + ")");
    const uint32_t lcount = labels.read_u32("the header");
    if (lcount != m_count)
      throw Error(labels_path + ": holds " + std::to_string(lcount) + " labels but " + images_path + " holds " +
                  std::to_string(m_count) + " images");
    m_labels.resize(m_count);
    labels.read(m_labels.data(), m_labels.size(), "the labels");
    for (size_t i = 0; i < m_labels.size(); ++i)
      if (m_labels[i] >= k_idx_classes)
        throw Error(labels_path + ": label " + std::to_string(m_labels[i]) + " of sample " + std::to_string(i) +
                    " is outside [0, " + std::to_string(k_idx_classes) + ")");

    m_info.sample = nn::Shape(1, 1, m_rows, m_cols);
    m_info.classes = k_idx_classes;
    m_info.class_names = class_names();
    m_info.per_pixel_labels = false;
    m_info.description = "Fashion-MNIST " + split + " (IDX, " + std::to_string(m_count) + " samples, " + dir + ")";
    m_images_path = images_path;
    m_norm = {"zscore", {k_mean}, {k_std}, 1.0f / 255.0f, "Fashion-MNIST training set (fixed constants)"};
  }

  const data::DatasetInfo& info() const override { return m_info; }
  const data::Normalization& normalization() const override { return m_norm; }
  int64_t size() const override { return m_count; }

  void read(std::span<const int64_t> indices, float* images, int32_t* labels) const override {
    const size_t per = static_cast<size_t>(m_rows) * m_cols;
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t i = indices[k];
      if (i < 0 || i >= static_cast<int64_t>(m_count))
        throw Error(m_images_path + ": sample index " + std::to_string(i) + " outside [0, " + std::to_string(m_count) + ")");
      const unsigned char* src = m_pixels.data() + static_cast<size_t>(i) * per;
      float* dst = images + k * per;
      for (size_t p = 0; p < per; ++p) dst[p] = (static_cast<float>(src[p]) / 255.0f - k_mean) / k_std;
      labels[k] = m_labels[static_cast<size_t>(i)];
    }
  }

 private:
  static std::string hex(uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", v);
    return buf;
  }

  data::DatasetInfo m_info;
  data::Normalization m_norm;
  uint32_t m_count = 0, m_rows = 0, m_cols = 0;
  std::vector<unsigned char> m_pixels;  // [count, rows, cols] as stored
  std::vector<unsigned char> m_labels;
  std::string m_images_path;
};

}  // namespace

std::unique_ptr<data::DataSource> open_idx(const std::string& dir, const std::string& split) {
  return std::make_unique<IdxSource>(dir, split);
}

}  // namespace squall::formats
