// MLPerf logs (io/records/mllog.hpp): each line is ":::MLLOG " and one JSON object with the fields the
// mlperf_logging package writes, in its order; the log writes one line per call, stamped with
// non-decreasing times and the caller's place, and names the file when it cannot write. The
// package's own parser reads the lines in tests/records (peer:records).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/records/mllog.hpp"
#include "src/core/error.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_dir.hpp"

using namespace squall;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string k_prefix = ":::MLLOG ";

json parse_line(const std::string& line) {
  REQUIRE(line.starts_with(k_prefix));
  return json::parse(line.substr(k_prefix.size()));
}

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("an MLPerf log line has the package's fields in its order", "[mllog]") {
  const std::string line = records::mllog_line(records::MlEvent::interval_end, records::mlkey::run_stop, nullptr,
                                          {{records::mlmeta::status, records::mlmeta::success}, {"epoch_num", 3}},
                                          1712345678901, "src/train/trainer.cpp", 123);
  REQUIRE(line.ends_with("\n"));
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);
  const json j = parse_line(line.substr(0, line.size() - 1));
  CHECK(j.size() == 6);
  CHECK(j.at("namespace") == "");
  CHECK(j.at("time_ms").is_number_integer());
  CHECK(j.at("time_ms") == 1712345678901);
  CHECK(j.at("event_type") == "INTERVAL_END");
  CHECK(j.at("key") == "run_stop");
  CHECK(j.at("value").is_null());
  CHECK(j.at("metadata") == json({{"file", "src/train/trainer.cpp"}, {"lineno", 123}, {"status", "success"},
                                  {"epoch_num", 3}}));
  // The order Python's mllog writes: namespace, time_ms, event_type, key, value, metadata; file
  // and lineno first in the metadata.
  size_t at = 0;
  for (const char* field : {"\"namespace\": ", "\"time_ms\": ", "\"event_type\": ", "\"key\": ", "\"value\": ",
                            "\"metadata\": {\"file\":", "\"lineno\":"}) {
    const size_t found = line.find(field, at);
    INFO(field);
    REQUIRE(found != std::string::npos);
    at = found;
  }
  CHECK(line.starts_with(":::MLLOG {\"namespace\": \"\", \"time_ms\": 1712345678901, \"event_type\": \"INTERVAL_END\""));
}

