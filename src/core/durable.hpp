#pragma once
// Files that are either whole or absent: written under a temporary name, flushed to storage
// (fsync), then renamed into place, and the rename itself made durable by syncing the
// directory. A crash, a kill or a full disk at any moment leaves the old file (or none), never
// half of a new one (docs/design.md, "Failure behaviour"); and logs that grow by whole lines
// (LineFile). Errors name the path and the system's reason ("No space left on device").
#include <cstdint>
#include <filesystem>
#include <string>

namespace squall {

// fsync of a file or a directory; throws squall::Error naming `path` and errno's text.
void sync_file(const std::filesystem::path& path);
void sync_dir(const std::filesystem::path& dir);

// Writes all of `text` to the open file `fd` (retrying short writes and EINTR); throws
// squall::Error naming `path` and errno's text.
void write_all(int fd, const std::string& text, const std::filesystem::path& path);

// Renames `from` to `to` and syncs the directory of `to`; throws squall::Error naming both.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

// Writes `text` to `path` atomically: `path`.tmp, write, fsync, rename, sync the directory.
// On failure the temporary file is removed and the old `path` (if any) is untouched.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

// Keeps the first `lines` lines of the file, atomically (metrics.jsonl when resuming: the
// records written after the checkpoint are written again by the resumed run).
void keep_first_lines(const std::filesystem::path& file, int64_t lines);

// errno's text for the last failed system call ("No space left on device").
std::string errno_text();

// A file that only grows by whole lines (metrics.jsonl, the MLPerf log): opened O_APPEND, each
// line written with one write(2), so that a crashed run keeps every line it wrote whole and two
// processes appending to one file do not cut each other's lines. A failed write (a full disk)
// is a squall::Error naming the file, never a silent gap.
class LineFile {
 public:
  // Opens (creating) `path`; `keep` keeps what is there, else it is emptied. `what` names the
  // file in the error of a failed open ("the MLPerf log").
  LineFile(const std::filesystem::path& path, bool keep, const std::string& what);
  ~LineFile();
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;

  void write(const std::string& line);          // `line` ends with '\n'
  int64_t lines() const { return m_lines; }      // lines in the file: those written, after set_lines
  void set_lines(int64_t n) { m_lines = n; }     // the lines `keep` found (the caller knows them)
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
  int m_fd = -1;
  int64_t m_lines = 0;
};

}  // namespace squall
