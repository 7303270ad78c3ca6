#pragma once
// A CPU backend that behaves, where the learner group can tell, like a device: its memory is
// "not host-accessible" (so the group stages batches on copy streams and mirrors sums, as on
// CUDA), it says it can capture, and it records what the group asks of it: every
// begin_capture (with whether that stream had run a pass eagerly before), every copy from
// the host (its source and stream), every loss. Inside a capture it refuses the loss with
// nn::CaptureError (or, when told, a plain Error), as the CUDA backend refuses an allocation,
// a growing workspace or a new handle, so that the group's fallback runs. Its streams are
// inline, or asynchronous where the test backend is (SQUALL_TEST_CPU_STREAMS=async); either
// way every result is the CPU's: a test compares them bit for bit.
#include <mutex>
#include <set>
#include <vector>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"
#include "tests/support/test_backend.hpp"

namespace squall::test {

class DeviceProbe final : public cpu::CpuBackend {
 public:
  enum class Refusal { capture_error, other_error };
  explicit DeviceProbe(Refusal r = Refusal::capture_error)
      : cpu::CpuBackend(cpu::CpuBackendOptions{1, testing_async_cpu_streams(), std::nullopt}), m_refusal(r) {}

  nn::Capabilities capabilities() const override {
    nn::Capabilities c = cpu::CpuBackend::capabilities();
    c.host_accessible = false;
    c.can_capture = true;
    return c;
  }
  void begin_capture(nn::Stream& s) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    begun_after_eager.push_back(m_passed.count(&s) > 0);
    m_capturing.insert(&s);
  }
  std::unique_ptr<nn::Captured> end_capture(nn::Stream& s) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_capturing.erase(&s);
    ++ended;
    return nullptr;
  }
  void abandon_capture(nn::Stream& s) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_capturing.erase(&s);
    ++abandoned;
  }
  void copy_bytes_from_host(nn::Stream& s, void* dst, const void* src, size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      host_copies.push_back({src, &s});
    }
    cpu::CpuBackend::copy_bytes_from_host(s, dst, src, bytes);
  }
  void softmax_cross_entropy(nn::Stream& s, nn::DType t, const void* logits, const int32_t* labels,
                             const float* class_weights, int64_t n, int64_t classes, int64_t hw, void* dlogits,
                             float* loss, const float* grad_scale) override {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (m_capturing.count(&s)) {
        if (m_refusal == Refusal::capture_error) throw nn::CaptureError("probe: refused inside a capture");
        throw Error("probe: a real failure inside a capture");
      }
      m_passed.insert(&s);  // this stream has run a pass eagerly
      ++losses;
    }
    cpu::CpuBackend::softmax_cross_entropy(s, t, logits, labels, class_weights, n, classes, hw, dlogits,
                                               loss, grad_scale);
  }

  struct HostCopy {
    const void* src;
    const nn::Stream* stream;
  };
  std::vector<bool> begun_after_eager;
  std::vector<HostCopy> host_copies;
  int ended = 0, abandoned = 0, losses = 0;

 private:
  Refusal m_refusal;
  std::mutex m_mutex;
  std::set<const nn::Stream*> m_passed, m_capturing;
};

}  // namespace squall::test
