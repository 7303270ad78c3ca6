#pragma once
// A fresh folder under the system's temporary directory, removed with everything in it when
// the object goes. `prefix` names it after the test that made it ("squall-shards-1234...").
#include <filesystem>
#include <random>
#include <string>

#include <unistd.h>

namespace squall::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "squall-test") {
    path = std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// A path under the system's temporary directory, "squall-<name>-<pid>", with nothing at it (an
// earlier run's leftovers are removed): for a command under test to create, e.g. as run.dir.
// The same name gives the same path within a process; the caller removes it.
inline std::string fresh_dir(const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("squall-" + name + "-" + std::to_string(::getpid()));
  std::error_code ignored;
  std::filesystem::remove_all(d, ignored);
  return d.string();
}

}  // namespace squall::test
