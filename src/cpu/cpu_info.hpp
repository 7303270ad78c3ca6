#pragma once
#include <string>

namespace squall::cpu {

std::string dnn_library();   // "oneDNN 2.6.3 (cpu runtime: OMP)"

// Cores this process may really use: its affinity mask, capped by a cgroup CPU quota
// (containers and batch systems often show every host core but grant only a few).
// Running more OpenMP threads than this makes spinning barriers crawl.
int hardware_threads();

// The quota alone, rounded up; 0 when there is none. Exposed for tests.
int cgroup_cpu_limit(const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace squall::cpu
