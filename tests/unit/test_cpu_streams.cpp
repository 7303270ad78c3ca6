// run.cpu_streams = async (src/cpu/cpu_stream.hpp): the CPU backend's streams as worker
// threads. The order within a stream, events across streams, ready() while work is queued,
// the host waits, and an error thrown by queued work reaching the host.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "src/core/error.hpp"
#include "src/nn/backend.hpp"

using namespace squall::nn;
namespace nn = squall::nn;
namespace cpu = squall::cpu;

namespace {

std::unique_ptr<Backend> async_backend() { return std::make_unique<squall::cpu::CpuBackend>(cpu::CpuBackendOptions{1, true, std::nullopt}); }

// Enough work on `s` (several hundred milliseconds) that nothing queued behind it can have run
// by the time the host looks, ending with out[0] = n.
void slow_work(Backend& b, Stream& s, Buffer& big, float* out) {
  b.fill(s, big.data(), big.count(), 1.0f);
  for (int i = 0; i < 40; ++i) b.sum_squares(s, big.data(), big.count(), out);
}

}  // namespace

TEST_CASE("async cpu streams run a stream's work in the order it was queued", "[cpu-streams][cpu-only]") {
  auto b = async_backend();
  auto s = b->create_stream();
  Buffer x = b->allocate(1000), ones = b->allocate(1000);
  b->fill(*s, ones.data(), 1000, 1.0f);
  b->fill(*s, x.data(), 1000, 1.0f);
  // x <- 2x and x <- x + 1 in turn: any other order gives another number.
  double want = 1;
  for (int k = 0; k < 20; ++k) {
    if (k % 2 == 0) {
      b->scale(*s, 2.0f, x.data(), 1000);
      want *= 2;
    } else {
      b->axpy(*s, 1.0f, ones.data(), x.data(), 1000);
      want += 1;
    }
  }
  b->synchronize(*s);
  CHECK(x.data()[0] == static_cast<float>(want));
  CHECK(x.data()[999] == static_cast<float>(want));
}

TEST_CASE("async cpu streams: an event orders one stream's work after another's", "[cpu-streams][cpu-only]") {
  auto b = async_backend();
  auto producer = b->create_stream(), consumer = b->create_stream();
  auto done = b->create_event();
  CHECK(b->ready(*done));  // never recorded: complete, as on CUDA
  Buffer big = b->allocate(size_t{1} << 22), out = b->allocate(1), seen = b->allocate(1);
  out.data()[0] = -1.0f;
  seen.data()[0] = -2.0f;
  slow_work(*b, *producer, big, out.data());
  b->record(*done, *producer);
  CHECK_FALSE(b->ready(*done));  // the work behind it is still queued or running
  b->wait(*consumer, *done);
  b->copy(*consumer, seen.data(), out.data(), 1);
  auto after = b->create_event();
  b->record(*after, *consumer);
  b->synchronize(*after);  // the host waits for the consumer, which waited for the producer
  CHECK(b->ready(*done));
  CHECK(b->ready(*after));
  CHECK(seen.data()[0] == static_cast<float>(big.count()));
}

TEST_CASE("async cpu streams: synchronize waits, and a plain host copy completes before it returns",
          "[cpu-streams][cpu-only]") {
  auto b = async_backend();
  auto s = b->create_stream(), t = b->create_stream();
  Buffer big = b->allocate(size_t{1} << 22), out = b->allocate(1);
  out.data()[0] = -1.0f;
  slow_work(*b, *s, big, out.data());
  b->synchronize(*s);
  CHECK(out.data()[0] == static_cast<float>(big.count()));

  // Host memory not from allocate_host: the copy has happened when the call returns.
  out.data()[0] = -1.0f;
  slow_work(*b, *s, big, out.data());
  std::vector<float> host(1, -3.0f);
  b->copy_to_host(*s, host.data(), out.data(), 1);
  CHECK(host[0] == static_cast<float>(big.count()));

  // synchronize_all waits for every stream.
  Buffer other = b->allocate(1);
  other.data()[0] = -1.0f;
  slow_work(*b, *t, big, other.data());
  b->fill(*s, out.data(), 1, 5.0f);
  b->synchronize_all();
  CHECK(other.data()[0] == static_cast<float>(big.count()));
  CHECK(out.data()[0] == 5.0f);
}

