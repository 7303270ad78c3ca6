#include "io/input/stage.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/core/durable.hpp"

#include "src/core/error.hpp"

namespace squall::input {
namespace fs = std::filesystem;
namespace {

constexpr size_t k_chunk = size_t{8} << 20;  // large reads: staging is bandwidth-bound

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

// Closes the descriptor on every path out, errors included.
class Fd {
 public:
  Fd(const std::string& path, int flags, mode_t mode = 0644) : m_fd(::open(path.c_str(), flags | O_CLOEXEC, mode)) {
    if (m_fd < 0) throw Error(sys_error("cannot open", path));
  }
  ~Fd() {
    if (m_fd >= 0) ::close(m_fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return m_fd; }
  void close(const std::string& path) {
    const int fd = m_fd;
    m_fd = -1;
    if (::close(fd) != 0) throw Error(sys_error("cannot close", path));
  }

 private:
  int m_fd;
};

// read() until `n` bytes or end of file; returns the bytes read.
size_t read_full(int fd, char* buf, size_t n, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(sys_error("cannot read", path));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

void write_full(int fd, const char* buf, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Error(sys_error("cannot write", path));
    buf += w;
    n -= static_cast<size_t>(w);
  }
}

uint32_t crc_update(uint32_t crc, const char* buf, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(buf), n));
}

// Copies src to tmp, returning the digest of what was read from src.
FileDigest copy_with_digest(const std::string& src, const std::string& tmp) {
  Fd in(src, O_RDONLY);
  Fd out(tmp, O_WRONLY | O_CREAT | O_TRUNC);
  std::vector<char> buf(k_chunk);
  FileDigest d;
  d.crc32 = static_cast<uint32_t>(crc32_z(0, nullptr, 0));
  for (;;) {
    const size_t n = read_full(in.get(), buf.data(), buf.size(), src);
    if (n == 0) break;
    d.crc32 = crc_update(d.crc32, buf.data(), n);
    d.size += static_cast<int64_t>(n);
    write_full(out.get(), buf.data(), n, tmp);
  }
  if (::fsync(out.get()) != 0) throw Error(sys_error("cannot fsync", tmp));
  // Drop the copy from the page cache so that the verification reads the device, not memory.
  ::posix_fadvise(out.get(), 0, 0, POSIX_FADV_DONTNEED);
  out.close(tmp);
  return d;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // some file systems do not allow it; the rename is still atomic
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

FileDigest digest_file(const std::string& path) {
  Fd in(path, O_RDONLY);
  std::vector<char> buf(k_chunk);
  FileDigest d;
  d.crc32 = static_cast<uint32_t>(crc32_z(0, nullptr, 0));
  for (;;) {
    const size_t n = read_full(in.get(), buf.data(), buf.size(), path);
    if (n == 0) break;
    d.crc32 = crc_update(d.crc32, buf.data(), n);
    d.size += static_cast<int64_t>(n);
  }
  return d;
}

StagedFile stage_file(const std::string& source, const std::string& dest_dir, int writer) {
  StagedFile r;
  r.source = source;
  r.destination = (fs::path(dest_dir) / fs::path(source).filename()).string();
  std::error_code ec;
  if (!fs::is_regular_file(source, ec)) throw Error("cannot stage '" + source + "': not a readable file");

  // Skip only a verified identical copy: same size is cheap to check, the checksum is not,
  // so compare it only when the sizes already agree.
  const auto dest_size = fs::file_size(r.destination, ec);
  if (!ec && dest_size == fs::file_size(source)) {
    const FileDigest have = digest_file(r.destination);
    const FileDigest want = digest_file(source);
    if (have == want) {
      r.bytes = want.size;
      return r;
    }
  }

  const std::string tmp = r.destination + ".rank" + std::to_string(writer) + ".tmp";
  try {
    const FileDigest copied = copy_with_digest(source, tmp);
    const FileDigest check = digest_file(tmp);
    if (!(check == copied))
      throw Error("verification of the copy of '" + source + "' at '" + tmp + "' failed: " +
                  std::to_string(check.size) + " bytes with CRC-32 " + std::to_string(check.crc32) +
                  ", expected " + std::to_string(copied.size) + " bytes with CRC-32 " +
                  std::to_string(copied.crc32));
    if (::rename(tmp.c_str(), r.destination.c_str()) != 0) throw Error(sys_error("cannot rename into", r.destination));
    fsync_dir(dest_dir);
    r.copied = true;
    r.bytes = copied.size;
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  return r;
}

std::string expand_node_placeholder(const std::string& to, int node) {
  static const std::string key = "{node}";
  std::string out = to;
  for (size_t pos = out.find(key); pos != std::string::npos; pos = out.find(key, pos)) {
    const std::string n = std::to_string(node);
    out.replace(pos, key.size(), n);
    pos += n.size();
  }
  return out;
}

std::vector<std::string> files_to_stage(const data::DataSource& source, const Sampler& sampler, int node) {
  const std::vector<std::string> all = source.files();
  std::vector<std::string> out;
  std::set<std::string> dirs;
  for (const int i : sampler.files_for_node(node)) {
    const std::string& path = all.at(static_cast<size_t>(i));
    out.push_back(path);
    dirs.insert(fs::path(path).parent_path().string());
  }
  std::error_code ec;
  for (const std::string& dir : dirs) {
    const fs::path stats = fs::path(dir) / "stats.h5";
    if (fs::is_regular_file(stats, ec)) out.push_back(stats.string());
  }
  return out;
}

void write_stage_record(const std::string& dir, const StageRecord& r) {
  const nlohmann::json j{{"start_ms", r.start_ms}, {"stop_ms", r.stop_ms}, {"files", r.files},
                         {"bytes", r.bytes},       {"source", r.source}};
  write_file_atomic(std::filesystem::path(dir) / k_stage_record, j.dump(2) + "\n");
}

std::optional<StageRecord> read_stage_record(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / k_stage_record;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  const auto integer = [&](const char* key) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer())
      throw Error(path.string() + ": not a stage record (no integer '" + key + "'; written by squall stage)");
    return j[key].get<int64_t>();
  };
  StageRecord r;
  r.start_ms = integer("start_ms");
  r.stop_ms = integer("stop_ms");
  r.files = integer("files");
  r.bytes = integer("bytes");
  r.source = j.value("source", "");
  return r;
}

}  // namespace squall::input
