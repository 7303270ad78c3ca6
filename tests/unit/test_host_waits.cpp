// One host wait per step (docs/design.md, "The learner group"): on one rank, whatever the
// algorithm and the learners, the host waits for the device once a step, where the losses
// and the finite check are read; everything else is ordered by events. The count is the
// group's own, and each wait is on the timeline as "host_wait".
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "src/cpu/cpu_backend.hpp"
#include "src/parallel/learners.hpp"
#include "tests/support/test_backend.hpp"
#include "tests/support/tiny_model.hpp"

using namespace squall;
using parallel::Algorithm;
using parallel::LearnerGroup;
using parallel::LearnerGroupOptions;

namespace {

// The test backend, counting every time the host waits for a stream or an event: the
// group's own count is checked against it.
class CountingBackend final : public cpu::CpuBackend {
 public:
  explicit CountingBackend(bool async = test::testing_async_cpu_streams())
      : cpu::CpuBackend(cpu::CpuBackendOptions{2, async, std::nullopt}) {}
  void synchronize(nn::Stream& s) override {
    ++waits;
    cpu::CpuBackend::synchronize(s);
  }
  void synchronize(nn::Event& e) override {
    ++waits;
    cpu::CpuBackend::synchronize(e);
  }
  std::atomic<int64_t> waits{0};
};

// A sum of device memory that orders itself after the caller's stream, as NCCL's on a GPU,
// over the CPU backend: a job of two identical ranks played by one (the sum doubles the
// buffer), its work queued on a stream of its own after an event of the caller's stream
// (FusedSum names a CPU stream by the nn::Stream itself), complete when its own event is.
// test() reports a sum complete from its second poll on (the first says not yet, as a
// device sum just started would), and wait() is a host wait for its event, counted by the
// backend.
class StreamTwinAllreduce final : public mpi::Allreduce {
 public:
  explicit StreamTwinAllreduce(nn::Backend& backend) : m_backend(backend), m_stream(backend.create_stream()) {}

  using mpi::Allreduce::start;
  Ticket start(void* data, size_t count, mpi::DType type, std::string_view, void* after_stream) override {
    REQUIRE(type == mpi::DType::f32);
    REQUIRE(after_stream != nullptr);
    Sum s;
    s.ready = m_backend.create_event();
    m_backend.record(*s.ready, *static_cast<nn::Stream*>(after_stream));
    m_backend.wait(*m_stream, *s.ready);
    m_backend.scale(*m_stream, 2.0f, static_cast<float*>(data), count);
    s.done = m_backend.create_event();
    m_backend.record(*s.done, *m_stream);
    m_sums.push_back(std::move(s));
    return static_cast<Ticket>(m_sums.size());
  }
  bool test(Ticket t) override {
    Sum& s = m_sums.at(static_cast<size_t>(t - 1));
    if (s.polls++ == 0) return false;
    return m_backend.ready(*s.done);
  }
  void wait(Ticket t) override {
    ++host_waits;
    m_backend.synchronize(*m_sums.at(static_cast<size_t>(t - 1)).done);
  }
  bool order_stream_after(Ticket t, void* stream) override {
    REQUIRE(stream != nullptr);
    m_backend.wait(*static_cast<nn::Stream*>(stream), *m_sums.at(static_cast<size_t>(t - 1)).done);
    return true;
  }
  int ranks() const override { return 2; }
  bool takes(mpi::DType type) const override { return type == mpi::DType::f32; }
  mpi::Memory memory() const override { return mpi::Memory::device; }
  bool orders_after_stream() const override { return true; }
  std::string mode() const override { return "stream twin"; }

  int64_t host_waits = 0;  // wait() calls

 private:
  struct Sum {
    std::unique_ptr<nn::Event> ready, done;
    int polls = 0;
  };
  nn::Backend& m_backend;
  std::unique_ptr<nn::Stream> m_stream;
  std::vector<Sum> m_sums;
};

}  // namespace