TEST_CASE("async cpu streams: an error thrown by queued work is rethrown by the next synchronize",
          "[cpu-streams][cpu-only]") {
  auto b = async_backend();
  auto s = b->create_stream();
  Buffer logits = b->allocate(6), grad = b->allocate(6), loss = b->allocate(1), x = b->allocate(4);
  b->fill(*s, logits.data(), 6, 0.5f);
  Buffer labels_owner;
  int32_t* labels = b->allocate_labels(2, labels_owner);
  const int32_t bad[2] = {0, 7};  // 7 >= 3 classes
  b->copy_labels_from_host(*s, labels, bad, 2);
  b->fill(*s, x.data(), 4, 1.0f);
  b->synchronize(*s);
  // Queued: the call returns, the error waits for the host.
  CHECK_NOTHROW(nn::softmax_cross_entropy(*b, *s, logits.data(), labels, nullptr, 2, 3, 1, grad.data(), loss.data()));
  b->fill(*s, x.data(), 4, 9.0f);  // behind the failure: skipped, as inline it would never have run
  auto e = b->create_event();
  b->record(*e, *s);
  CHECK_THROWS_AS(b->synchronize(*e), squall::Error);  // an event behind the failure reports it too
  CHECK_THROWS_AS(b->synchronize(*s), squall::Error);
  CHECK(x.data()[0] == 1.0f);

  // Another stream waiting behind the failure is not stuck: the marker was still signalled.
  auto other = b->create_stream();
  auto failed = b->create_event();
  CHECK_NOTHROW(nn::softmax_cross_entropy(*b, *s, logits.data(), labels, nullptr, 2, 3, 1, grad.data(), loss.data()));
  b->record(*failed, *s);
  b->wait(*other, *failed);
  b->fill(*other, x.data(), 4, 2.0f);
  CHECK_NOTHROW(b->synchronize(*other));
  CHECK(x.data()[0] == 2.0f);
  CHECK_THROWS_AS(b->synchronize(*s), squall::Error);
  // Reported once; the stream then runs again.
  CHECK_NOTHROW(b->synchronize(*s));
  b->fill(*s, x.data(), 4, 3.0f);
  b->synchronize(*s);
  CHECK(x.data()[3] == 3.0f);
}

TEST_CASE("async cpu streams: a stream dropped with work queued finishes it first", "[cpu-streams][cpu-only]") {
  auto b = async_backend();
  Buffer big = b->allocate(size_t{1} << 20), out = b->allocate(1);
  out.data()[0] = -1.0f;
  {
    auto s = b->create_stream();
    slow_work(*b, *s, big, out.data());
  }
  CHECK(out.data()[0] == static_cast<float>(big.count()));
}

TEST_CASE("inline cpu streams stay inline", "[cpu-streams][cpu-only]") {
  auto b = std::make_unique<squall::cpu::CpuBackend>(cpu::CpuBackendOptions{1, false, std::nullopt});
  auto s = b->create_stream();
  auto e = b->create_event();
  Buffer x = b->allocate(4);
  b->fill(*s, x.data(), 4, 2.0f);
  CHECK(x.data()[0] == 2.0f);  // done when the call returns, without a synchronize
  b->record(*e, *s);
  CHECK(b->ready(*e));
}

TEST_CASE("SQUALL_CPU_STREAM_JITTER is <max microseconds>[,seed], and a bad value is refused",
          "[cpu-streams][cpu-only]") {
  const char* before = std::getenv("SQUALL_CPU_STREAM_JITTER");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("SQUALL_CPU_STREAM_JITTER", "20,7", 1);
  {
    auto b = async_backend();  // delays, but the same results
    auto s = b->create_stream();
    Buffer x = b->allocate(8);
    b->fill(*s, x.data(), 8, 1.0f);
    b->scale(*s, 3.0f, x.data(), 8);
    b->synchronize(*s);
    CHECK(x.data()[7] == 3.0f);
  }
  for (const char* bad : {"fast", "-5", "10;3", "10,"}) {
    INFO(bad);
    ::setenv("SQUALL_CPU_STREAM_JITTER", bad, 1);
    CHECK_THROWS_AS(async_backend(), squall::UsageError);
  }
  CHECK_NOTHROW(std::make_unique<squall::cpu::CpuBackend>(cpu::CpuBackendOptions{1, false, std::nullopt}));  // inline ignores it
  if (before != nullptr)
    ::setenv("SQUALL_CPU_STREAM_JITTER", saved.c_str(), 1);
  else
    ::unsetenv("SQUALL_CPU_STREAM_JITTER");
}
