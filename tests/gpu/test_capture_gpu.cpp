// The CUDA backend's streams around CUDA-graph capture and event polling (issue 19's defects):
// a query of unfinished work must not poison the next launch check; a capture refuses what
// would grow a workspace, and the same work then runs eagerly; a captured graph keeps the
// workspace it points into alive when the stream's grows later. Runs on a GPU only
// (squall_gpu_tests, area [cuda]); tests/unit/test_capture.cpp checks the learner side on the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "src/backends/backends.hpp"
#include "cuda/cuda_backend.hpp"
#include "src/nn/backend.hpp"
#include "tests/support/test_backend.hpp"

namespace nn = squall::nn;

namespace {

// Loss of a [n, classes] problem with fixed logits, computed on `s`, read back.
struct LossProblem {
  static constexpr int64_t n = 4096, classes = 7;
  nn::Buffer logits, dlogits, loss;
  nn::Buffer labels_owner;
  int32_t* labels = nullptr;
  explicit LossProblem(nn::Backend& be) {
    auto s = be.create_stream();
    std::vector<float> x(static_cast<size_t>(n * classes));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 11) * 0.25f - 1.0f;
    std::vector<int32_t> y(static_cast<size_t>(n));
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % classes);
    logits = be.allocate(x.size());
    dlogits = be.allocate(x.size());
    loss = be.allocate(1);
    labels = be.allocate_labels(y.size(), labels_owner);
    be.copy_from_host(*s, logits.data(), x.data(), x.size());
    be.copy_labels_from_host(*s, labels, y.data(), y.size());
    be.synchronize(*s);
  }
  void enqueue(nn::Backend& be, nn::Stream& s) {
    nn::softmax_cross_entropy(be, s, logits.data(), labels, nullptr, n, classes, 1, dlogits.data(), loss.data());
  }
  float read(nn::Backend& be, nn::Stream& s) {
    float v = 0;
    be.copy_to_host(s, &v, loss.data(), 1);
    be.synchronize(s);
    return v;
  }
};

}  // namespace

TEST_CASE("polling an event of unfinished work leaves no error for the next launch", "[cuda]") {
  auto be = squall::backends::make_cuda_backend(0);
  auto s = be->create_stream();
  auto other = be->create_stream();
  auto event = be->create_event();
  nn::Buffer big = be->allocate(size_t{64} << 20);  // 256 MiB
  nn::Buffer small = be->allocate(1024);
  bool saw_not_ready = false;
  for (int round = 0; round < 8 && !saw_not_ready; ++round) {
    for (int k = 0; k < 32; ++k) be->fill(*s, big.data(), big.count(), static_cast<float>(k));
    be->record(*event, *s);
    saw_not_ready = !be->ready(*event);
    // The launch check after this kernel reads the thread's last error: it must be clean.
    be->fill(*other, small.data(), small.count(), 1.0f);
    be->synchronize(*other);
    be->synchronize(*event);
  }
  if (!saw_not_ready) WARN("every event was complete when polled: the not-ready path was not exercised");
  CHECK(be->ready(*event));
  std::vector<float> host(small.count());
  be->copy_to_host(*other, host.data(), small.data(), small.count());
  be->synchronize(*other);
  CHECK(host[0] == 1.0f);
}

TEST_CASE("a capture refuses a workspace that would grow; the work then runs eagerly and captures later",
          "[cuda]") {
  auto be = squall::backends::make_cuda_backend(0);
  REQUIRE(be->capabilities().can_capture);
  LossProblem p(*be);
  auto s = be->create_stream();  // fresh: no workspace yet
  be->begin_capture(*s);
  CHECK_THROWS_AS(p.enqueue(*be, *s), nn::CaptureError);
  be->abandon_capture(*s);
  // Eagerly, the same call sizes the workspace and computes the loss.
  p.enqueue(*be, *s);
  const float eager = p.read(*be, *s);
  CHECK(std::isfinite(eager));
  // Now it captures, and a replay computes the same loss.
  be->begin_capture(*s);
  p.enqueue(*be, *s);
  std::unique_ptr<nn::Captured> graph = be->end_capture(*s);
  REQUIRE(graph != nullptr);
  be->fill(*s, p.loss.data(), 1, -5.0f);
  be->replay(*graph, *s);
  CHECK(p.read(*be, *s) == eager);
}

TEST_CASE("a captured graph keeps its workspace when the stream's grows", "[cuda]") {
  auto be = squall::backends::make_cuda_backend(0);
  LossProblem p(*be);
  auto s = be->create_stream();
  p.enqueue(*be, *s);
  const float eager = p.read(*be, *s);
  be->begin_capture(*s);
  p.enqueue(*be, *s);
  std::unique_ptr<nn::Captured> graph = be->end_capture(*s);
  REQUIRE(graph != nullptr);
  auto& cs = static_cast<squall::cuda::CudaStream&>(*s);
  const std::vector<std::shared_ptr<void>> before = cs.held_blocks();
  REQUIRE(!before.empty());
  // Grow the stream's workspace well past what the graph was captured with: the stream
  // gets a new block, the graph keeps the old one.
  void* grown = cs.workspace(size_t{256} << 20);
  CHECK(grown != before.front().get());
  be->fill(*s, p.loss.data(), 1, -5.0f);
  be->replay(*graph, *s);
  CHECK(p.read(*be, *s) == eager);
  // Nothing may be allocated, grown or made while capturing: a handle on a stream that has
  // none yet is refused too.
  auto fresh = be->create_stream();
  be->begin_capture(*fresh);
  CHECK_THROWS_AS(static_cast<squall::cuda::CudaStream&>(*fresh).cudnn(), nn::CaptureError);
  CHECK_THROWS_AS(be->allocate(size_t{3} << 30), nn::CaptureError);  // a size the pool has not cached
  be->abandon_capture(*fresh);
}
