#pragma once
// How a CPU backend is made (without oneDNN's headers, so that the factory's callers need none).
#include <cstdint>
#include <optional>

namespace squall::cpu {

// How much random delay each queued operation gets before it runs (SQUALL_CPU_STREAM_JITTER).
struct StreamJitter {
  int max_us = 0;  // 0: none
  uint64_t seed = 0;
};

// run.cpu_streams: inline (every call completes before it returns: the default, and the
// fast one) or async (each stream a worker thread running its work in order, as a device
// runs a stream's: a checking mode for the ordering the Device contract asks of callers).
struct CpuBackendOptions {
  int threads = 0;  // the OpenMP team size; 0: every core this process may use
  bool async_streams = false;
  // The random delay before each queued operation; unset: SQUALL_CPU_STREAM_JITTER.
  std::optional<StreamJitter> jitter;
};

}  // namespace squall::cpu
