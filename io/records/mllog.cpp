#include "io/records/mllog.hpp"

#include <algorithm>

#include "src/core/clock.hpp"
#include "src/core/error.hpp"

namespace squall::records {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// squall's source folder with a trailing '/', as the compiler was given it: this file is
// io/records/mllog.cpp in it. Empty when the name does not end so. Only an absolute folder is of use:
// relative names (ccache's base_dir makes them) are relative to each file's own build folder.
std::string_view source_root() {
  const std::string_view self = __FILE__;
  const size_t at = self.rfind("io/records/mllog.cpp");
  return at == std::string_view::npos ? std::string_view() : self.substr(0, at);
}

// ASCII only (the parser reads Latin-1), and a string that is not UTF-8 is written with
// replacement characters rather than failing the log call.
template <typename Json>
std::string dump(const Json& j) {
  return j.dump(-1, ' ', true, Json::error_handler_t::replace);
}

}  // namespace

std::string_view ml_event_name(MlEvent type) {
  switch (type) {
    case MlEvent::point: return "POINT_IN_TIME";
    case MlEvent::interval_start: return "INTERVAL_START";
    case MlEvent::interval_end: return "INTERVAL_END";
  }
  return "POINT_IN_TIME";
}

std::string mllog_source_file(std::string_view file) {
  const std::string_view root = source_root();
  if (root.starts_with('/') && file.starts_with(root)) return std::string(file.substr(root.size()));
  while (file.starts_with("./") || file.starts_with("../")) file.remove_prefix(file.starts_with("./") ? 2 : 3);
  return std::string(file);
}

std::string mllog_line(MlEvent type, std::string_view key, const json& value, const json& metadata, int64_t time_ms,
                       std::string_view file, int line, std::string_view name_space) {
  if (!metadata.is_null() && !metadata.is_object())
    throw Error("MLPerf log: the metadata of \"" + std::string(key) + "\" must be a JSON object, not " + dump(metadata));
  // The caller's place first, then the given metadata, which may override it (as the package does).
  nlohmann::ordered_json meta;
  meta["file"] = std::string(file);
  meta["lineno"] = line;
  if (metadata.is_object())
    for (const auto& [k, v] : metadata.items()) meta[k] = v;
  // The package's field order and separators (Python's json.dumps), so that lines from squall
  // and from the reference implementations look alike.
  std::string out = ":::MLLOG {\"namespace\": " + dump(json(std::string(name_space)));
  out += ", \"time_ms\": " + std::to_string(time_ms);
  out += ", \"event_type\": \"" + std::string(ml_event_name(type)) + "\"";
  out += ", \"key\": " + dump(json(std::string(key)));
  out += ", \"value\": " + dump(value);
  out += ", \"metadata\": " + dump(meta) + "}\n";
  return out;
}

// O_APPEND in both cases (LineFile): a line lands after every line already there, also those of
// another process that appends to the same file.
MlLog::MlLog(const fs::path& file, bool append) : m_file(file, append, "the MLPerf log") {}

void MlLog::write(MlEvent type, std::string_view key, const json& value, const json& metadata, int64_t time_ms,
                  const std::source_location& where) {
  m_file.write(mllog_line(type, key, value, metadata, time_ms, mllog_source_file(where.file_name()),
                          static_cast<int>(where.line()), m_namespace));
}

void MlLog::log_at(double time_s, MlEvent type, std::string_view key, const json& value, const json& metadata,
                   std::source_location where) {
  write(type, key, value, metadata, static_cast<int64_t>(time_s * 1000.0), where);
}

void MlLog::log(MlEvent type, std::string_view key, const json& value, const json& metadata,
                std::source_location where) {
  m_last_ms = std::max(m_last_ms, static_cast<int64_t>(system_seconds() * 1000.0));
  write(type, key, value, metadata, m_last_ms, where);
}

}  // namespace squall::records
