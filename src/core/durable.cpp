#include "src/core/durable.hpp"

#include <fstream>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "src/core/error.hpp"

namespace squall {
namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

namespace {

void sync_path(const fs::path& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw Error(path.string() + ": cannot open " + what + " to flush it: " + errno_text());
  const bool ok = ::fsync(fd) == 0;
  const std::string why = ok ? std::string() : errno_text();
  ::close(fd);
  if (!ok) throw Error(path.string() + ": cannot flush " + what + " to storage: " + why);
}

}  // namespace

void sync_file(const fs::path& path) { sync_path(path, O_RDONLY, "the file"); }

void sync_dir(const fs::path& dir) { sync_path(dir.empty() ? fs::path(".") : dir, O_RDONLY | O_DIRECTORY, "the directory"); }

void write_all(int fd, const std::string& text, const fs::path& path) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(path.string() + ": cannot write: " + errno_text());
    done += static_cast<size_t>(n);
  }
}

void rename_durably(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw Error(to.string() + ": cannot rename " + from.string() + " into place: " + ec.message());
  sync_dir(to.parent_path());
}

void write_file_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path.string() + ": cannot create " + tmp.string() + ": " + errno_text());
  bool open = true;
  try {
    write_all(fd, text, path);
    if (::fsync(fd) != 0) throw Error(path.string() + ": cannot write: " + errno_text());
    open = false;  // closed below, whatever close says: never twice (another thread may reuse the number)
    if (::close(fd) != 0) throw Error(path.string() + ": cannot write: " + errno_text());
  } catch (...) {
    if (open) ::close(fd);
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  try {
    rename_durably(tmp, path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

LineFile::LineFile(const fs::path& path, bool keep, const std::string& what) : m_path(path) {
  m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (keep ? 0 : O_TRUNC), 0644);
  if (m_fd < 0) throw Error(path.string() + ": cannot open " + what + ": " + errno_text());
}

LineFile::~LineFile() { ::close(m_fd); }

void LineFile::write(const std::string& line) {
  write_all(m_fd, line, m_path);
  ++m_lines;
}

void keep_first_lines(const std::filesystem::path& file, int64_t lines) {
  std::ifstream in(file, std::ios::binary);
  std::string kept, line;
  for (int64_t n = 0; n < lines && std::getline(in, line); ++n) kept += line + "\n";
  in.close();
  write_file_atomic(file, kept);
}

}  // namespace squall
