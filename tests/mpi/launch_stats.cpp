// `squall data stats` under mpiexec: the ranks split the samples in contiguous blocks and rank 0
// merges them in rank order, so 1 and 3 ranks write the same statistics (to the last bits of
// the merge), two runs on 3 ranks write the same bytes, and a bad sample on one rank ends every
// rank with one message and leaves no file.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "io/formats/dataset.hpp"
#include "io/formats/h5_util.hpp"
#include "io/formats/stats_file.hpp"
#include "tests/support/process.hpp"
#include "tests/support/stats_data.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
namespace formats = squall::formats;
namespace sd = squall::test::stats_data;
using squall::test::mpiexec;
using squall::test::run_command;
using squall::test::squall_bin;

squall::test::ProcessResult stats_on(int ranks, const std::string& args) {
  return run_command(mpiexec(ranks) + " " + squall_bin() + " data stats " + args);
}

}  // namespace

TEST_CASE("data stats on 1 and 3 ranks writes the same statistics, and on 3 ranks twice the same bytes", "[stats]") {
  squall::test::TempDir d("squall-stats-ranks");
  const std::string data = d.file("data");
  fs::create_directories(data);
  sd::write_nc_folder(data, 4, 5);  // 20 samples: blocks of 6, 7 and 7 on 3 ranks, across file ends

  for (const auto& [ranks, out] : {std::pair{1, d.file("one.h5")}, {3, d.file("three.h5")}, {3, d.file("again.h5")}}) {
    const auto r = stats_on(ranks, "--in " + data + " --out " + out);
    INFO(ranks << " rank(s): " << squall::test::output_tail(r));
    REQUIRE(r.exit_code == 0);
    // Rank 0 alone reports: one "wrote" line, one final progress line.
    CHECK(r.out.find("wrote " + out) != std::string::npos);
    CHECK(r.out.find("wrote ", r.out.find("wrote ") + 1) == std::string::npos);
    CHECK(r.err.find("data stats: 20/20 samples") != std::string::npos);
  }
  CHECK(sd::read_bytes(d.file("three.h5")) == sd::read_bytes(d.file("again.h5")));

  // 1 rank adds the samples one by one; 3 ranks merge three blocks: the sums differ only in
  // rounding, ~1e-16 of the magnitudes per operation over 20 merges, so 1e-13 of |mean| +
  // spread (of sqmean for sqmean) is tight and safe; the reference gets test_data_stats.cpp's 1e-12.
  for (const char* name : {"count", "minval", "maxval"}) CHECK(sd::stats_dataset(d.file("one.h5"), name) == sd::stats_dataset(d.file("three.h5"), name));
  const std::vector<double> m1 = sd::stats_dataset(d.file("one.h5"), "mean"), m3 = sd::stats_dataset(d.file("three.h5"), "mean");
  const std::vector<double> q1 = sd::stats_dataset(d.file("one.h5"), "sqmean"), q3 = sd::stats_dataset(d.file("three.h5"), "sqmean");
  const sd::Reference ref = sd::reference(sd::sample_range(20));
  for (size_t c = 0; c < m1.size(); ++c) {
    INFO("channel " << c);
    const double scale = std::abs(ref.mean[c]) + std::sqrt(ref.var[c]);
    CHECK(std::abs(m1[c] - m3[c]) <= 1e-13 * scale);
    CHECK(std::abs(q1[c] - q3[c]) <= 1e-13 * q1[c]);
    CHECK(std::abs(m3[c] - ref.mean[c]) <= 1e-12 * scale);  // and both are right
  }
  const formats::StatsProvenance p1 = formats::read_stats_provenance(d.file("one.h5"));
  const formats::StatsProvenance p3 = formats::read_stats_provenance(d.file("three.h5"));
  CHECK(p3.samples == 20);
  CHECK(p1.channel_names == p3.channel_names);
  CHECK(p3.source == data);
}

TEST_CASE("data stats with more ranks than samples", "[stats]") {
  squall::test::TempDir d("squall-stats-few");
  sd::write_deepcam_folder(d.path.string(), 2);
  const auto r = stats_on(3, "--in " + d.path.string() + " --json");
  INFO(squall::test::output_tail(r));
  REQUIRE(r.exit_code == 0);
  CHECK(formats::read_stats_provenance(d.file("stats.h5")).samples == 2);
  CHECK(sd::stats_dataset(d.file("stats.h5"), "count")[0] == 2 * 35);
}

TEST_CASE("a bad sample on one rank ends every rank with one message and leaves no file", "[stats]") {
  squall::test::TempDir d("squall-stats-rank-fails");
  const std::string data = d.path.string();
  sd::write_nc_folder(data, 2, 3);
  sd::NcFile bad;
  bad.first_sample = 6;
  bad.steps = 3;
  bad.fill_step = 2;  // sample 8, the last: rank 2's block
  sd::write_nc(data + "/part-2.nc", bad);

  const auto r = stats_on(3, "--in " + data);
  INFO(squall::test::output_tail(r));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("data stats failed on rank 2") && Catch::Contains(data + "/part-2.nc") &&
                        Catch::Contains("time step 2") && Catch::Contains("data.skip_bad_samples"));
  CHECK_FALSE(fs::exists(data + "/stats.h5"));
  CHECK_FALSE(fs::exists(data + "/stats.h5.tmp"));
  // Every rank ended cleanly with the agreed error: no MPI_Abort.
  CHECK(r.err.find("MPI_ABORT") == std::string::npos);

  // An existing file is refused on every rank alike (exit 2), before anything is read.
  std::ofstream(data + "/stats.h5") << "not mine";
  const auto refused = stats_on(3, "--in " + data + " --set data.skip_bad_samples=true");
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("already exists") && Catch::Contains("--overwrite"));
  CHECK(sd::read_bytes(data + "/stats.h5") == "not mine");
  const auto replaced = stats_on(3, "--in " + data + " --set data.skip_bad_samples=true --overwrite");
  INFO(squall::test::output_tail(replaced));
  CHECK(replaced.exit_code == 0);
  CHECK(formats::read_stats_provenance(data + "/stats.h5").skipped_samples == 1);
}
