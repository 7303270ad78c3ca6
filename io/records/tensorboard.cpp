#include "io/records/tensorboard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "io/records/tensorboard_event.pb.h"
#include "src/core/clock.hpp"
#include "src/core/durable.hpp"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::records {
namespace fs = std::filesystem;

namespace {

// ---- CRC-32C, slicing by 8 -------------------------------------------------------------------
// Debian ships no CRC-32C library. Table k maps a byte to its CRC after k more zero bytes, so
// eight table lookups fold eight input bytes at once (Intel's "slicing-by-8"); the tables are
// built at compile time from the reflected Castagnoli polynomial.
constexpr uint32_t k_castagnoli = 0x82F63B78u;

constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ k_castagnoli : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k)
    for (size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  return t;
}

constexpr auto k_tables = make_tables();

constexpr uint32_t k_mask_delta = 0xa282ead8u;  // TFRecord's masking constant

void put_le32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_le64(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

constexpr size_t k_flush_bytes = 64 * 1024;  // buffered records written at this size

// A suffix lands in the file name, so it must not leave the directory or hide the name.
void check_suffix(const std::string& suffix, const fs::path& dir) {
  if (suffix.find('/') != std::string::npos || suffix.find('\0') != std::string::npos)
    throw Error(dir.string() + ": TensorBoard file suffix \"" + suffix + "\" must not hold '/' or NUL");
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  const auto& t = k_tables;
  crc = ~crc;
  if constexpr (std::endian::native == std::endian::little) {
    for (; n >= 8; n -= 8, p += 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      w ^= crc;
      crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
            t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    }
  }
  for (; n > 0; --n, ++p) crc = (crc >> 8) ^ t[0][(crc ^ *p) & 0xff];
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + k_mask_delta;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& dir, const std::string& suffix) {
  check_suffix(suffix, dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create the TensorBoard directory: " + ec.message());

  // O_EXCL: a file of an earlier attempt is never appended to or truncated.
  const std::string host = process_host().empty() ? std::string("localhost") : process_host();
  auto seconds = static_cast<long long>(system_seconds());
  for (int attempt = 0;; ++attempt, ++seconds) {
    char stamp[32];
    std::snprintf(stamp, sizeof(stamp), "%010lld", seconds);
    m_path = dir / ("events.out.tfevents." + std::string(stamp) + "." + host + (suffix.empty() ? "" : "." + suffix));
    m_fd = ::open(m_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (m_fd >= 0) break;
    if (errno != EEXIST || attempt >= 1000)
      throw Error(m_path.string() + ": cannot create the TensorBoard event file: " + errno_text());
  }

  squall::tb::Event version;
  version.set_wall_time(system_seconds());
  version.set_file_version("brain.Event:2");
  try {
    append_record(version.SerializeAsString());
    flush();
  } catch (...) {
    ::close(m_fd);
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    if (m_failure.empty()) flush();
  } catch (const std::exception& e) {
    log::warn(std::string("TensorBoard records lost: ") + e.what());
  }
  ::close(m_fd);
}

void TensorBoardWriter::check_usable() const {
  if (!m_failure.empty()) throw Error(m_path.string() + ": not written to after an earlier failure: " + m_failure);
}

namespace {

// The Event of one summary value at `step`: the caller sets what the value holds.
squall::tb::Summary::Value* one_value(squall::tb::Event& event, const std::string& tag, int64_t step,
                                      double wall_time_s) {
  event.set_wall_time(wall_time_s);
  event.set_step(step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  return v;
}

}  // namespace

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value, double wall_time_s) {
  check_usable();
  squall::tb::Event event;
  one_value(event, tag, step, wall_time_s)->set_simple_value(static_cast<float>(value));
  append_event(event.SerializeAsString());
}

void TensorBoardWriter::text(const std::string& tag, int64_t step, const std::string& markdown, double wall_time_s) {
  check_usable();
  squall::tb::Event event;
  auto* v = one_value(event, tag, step, wall_time_s);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  squall::tb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(squall::tb::DT_STRING);
  t->mutable_tensor_shape();  // no dimensions: a scalar
  t->add_string_val(markdown);
  append_event(event.SerializeAsString());
}

void TensorBoardWriter::append_event(const std::string& event) {
  append_record(event);
  if (m_pending.size() >= k_flush_bytes) flush();
}

// TFRecord framing: uint64 length, masked CRC of those 8 bytes, the data, masked CRC of the
// data; all little-endian.
void TensorBoardWriter::append_record(const std::string& data) {
  char header[12];
  put_le64(header, data.size());
  put_le32(header + 8, masked_crc32c(header, 8));
  char footer[4];
  put_le32(footer, masked_crc32c(data.data(), data.size()));
  m_pending.append(header, sizeof(header));
  m_pending.append(data);
  m_pending.append(footer, sizeof(footer));
}

void TensorBoardWriter::flush() {
  check_usable();
  if (m_pending.empty()) return;
  try {
    write_all(m_fd, m_pending, m_path);
  } catch (const Error& e) {
    // Part of the buffer may be in the file: appending the rest, or anything else, would put
    // records behind a broken one, where no reader finds them.
    m_failure = e.what();
    m_pending.clear();
    throw;
  }
  m_pending.clear();
}

}  // namespace squall::records
