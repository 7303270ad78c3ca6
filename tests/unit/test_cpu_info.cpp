#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "src/cpu/cpu_info.hpp"
#include "tests/support/temp_dir.hpp"

namespace fs = std::filesystem;
using squall::cpu::cgroup_cpu_limit;

using squall::test::fresh_dir;

namespace {

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

}  // namespace

TEST_CASE("a cgroup CPU quota caps the thread count", "[cpu]") {
  const fs::path d = fresh_dir("cgroup-v2");
  fs::create_directories(d);
  write(d / "cpu.max", "200000 100000\n");
  CHECK(cgroup_cpu_limit(d.string()) == 2);
  write(d / "cpu.max", "150000 100000\n");
  CHECK(cgroup_cpu_limit(d.string()) == 2);  // 1.5 CPUs round up
  write(d / "cpu.max", "50000 100000\n");
  CHECK(cgroup_cpu_limit(d.string()) == 1);
  write(d / "cpu.max", "max 100000\n");
  CHECK(cgroup_cpu_limit(d.string()) == 0);  // no quota

  const fs::path v1 = fresh_dir("cgroup-v1");
  fs::create_directories(v1);
  write(v1 / "cpu" / "cpu.cfs_quota_us", "400000\n");
  write(v1 / "cpu" / "cpu.cfs_period_us", "100000\n");
  CHECK(cgroup_cpu_limit(v1.string()) == 4);
  write(v1 / "cpu" / "cpu.cfs_quota_us", "-1\n");
  CHECK(cgroup_cpu_limit(v1.string()) == 0);

  const fs::path none = fresh_dir("cgroup-none");
  fs::create_directories(none);
  CHECK(cgroup_cpu_limit(none.string()) == 0);
  CHECK(squall::cpu::hardware_threads() >= 1);
  fs::remove_all(d);
  fs::remove_all(v1);
}