TEST_CASE("a step of one rank waits for the device once, for every algorithm", "[learners][host-waits]") {
  CountingBackend backend;
  mpi::OneRankAllreduce alone;
  const auto algorithm = GENERATE(Algorithm::ssgd, Algorithm::sma, Algorithm::local_sgd);
  const int L = GENERATE(1, 3);
  LearnerGroupOptions o;
  o.algorithm = algorithm;
  o.learners = L;
  o.period = 2;
  o.start_step = 2;  // local-sgd: two ssgd steps first
  o.skip_nonfinite = true;
  LearnerGroup group(backend, test::make_tiny_graph, 4, 4, test::plain_sgd(), {}, o, alone);
  // With a timeline, each learner also waits for its own stream twice, to time its forward
  // and backward parts: those waits are the timeline's, not the step's.
  const bool timeline = GENERATE(false, true);
  int timeline_waits = 0;
  if (timeline)
    group.set_phase_hook([&](const char* phase, int learner, double t0, double t1) {
    if (std::string(phase) == "host_wait") {
      ++timeline_waits;
      CHECK(learner == -1);
      CHECK(t1 >= t0);
    }
  });
  const int64_t steps = 6;
  for (int64_t step = 0; step < steps; ++step) {
    // The batches in pinned memory, as the trainer's loader gives them to asynchronous
    // streams: a copy from pageable memory would make the host wait for it.
    const test::TinyStep in = test::tiny_step(0, L, step, 4);
    std::vector<nn::Buffer> pinned;
    std::vector<parallel::LearnerBatch> inputs;
    for (const auto& d : in.data) {
      pinned.push_back(backend.allocate_host(d.images.size(), nn::DType::f32));
      std::copy(d.images.begin(), d.images.end(), pinned.back().data());
      pinned.push_back(backend.allocate_host(d.labels.size(), nn::DType::i32));
      std::copy(d.labels.begin(), d.labels.end(), pinned.back().as<int32_t>());
      inputs.push_back({pinned[pinned.size() - 2].data(), pinned.back().as<int32_t>()});
    }
    INFO(parallel::algorithm_name(algorithm)
         << ", " << L << " learner(s), step " << step << (timeline ? ", timeline" : ""));
    const int64_t before = backend.waits;
    const std::vector<float> losses = group.step(inputs, step, 0.1f);
    // Every synchronize() of the step, counted by the backend.
    CHECK(backend.waits - before == 1 + (timeline ? 2 * L : 0));
    REQUIRE(losses.size() == static_cast<size_t>(L));
    for (float loss : losses) CHECK(std::isfinite(loss));
    CHECK(group.host_waits() == step + 1);
  }
  CHECK(timeline_waits == (timeline ? steps : 0));
  CHECK(group.skipped_steps() == 0);
}

TEST_CASE("ssgd over a device sum that orders itself after streams waits for the host once a step",
          "[learners][host-waits][buckets]") {
  // The sums are not waited for on the host: the group stream waits for the last ones on the
  // device, and the finite check and the losses are read behind them at the step's one wait.
  CountingBackend backend(true);
  StreamTwinAllreduce twin(backend);
  const int L = 2;
  const int64_t b = 3;
  LearnerGroupOptions o;
  o.learners = L;
  o.ranks = 2;  // the twin's job
  o.bucket_floats = GENERATE(size_t{1}, size_t{1} << 18);  // a bucket per tensor, or one
  LearnerGroup group(backend, test::make_tiny_graph, b, b, test::plain_sgd(), {}, o, twin);
  // The same learners on one rank: the twin's doubled sum over twice the learners is their mean.
  auto plain = test::make_test_backend(2);
  mpi::OneRankAllreduce alone;
  LearnerGroupOptions one = o;
  one.ranks = 1;
  LearnerGroup reference(*plain, test::make_tiny_graph, b, b, test::plain_sgd(), {}, one, alone);
  for (int64_t step = 0; step < 5; ++step) {
    const test::TinyStep in = test::tiny_step(0, L, step, b);
    std::vector<nn::Buffer> pinned;  // the batches in pinned memory, as the loader gives them
    std::vector<parallel::LearnerBatch> inputs;
    for (const auto& d : in.data) {
      pinned.push_back(backend.allocate_host(d.images.size(), nn::DType::f32));
      std::copy(d.images.begin(), d.images.end(), pinned.back().data());
      pinned.push_back(backend.allocate_host(d.labels.size(), nn::DType::i32));
      std::copy(d.labels.begin(), d.labels.end(), pinned.back().as<int32_t>());
      inputs.push_back({pinned[pinned.size() - 2].data(), pinned.back().as<int32_t>()});
    }
    INFO("step " << step << ", bucket_floats " << o.bucket_floats);
    const int64_t before = backend.waits;
    const std::vector<float> losses = group.step(inputs, step, 0.2f);
    CHECK(backend.waits - before == 1);
    CHECK(twin.host_waits == 0);
    CHECK(group.host_waits() == step + 1);
    const std::vector<float> want = reference.step(in.inputs, step, 0.2f);
    REQUIRE(losses.size() == want.size());
    for (size_t j = 0; j < want.size(); ++j) CHECK(losses[j] == Approx(want[j]).epsilon(1e-6));
    CHECK(test::max_diff(group.central_params(), reference.central_params(), test::k_tiny_arena) < 1e-6);
  }
}
