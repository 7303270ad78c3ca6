// TensorBoard event files (io/records/tensorboard.hpp): the CRC-32C against published vectors and a
// bit-at-a-time reference, and the files read back here by a TFRecord reader of the test's own
// (both CRCs checked) and parsed with the generated protobuf classes. The same files read by
// TensorBoard itself: tests/records (peer:records).
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "io/records/tensorboard.hpp"
#include "src/core/clock.hpp"
#include "io/records/tensorboard_event.pb.h"
#include "src/core/error.hpp"
#include "tests/support/temp_dir.hpp"

using namespace squall;
namespace fs = std::filesystem;

namespace {

// CRC-32C one bit at a time, straight from the polynomial: the reference for the tables.
uint32_t crc32c_bitwise(const void* data, size_t n, uint32_t crc = 0) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t crc_of(const std::string& s) { return records::crc32c(s.data(), s.size()); }

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t get_le(const std::string& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

// TFRecords as TensorBoard reads them: the records, or the first reason the bytes are not.
struct Records {
  std::vector<std::string> data;
  std::string error;
};

Records read_records(const std::string& bytes) {
  Records r;
  for (size_t at = 0; at < bytes.size();) {
    if (bytes.size() - at < 12) return r.error = "truncated header at " + std::to_string(at), r;
    const uint64_t len = get_le(bytes, at, 8);
    const uint32_t want_len_crc = static_cast<uint32_t>(get_le(bytes, at + 8, 4));
    if (records::masked_crc32c(bytes.data() + at, 8) != want_len_crc)
      return r.error = "length crc mismatch at " + std::to_string(at), r;
    if (bytes.size() - at - 12 < len + 4) return r.error = "truncated data at " + std::to_string(at), r;
    const std::string data = bytes.substr(at + 12, len);
    if (records::masked_crc32c(data.data(), data.size()) != static_cast<uint32_t>(get_le(bytes, at + 12 + len, 4)))
      return r.error = "data crc mismatch at " + std::to_string(at), r;
    r.data.push_back(data);
    at += 12 + len + 4;
  }
  return r;
}

tb::Event parse_event(const std::string& data) {
  tb::Event e;
  REQUIRE(e.ParseFromString(data));
  return e;
}

void check_scalar(const tb::Event& e, const std::string& tag, int64_t step, double value, double wall_time) {
  CHECK(e.step() == step);
  CHECK(e.wall_time() == wall_time);
  REQUIRE(e.what_case() == tb::Event::kSummary);
  REQUIRE(e.summary().value_size() == 1);
  const auto& v = e.summary().value(0);
  CHECK(v.tag() == tag);
  REQUIRE(v.value_case() == tb::Summary::Value::kSimpleValue);  // present even when 0
  if (std::isnan(value)) {
    CHECK(std::isnan(v.simple_value()));
  } else {
    CHECK(v.simple_value() == static_cast<float>(value));
  }
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("crc32c matches the published check values", "[tensorboard][crc]") {
  CHECK(crc_of("123456789") == 0xE3069283u);
  CHECK(crc_of(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(crc_of(std::string(32, '\xff')) == 0x62A8AB43u);  // RFC 3720, B.4
  std::string up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) up[i] = static_cast<char>(i), down[i] = static_cast<char>(31 - i);
  CHECK(crc_of(up) == 0x46DD794Eu);
  CHECK(crc_of(down) == 0x113FDB5Cu);
  CHECK(records::crc32c("", 0) == 0u);
}

TEST_CASE("crc32c's tables agree with the bitwise definition at every length and alignment",
          "[tensorboard][crc]") {
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(300);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t n = 0; n + offset <= buf.size(); n += (n < 40 ? 1 : 37))
      REQUIRE(records::crc32c(buf.data() + offset, n) == crc32c_bitwise(buf.data() + offset, n));
  // A running CRC carries on where the last call stopped.
  for (size_t cut : {0, 1, 7, 8, 9, 100, 300}) {
    const uint32_t first = records::crc32c(buf.data(), cut);
    CHECK(records::crc32c(buf.data() + cut, buf.size() - cut, first) == records::crc32c(buf.data(), buf.size()));
  }
  // Masking: rotate right by 15, add TFRecord's constant.
  const uint32_t c = crc32c_bitwise(buf.data(), 100);
  CHECK(records::masked_crc32c(buf.data(), 100) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("an event file holds the version record, then one framed Event per scalar", "[tensorboard]") {
  test::TempDir tmp("squall-tb");
  const fs::path dir = tmp.path / "tb" / "nested";  // made by the writer
  const double before = squall::system_seconds();
  records::TensorBoardWriter w(dir, "rank0");
  const double after = squall::system_seconds();

  // The name: events.out.tfevents.<10-digit seconds>.<host>.<suffix>, in `dir`.
  CHECK(w.path().parent_path() == dir);
  const std::string name = w.path().filename().string();
  std::smatch m;
  REQUIRE(std::regex_match(name, m, std::regex(R"(events\.out\.tfevents\.(\d{10})\.(.+)\.rank0)")));
  const double seconds = std::stod(m[1].str());
  CHECK(seconds >= std::floor(before));
  CHECK(seconds <= after + 1);
  CHECK(m[2].str() == process_host());

  // The version record is in the file at once; scalars wait for flush().
  Records r = read_records(read_bytes(w.path()));
  REQUIRE(r.error.empty());
  REQUIRE(r.data.size() == 1);
  const tb::Event version = parse_event(r.data[0]);
  CHECK(version.file_version() == "brain.Event:2");
  CHECK(version.wall_time() >= before);
  CHECK(version.wall_time() <= after);

  const std::vector<std::tuple<std::string, int64_t, double, double>> scalars = {
      {"train/loss", 0, 2.302585092994046, 1712345678.25},
      {"train/loss", 10, 0.0, 1712345679.5},            // a zero still arrives as a value
      {"eval/accuracy", 10, 0.1 + 0.2, 1712345680.0},   // rounded to float32
      {"lr", 4000000000LL, -1.5e-7, 1712345681.125},    // a step beyond 32 bits
      {"grad_norm", 11, std::nan(""), 1712345682.0},
      {"big", 12, 1e300, 1712345683.0}};                // beyond float: infinite
  for (const auto& [tag, step, value, wall] : scalars) w.scalar(tag, step, value, wall);
  CHECK(read_records(read_bytes(w.path())).data.size() == 1);
  w.flush();
  r = read_records(read_bytes(w.path()));
  REQUIRE(r.error.empty());
  REQUIRE(r.data.size() == 1 + scalars.size());
  for (size_t i = 0; i < scalars.size(); ++i) {
    const auto& [tag, step, value, wall] = scalars[i];
    INFO("scalar " << i << " " << tag);
    check_scalar(parse_event(r.data[1 + i]), tag, step, value, wall);
  }
  CHECK(std::isinf(parse_event(r.data.back()).summary().value(0).simple_value()));
}

TEST_CASE("a corrupted byte in an event file is found by the CRCs", "[tensorboard]") {
  test::TempDir tmp("squall-tb");
  fs::path path;
  {
    records::TensorBoardWriter w(tmp.path);
    w.scalar("loss", 1, 0.5, 1.0);
    w.scalar("loss", 2, 0.25, 2.0);
    path = w.path();
  }  // the destructor flushes
  const std::string good = read_bytes(path);
  REQUIRE(read_records(good).data.size() == 3);
  REQUIRE(read_records(good).error.empty());

  const size_t second = 12 + get_le(good, 0, 8) + 4;  // where the second record starts
  std::string bad = good;
  bad[second + 12 + 3] ^= 0x01;  // a bit of its data
  CHECK(read_records(bad).error == "data crc mismatch at " + std::to_string(second));
  bad = good;
  bad[second + 1] ^= 0x40;  // a bit of its length
  CHECK(read_records(bad).error == "length crc mismatch at " + std::to_string(second));
  bad = good;
  bad[good.size() - 1] ^= 0x80;  // the last record's data CRC itself
  CHECK(read_records(bad).error.starts_with("data crc mismatch"));
  CHECK(read_records(good.substr(0, good.size() - 2)).error.starts_with("truncated data"));
}

TEST_CASE("every writer makes a new event file and never rewrites one", "[tensorboard]") {
  test::TempDir tmp("squall-tb");
  fs::path first_path;
  std::string first_bytes;
  {
    records::TensorBoardWriter first(tmp.path);
    first.scalar("loss", 1, 1.0, 1.0);
    first.flush();
    first_path = first.path();
    first_bytes = read_bytes(first_path);
    // A second attempt in the same second (a quick restart): its own file, named after the first.
    records::TensorBoardWriter second(tmp.path);
    second.scalar("loss", 2, 0.5, 2.0);
    second.flush();
    CHECK(second.path() != first.path());
    CHECK(second.path().filename().string() > first.path().filename().string());
    CHECK(read_bytes(first_path) == first_bytes);
    records::TensorBoardWriter third(tmp.path);
    CHECK(third.path().filename().string() > second.path().filename().string());
  }
  const auto files = files_in(tmp.path);
  REQUIRE(files.size() == 3);
  CHECK(read_bytes(first_path) == first_bytes);
  CHECK(read_records(read_bytes(files[1])).data.size() == 2);
  CHECK(read_records(read_bytes(files[2])).data.size() == 1);
}

TEST_CASE("a full buffer is written without a flush, in whole records", "[tensorboard]") {
  test::TempDir tmp("squall-tb");
  records::TensorBoardWriter w(tmp.path);
  for (int i = 0; i < 4000; ++i) w.scalar("train/loss", i, 1.0 / (i + 1), 1e9 + i);
  const Records r = read_records(read_bytes(w.path()));
  CHECK(r.error.empty());
  CHECK(r.data.size() > 1);
  CHECK(r.data.size() < 4001);
  w.flush();
  CHECK(read_records(read_bytes(w.path())).data.size() == 4001);
}

TEST_CASE("the event writer's failures name the path", "[tensorboard]") {
  test::TempDir tmp("squall-tb");
  const fs::path file = tmp.path / "a-file";
  std::ofstream(file) << "x";
  REQUIRE_THROWS_WITH(records::TensorBoardWriter(file / "tb"), Catch::Contains((file / "tb").string()));
  REQUIRE_THROWS_WITH(records::TensorBoardWriter(file), Catch::Contains(file.string()));
  REQUIRE_THROWS_WITH(records::TensorBoardWriter(tmp.path, "../escape"), Catch::Contains("must not hold '/'"));
}

TEST_CASE("a write the file system refuses is an error naming the file, and the writer stops",
          "[tensorboard]") {
  test::TempDir tmp("squall-tb");
  records::TensorBoardWriter w(tmp.path);
  const auto size = fs::file_size(w.path());
  w.scalar("loss", 1, 1.0, 1.0);
  w.scalar("loss", 2, 1.0, 1.0);
  // A file size limit just past what is there: the next write fails with EFBIG, as a full disk
  // (ENOSPC) would. SIGXFSZ ignored, else it ends the process.
  struct sigaction ignore = {}, old_action = {};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(sigaction(SIGXFSZ, &ignore, &old_action) == 0);
  rlimit old_limit = {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  rlimit limit = old_limit;
  limit.rlim_cur = size + 10;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  std::string what;
  try {
    w.flush();
  } catch (const Error& e) {
    what = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  sigaction(SIGXFSZ, &old_action, nullptr);
  CHECK_THAT(what, Catch::Contains(w.path().string()) && Catch::Contains("cannot write"));
  // What reached the file ends in part of a record; nothing is appended behind it.
  REQUIRE_THROWS_WITH(w.scalar("loss", 3, 1.0, 1.0), Catch::Contains(w.path().string()) &&
                                                         Catch::Contains("earlier failure"));
  REQUIRE_THROWS_WITH(w.flush(), Catch::Contains(w.path().string()));
  const Records r = read_records(read_bytes(w.path()));
  CHECK(r.data.size() == 1);
  CHECK(r.error.starts_with("truncated"));
}
