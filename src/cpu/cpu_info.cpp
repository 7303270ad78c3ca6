#include "src/cpu/cpu_info.hpp"

#include <dnnl.h>
#include <sched.h>

#include <thread>

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

int hardware_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace squall::cpu