TEST_CASE("MLPerf log values: any JSON, ASCII on the line, non-finite numbers as null", "[mllog]") {
  CHECK(records::ml_event_name(records::MlEvent::point) == "POINT_IN_TIME");
  CHECK(records::ml_event_name(records::MlEvent::interval_start) == "INTERVAL_START");
  CHECK(records::ml_event_name(records::MlEvent::interval_end) == "INTERVAL_END");

  const json values[] = {256, 0.1, "LAMB", json::array({0.9, 0.999}), json{{"a", 1}}, true, nullptr};
  for (const json& v : values) {
    const json j = parse_line(records::mllog_line(records::MlEvent::point, "k", v, nullptr, 1, "f.cpp", 1));
    CHECK(j.at("value") == v);
    CHECK(j.at("event_type") == "POINT_IN_TIME");
  }
  // 0.1 keeps every digit: the parser reads back the same double.
  CHECK(parse_line(records::mllog_line(records::MlEvent::point, "k", 0.1, nullptr, 1, "f", 1))
            .at("value")
            .get<double>() == 0.1);

  const std::string text = "Zürich \xce\xbb";  // UTF-8
  const std::string line = records::mllog_line(records::MlEvent::point, "submission_platform", text, nullptr, 1, "f", 1,
                                          "GPU0");
  CHECK(std::all_of(line.begin(), line.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  const json j = parse_line(line);
  CHECK(j.at("value") == text);
  CHECK(j.at("namespace") == "GPU0");

  CHECK(parse_line(records::mllog_line(records::MlEvent::point, "k", std::nan(""), nullptr, 1, "f", 1))
            .at("value")
            .is_null());
  CHECK(parse_line(records::mllog_line(records::MlEvent::point, "k", INFINITY, nullptr, 1, "f", 1))
            .at("value")
            .is_null());
  // Bytes that are not UTF-8 do not fail the call.
  CHECK(parse_line(records::mllog_line(records::MlEvent::point, "k", std::string("a\xff"), nullptr, 1, "f", 1))
            .at("value")
            .is_string());
}

TEST_CASE("MLPerf log metadata: the caller's place, overridable, and only an object", "[mllog]") {
  json j = parse_line(records::mllog_line(records::MlEvent::point, "k", 1, {{"lineno", 7}}, 1, "a.cpp", 99));
  CHECK(j.at("metadata") == json({{"file", "a.cpp"}, {"lineno", 7}}));
  j = parse_line(records::mllog_line(records::MlEvent::point, "k", 1, json::object(), 1, "a.cpp", 99));
  CHECK(j.at("metadata") == json({{"file", "a.cpp"}, {"lineno", 99}}));
  REQUIRE_THROWS_WITH(records::mllog_line(records::MlEvent::point, "epoch_start", 1, json::array({1}), 1, "a.cpp", 1),
                      Catch::Contains("epoch_start") && Catch::Contains("JSON object"));

  CHECK(records::mllog_source_file("../../../src/train/trainer.cpp") == "src/train/trainer.cpp");
  CHECK(records::mllog_source_file("./io/records/mllog.cpp") == "io/records/mllog.cpp");
  CHECK(records::mllog_source_file("/elsewhere/x.cpp") == "/elsewhere/x.cpp");
  CHECK(records::mllog_source_file(__FILE__) == "tests/unit/test_mllog.cpp");
}

TEST_CASE("MlLog writes one whole line per call, with non-decreasing times and the caller's line", "[mllog]") {
  test::TempDir tmp("squall-mllog");
  const fs::path path = tmp.path / "mllog.txt";
  int where[4];
  {
    records::MlLog log(path, false);
    CHECK(log.path() == path);
    const json epoch = {{records::mlmeta::epoch_num, 1}};
    where[0] = __LINE__, log.start(records::mlkey::init_start);
    where[1] = __LINE__, log.point(records::mlkey::global_batch_size, 256);
    where[2] = __LINE__, log.end(records::mlkey::init_stop);
    where[3] = __LINE__, log.log(records::MlEvent::interval_start, records::mlkey::epoch_start, nullptr, epoch);
    CHECK(log.lines() == 4);
    // Each call is in the file when it returns.
    CHECK(read_lines(path).size() == 4);
  }
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 4);
  const char* keys[] = {"init_start", "global_batch_size", "init_stop", "epoch_start"};
  const char* types[] = {"INTERVAL_START", "POINT_IN_TIME", "INTERVAL_END", "INTERVAL_START"};
  int64_t last = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const json j = parse_line(lines[i]);
    INFO(lines[i]);
    CHECK(j.at("key") == keys[i]);
    CHECK(j.at("event_type") == types[i]);
    CHECK(j.at("metadata").at("file") == "tests/unit/test_mllog.cpp");
    CHECK(j.at("metadata").at("lineno") == where[i]);
    const int64_t t = j.at("time_ms").get<int64_t>();
    CHECK(t >= last);
    CHECK(t > 1600000000000);  // milliseconds since the epoch, not seconds
    last = t;
  }
  CHECK(parse_line(lines[1]).at("value") == 256);
  CHECK(parse_line(lines[3]).at("metadata").at("epoch_num") == 1);

  // append keeps the earlier lines (a resumed run); otherwise the file starts empty.
  {
    records::MlLog log(path, true);
    log.point(records::mlkey::seed, 42);
  }
  CHECK(read_lines(path).size() == 5);
  {
    records::MlLog log(path, false);
    log.point(records::mlkey::seed, 42);
  }
  CHECK(read_lines(path).size() == 1);
}

TEST_CASE("MlLog's failures name the file", "[mllog]") {
  test::TempDir tmp("squall-mllog");
  const fs::path missing = tmp.path / "no" / "such" / "mllog.txt";
  REQUIRE_THROWS_WITH(records::MlLog(missing, false), Catch::Contains(missing.string()));
  records::MlLog log(tmp.path / "ok.txt", false);
  REQUIRE_THROWS_WITH(log.point("eval_accuracy", 0.5, json(3)), Catch::Contains("eval_accuracy"));
  CHECK(read_lines(tmp.path / "ok.txt").empty());
}

TEST_CASE("MlLog on a full disk: the write is an error naming the file", "[mllog]") {
  // /dev/full takes the open and refuses every write with ENOSPC, as a full file system does.
  if (!fs::exists("/dev/full")) SQUALL_SKIP("no /dev/full on this machine");
  records::MlLog full("/dev/full", true);
  REQUIRE_THROWS_WITH(full.point(records::mlkey::run_start),
                      Catch::Contains("/dev/full") && Catch::Contains("No space left on device"));
  CHECK(full.lines() == 0);
}
