#pragma once
// Files that are either whole or absent: written under a temporary name, flushed to storage
// (fsync), then renamed into place, and the rename itself made durable by syncing the
// directory. A crash, a kill or a full disk at any moment leaves the old file (or none), never
// half of a new one (docs/design.md, "Failure behaviour"). Errors name the path and the
// system's reason ("No space left on device").
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

// errno's text for the last failed system call ("No space left on device").
std::string errno_text();

}  // namespace squall
