#include "src/cpu/cpu_info.hpp"

#include <dnnl.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <unistd.h>

namespace squall::cpu {

std::string dnn_library() {
  const dnnl_version_t* v = dnnl_version();
  std::string runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OMP"
                        : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                        : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                              : "threadpool";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (" + runtime + ")";
}

namespace {

bool has_all(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t bits) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(bits)) == static_cast<unsigned>(bits);
}

}  // namespace

std::string dnn_isa() {
  // The sets are bit masks, each the one below it and more: the largest that fits names it.
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if (has_all(isa, dnnl_cpu_isa_avx512_core_amx)) return "AMX";
  if (has_all(isa, dnnl_cpu_isa_avx512_core_bf16)) return "AVX512-BF16";
  if (has_all(isa, dnnl_cpu_isa_avx512_core_vnni)) return "AVX-512 VNNI";
  if (has_all(isa, dnnl_cpu_isa_avx512_core)) return "AVX-512";
  if (has_all(isa, dnnl_cpu_isa_avx2_vnni)) return "AVX2 VNNI";
  if (has_all(isa, dnnl_cpu_isa_avx2)) return "AVX2";
  if (has_all(isa, dnnl_cpu_isa_avx)) return "AVX";
  if (has_all(isa, dnnl_cpu_isa_sse41)) return "SSE4.1";
  return "no vector ISA oneDNN knows";
}

bool dnn_has_bf16() { return has_all(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_bf16); }

std::string dnn_bf16_path() { return dnn_has_bf16() ? "native" : "reference"; }

std::string dnn_isa_cap() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
  return "";
}

namespace {

int quota_cpus(double quota, double period) {
  if (quota <= 0 || period <= 0) return 0;
  return std::max(1, static_cast<int>((quota + period - 1) / period));
}

// CPUs in this process's affinity mask (all of them when it cannot be read).
int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  return "cpu";
}

int cgroup_cpu_limit(const std::string& root) {
  // cgroup v2: "<quota> <period>" or "max <period>".
  if (std::ifstream f(root + "/cpu.max"); f) {
    std::string quota;
    double period = 0;
    if (f >> quota >> period && quota != "max") return quota_cpus(std::stod(quota), period);
    return 0;
  }
  // cgroup v1: quota -1 means none.
  std::ifstream q(root + "/cpu/cpu.cfs_quota_us"), p(root + "/cpu/cpu.cfs_period_us");
  double quota = 0, period = 0;
  if (q >> quota && p >> period) return quota_cpus(quota, period);
  return 0;
}

int hardware_threads() {
  static const int cached = [] {
    int n = affinity_cpus();
    int limit = 0;
    try {
      limit = cgroup_cpu_limit();
    } catch (...) {
      limit = 0;  // an unreadable quota file is no quota
    }
    if (limit > 0) n = std::min(n, limit);
    return std::max(1, n);
  }();
  return cached;
}

int default_threads(int ranks_on_host) {
  const int usable = hardware_threads();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const bool pinned = online > 0 && affinity_cpus() < online;
  if (pinned || ranks_on_host <= 1) return usable;
  return std::max(1, usable / ranks_on_host);
}

}  // namespace squall::cpu
