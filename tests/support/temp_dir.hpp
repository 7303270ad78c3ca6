#pragma once
// A fresh folder under the system's temporary directory, removed with everything in it when
// the object goes. `prefix` names it after the test that made it ("squall-shards-1234...").
#include <filesystem>
#include <random>
#include <string>

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

}  // namespace squall::test
