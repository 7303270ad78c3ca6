#pragma once
// The backend a shared test file runs on. squall_unit_tests compiles these files against the
// CPU backend; squall_gpu_tests (tests/gpu/) compiles the same files with SQUALL_TEST_GPU
// defined and runs them on the CUDA backend, so every layer, loss, optimizer and learner
// case checks the GPU against the same references as the CPU. Cases that are about the CPU
// backend itself carry the [cpu-only] tag, which the GPU binary excludes.
//
// Tolerances: the references are double-precision host computations, which the CPU matches
// within the tolerance each test states. The GPU sums in another order (cuDNN, cuBLAS and
// tree reductions), so a test scales its float tolerance by slack(): 1 on the CPU, 8 on the
// GPU (still far below any real error: a wrong index or a missed term is O(1)).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/nn/backend.hpp"
#ifdef SQUALL_TEST_GPU
#include "src/backends/backends.hpp"
#endif

namespace squall::test {

#ifdef SQUALL_TEST_GPU
inline constexpr bool k_testing_gpu = true;
#else
inline constexpr bool k_testing_gpu = false;
#endif

// How the CPU backend under test runs its streams: SQUALL_TEST_CPU_STREAMS = async (the CTest
// entries "unit:async-streams:*" set it, with SQUALL_CPU_STREAM_JITTER), so that the same
// cases check that callers order their work as a device backend needs; async-device as well,
// and its memory says it is not host-accessible, so that the learner group stages batches on
// copy streams and mirrors its sums through allocate_host memory, as on CUDA.
inline std::string testing_cpu_streams() {
  const char* v = std::getenv("SQUALL_TEST_CPU_STREAMS");
  return v != nullptr ? v : "inline";
}
inline bool testing_async_cpu_streams() { return testing_cpu_streams().rfind("async", 0) == 0; }

#ifndef SQUALL_TEST_GPU
class DeviceLikeCpuBackend final : public cpu::CpuBackend {
 public:
  explicit DeviceLikeCpuBackend(int threads) : cpu::CpuBackend(cpu::CpuBackendOptions{threads, true, std::nullopt}) {}
  nn::Capabilities capabilities() const override {
    nn::Capabilities c = cpu::CpuBackend::capabilities();
    c.host_accessible = false;
    return c;
  }
};
#endif

// A fresh backend of the kind under test (threads: the CPU backend's team size; device: the
// GPU under SQUALL_TEST_GPU, ignored on the CPU).
inline std::unique_ptr<nn::Backend> make_test_backend(int threads = 0, int device = 0) {
#ifdef SQUALL_TEST_GPU
  (void)threads;
  return backends::make_cuda_backend(device);
#else
  (void)device;
  if (testing_cpu_streams() == "async-device") return std::make_unique<DeviceLikeCpuBackend>(threads);
  return std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{threads, testing_async_cpu_streams(), std::nullopt});
#endif
}

// One shared backend for a whole test binary. Never destroyed: at exit the CUDA runtime may
// already be gone, and releasing cuDNN handles then can crash a run whose tests all passed.
inline nn::Backend& test_backend() {
  static nn::Backend* b = make_test_backend(0).release();
  return *b;
}

inline double slack() { return k_testing_gpu ? 8.0 : 1.0; }

// While it lives, the reduced-precision plans `b` makes are the reference emulation (f32
// arithmetic rounded to the type: Kernels::set_reference_precision, train.cpu_precision =
// reference) even where the CPU has bf16 arithmetic; a no-op on the CUDA backend. A test
// whose checks are the reference's contract pins it, so that it checks the same thing on
// every CPU (docs/design.md, "Precision" and "Where it runs, and how it is tested").
class ReferencePrecision {
 public:
  explicit ReferencePrecision(nn::Backend& b) : m_b(b) { m_b.set_reference_precision(true); }
  ~ReferencePrecision() { m_b.set_reference_precision(false); }
  ReferencePrecision(const ReferencePrecision&) = delete;
  ReferencePrecision& operator=(const ReferencePrecision&) = delete;

 private:
  nn::Backend& m_b;
};

// n floats of backend memory, on the host (waits for the stream's work).
inline std::vector<float> download(nn::Backend& be, const float* src, size_t n) {
  auto stream = be.create_stream();
  be.synchronize_all();
  std::vector<float> host(n);
  be.copy_to_host(*stream, host.data(), src, n);
  be.synchronize(*stream);
  return host;
}

// ||got - want|| / ||want|| (2-norms; want all zero: the absolute error), over the shorter
// of the two, which a caller checks to be equal in size.
inline double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// n floats drawn from N(0, scale^2) by a generator seeded with `seed`: a case's inputs.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// `bytes` bytes of backend memory at p, on the host, once every stream of the backend is done.
inline std::vector<unsigned char> bytes_on_host(nn::Backend& backend, nn::Stream& s, const void* p, size_t bytes) {
  backend.synchronize_all();
  std::vector<unsigned char> host(bytes);
  backend.copy_bytes_to_host(s, host.data(), p, bytes);
  backend.synchronize(s);
  return host;
}

}  // namespace squall::test
