// detect_format: what a dataset folder holds, from file names only (nothing is opened).
#include <algorithm>
#include <filesystem>
#include <regex>

#include "io/formats/dataset.hpp"
#include "io/formats/shard.hpp"

namespace squall::formats {
namespace {

namespace fs = std::filesystem;

const std::regex& shard_pattern() {
  static const std::regex pattern(R"(^(.+)-(\d{5})-of-(\d{5})\.h5$)");
  return pattern;
}

bool is_deepcam_name(const std::string& name) {
  return name.size() > 8 && name.rfind("data-", 0) == 0 && name.substr(name.size() - 3) == ".h5";
}

}  // namespace

DatasetFormat detect_format(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    const std::string name = fs::path(path).filename().string();
    if (std::regex_match(name, shard_pattern())) return DatasetFormat::shards;
    if (is_deepcam_name(name)) return DatasetFormat::deepcam;
    if (name.find("-images-idx3-ubyte") != std::string::npos) return DatasetFormat::idx;
    if (fs::path(name).extension() == ".nc") return DatasetFormat::netcdf;
    return DatasetFormat::none;
  }
  if (!fs::is_directory(path, ec)) return DatasetFormat::none;
  for (const char* stem : {"train-images-idx3-ubyte", "t10k-images-idx3-ubyte"})
    for (const char* ext : {"", ".gz"})
      if (fs::is_regular_file(fs::path(path) / (std::string(stem) + ext), ec)) return DatasetFormat::idx;
  bool deepcam = false, netcdf = false;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, shard_pattern())) return DatasetFormat::shards;
    deepcam = deepcam || is_deepcam_name(name);
    netcdf = netcdf || fs::path(name).extension() == ".nc";
  }
  return deepcam ? DatasetFormat::deepcam : netcdf ? DatasetFormat::netcdf : DatasetFormat::none;
}

std::vector<std::string> list_shards(const std::string& dir, const std::string& split) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const std::string name = entry.path().filename().string();
    std::smatch m;
    if (std::regex_match(name, m, shard_pattern()) && (split.empty() || m[1].str() == split))
      out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> list_deepcam_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec) && is_deepcam_name(entry.path().filename().string()))
      out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace squall::formats
