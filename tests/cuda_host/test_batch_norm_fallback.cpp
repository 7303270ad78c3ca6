// The extended batch norm plan's way back (cuda/batch_norm_fallback.hpp), on the host: the
// cuDNN calls are a fake that refuses when told to, the plain plan a fake that records what it
// is asked; no GPU, driver or cuDNN handle is involved.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "src/cpu/cpu_backend.hpp"
#include "cuda/batch_norm_fallback.hpp"
#include "cuda/check.cuh"
#include "src/nn/backend.hpp"

using namespace squall;
using namespace squall::cuda::detail;

namespace {

// What the plan did, in order: "ex.forward", "ex.backward", "plain.forward(train)",
// "plain.forward(eval)", "plain.backward", with the pointers that matter.
struct Calls {
  std::vector<std::string> names;
  const void* plain_forward_y = nullptr;
  const float* plain_forward_running = nullptr;
};

class FakeEx final : public BatchNormExCalls {
 public:
  FakeEx(Calls& calls, cudnnStatus_t forward, cudnnStatus_t backward)
      : m_calls(calls), m_forward(forward), m_backward(backward), m_scratch(8) {}
  cudnnStatus_t forward_training(nn::Stream&, const void*, const float*, const float*, float*, float*, void*) override {
    m_calls.names.push_back("ex.forward");
    return m_forward;
  }
  cudnnStatus_t backward(nn::Stream&, const void*, const void*, const float*, void*, float*, float*) override {
    m_calls.names.push_back("ex.backward");
    return m_backward;
  }
  float* scratch_statistics() override { return m_scratch.data(); }

 private:
  Calls& m_calls;
  cudnnStatus_t m_forward, m_backward;
  std::vector<float> m_scratch;
};

class FakePlain final : public nn::BatchNormPlan {
 public:
  explicit FakePlain(Calls& calls) : m_calls(calls) {}
  void forward(nn::Stream&, const void*, const float*, const float*, float* running_mean, float*, void* y,
               bool train) override {
    m_calls.names.push_back(train ? "plain.forward(train)" : "plain.forward(eval)");
    m_calls.plain_forward_y = y;
    m_calls.plain_forward_running = running_mean;
  }
  void backward(nn::Stream&, const void*, const void*, const float*, void*, float*, float*) override {
    m_calls.names.push_back("plain.backward");
  }

 private:
  Calls& m_calls;
};

nn::BatchNormDesc bf16_nhwc() {
  nn::BatchNormDesc d;
  d.n = 8;
  d.c = 4;
  d.h = 6;
  d.w = 5;
  d.dtype = nn::DType::bf16;
  d.layout = nn::Layout::nhwc;
  return d;
}

// A plan over the fakes, and the memory its calls are given (never read: the fakes only record).
struct Rig {
  Calls calls;
  std::vector<std::string> warnings;
  ExRefusalLog log{[this](const std::string& line) { warnings.push_back(line); }};
  std::unique_ptr<nn::Backend> backend = std::make_unique<squall::cpu::CpuBackend>(1);
  std::unique_ptr<nn::Stream> stream = backend->create_stream();
  std::vector<float> x = std::vector<float>(960), dy = x, dx = x, y = x;
  std::vector<float> gamma = std::vector<float>(4), beta = gamma, mean = gamma, var = gamma, dgamma = gamma,
                     dbeta = gamma;

  std::unique_ptr<FallbackBatchNormPlan> plan(cudnnStatus_t forward, cudnnStatus_t backward) {
    return std::make_unique<FallbackBatchNormPlan>(bf16_nhwc(), std::make_unique<FakeEx>(calls, forward, backward),
                                                   std::make_unique<FakePlain>(calls), log);
  }
  void step(FallbackBatchNormPlan& p) {
    p.forward(*stream, x.data(), gamma.data(), beta.data(), mean.data(), var.data(), y.data(), true);
    p.backward(*stream, x.data(), dy.data(), gamma.data(), dx.data(), dgamma.data(), dbeta.data());
  }
};

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("bf16 batch norm: cuDNN's refusals and failures are told apart", "[cuda-host][batch-norm]") {
  CHECK(is_refusal(CUDNN_STATUS_NOT_SUPPORTED));
  CHECK(is_refusal(CUDNN_STATUS_BAD_PARAM));
#if CUDNN_MAJOR >= 9
  CHECK(is_refusal(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE));
  CHECK(is_refusal(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER));
#endif
  CHECK_FALSE(is_refusal(CUDNN_STATUS_SUCCESS));
  CHECK_FALSE(is_refusal(CUDNN_STATUS_EXECUTION_FAILED));
  CHECK_FALSE(is_refusal(CUDNN_STATUS_INTERNAL_ERROR));
  CHECK_FALSE(is_refusal(CUDNN_STATUS_ALLOC_FAILED));
}

TEST_CASE("bf16 batch norm: the extended calls run while cuDNN takes them", "[cuda-host][batch-norm]") {
  Rig r;
  auto p = r.plan(CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS);
  for (int i = 0; i < 3; ++i) r.step(*p);
  CHECK(r.calls.names == V{"ex.forward", "ex.backward", "ex.forward", "ex.backward", "ex.forward", "ex.backward"});
  // Evaluation has no extended call.
  p->forward(*r.stream, r.x.data(), r.gamma.data(), r.beta.data(), r.mean.data(), r.var.data(), r.y.data(), false);
  CHECK(r.calls.names.back() == "plain.forward(eval)");
  CHECK_FALSE(p->on_plain_path());
  CHECK(r.warnings.empty());
}

TEST_CASE("bf16 batch norm: a refused forward moves the plan to the plain calls for good, said once",
          "[cuda-host][batch-norm]") {
  Rig r;
  auto p = r.plan(CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_SUCCESS);
  for (int i = 0; i < 3; ++i) r.step(*p);
  // The refused step itself runs the plain forward and, consistently, the plain backward; the
  // extended calls are never tried again.
  CHECK(r.calls.names == V{"ex.forward", "plain.forward(train)", "plain.backward", "plain.forward(train)",
                           "plain.backward", "plain.forward(train)", "plain.backward"});
  CHECK(p->on_plain_path());
  // The layer's own output and running statistics.
  CHECK(r.calls.plain_forward_y == r.y.data());
  CHECK(r.calls.plain_forward_running == r.mean.data());
  REQUIRE(r.warnings.size() == 1);
  CHECK_THAT(r.warnings[0], Catch::Contains("cudnnBatchNormalizationForwardTrainingEx") &&
                                Catch::Contains("bf16 nhwc [8,4,6,5]") &&
                                Catch::Contains(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED)) &&
                                Catch::Contains("plain calls"));

  // Another layer (or learner) refused too: counted, not said again.
  auto q = r.plan(CUDNN_STATUS_BAD_PARAM, CUDNN_STATUS_SUCCESS);
  r.step(*q);
  CHECK(q->on_plain_path());
  CHECK(r.warnings.size() == 1);
  CHECK(r.log.refusals() == 2);
}

TEST_CASE("bf16 batch norm: a refused backward redoes the step's statistics on the plain path",
          "[cuda-host][batch-norm]") {
  Rig r;
  auto p = r.plan(CUDNN_STATUS_SUCCESS, CUDNN_STATUS_NOT_SUPPORTED_LAYOUT);
  r.step(*p);
  // The extended forward's statistics are not the plain backward's: a plain forward makes them
  // again, its y into dx (which the backward then overwrites) and its running statistics into
  // scratch, so that the layer's running statistics move once in the step.
  CHECK(r.calls.names == V{"ex.forward", "ex.backward", "plain.forward(train)", "plain.backward"});
  CHECK(r.calls.plain_forward_y == r.dx.data());
  CHECK(r.calls.plain_forward_running != r.mean.data());
  CHECK(p->on_plain_path());
  REQUIRE(r.warnings.size() == 1);
  CHECK_THAT(r.warnings[0], Catch::Contains("cudnnBatchNormalizationBackwardEx"));
  r.calls.names.clear();
  r.step(*p);
  CHECK(r.calls.names == V{"plain.forward(train)", "plain.backward"});
  CHECK(r.calls.plain_forward_running == r.mean.data());
}

TEST_CASE("bf16 batch norm: a refusal inside a CUDA-graph capture abandons the capture", "[cuda-host][batch-norm]") {
  Rig r;
  auto p = r.plan(CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_SUCCESS);
  // What begin_capture records for the calling thread (cuda/check.cuh); no stream is needed.
  int tag = 0;
  squall::cuda::set_capturing(reinterpret_cast<cudaStream_t>(&tag));
  CHECK_THROWS_AS(
      p->forward(*r.stream, r.x.data(), r.gamma.data(), r.beta.data(), r.mean.data(), r.var.data(), r.y.data(), true),
      nn::CaptureError);
  squall::cuda::set_capturing(nullptr);
  // Nothing switched, nothing said: the eager pass after the abandoned capture meets the
  // refusal itself.
  CHECK_FALSE(p->on_plain_path());
  CHECK(r.warnings.empty());
  r.calls.names.clear();
  r.step(*p);
  CHECK(r.calls.names == V{"ex.forward", "plain.forward(train)", "plain.backward"});
  CHECK(r.warnings.size() == 1);
}

TEST_CASE("bf16 batch norm: backward without a training forward is an error", "[cuda-host][batch-norm]") {
  Rig r;
  auto p = r.plan(CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS);
  CHECK_THROWS_WITH(p->backward(*r.stream, r.x.data(), r.dy.data(), r.gamma.data(), r.dx.data(), r.dgamma.data(),
                                r.dbeta.data()),
                    Catch::Contains("forward with train=true first"));
  p->forward(*r.stream, r.x.data(), r.gamma.data(), r.beta.data(), r.mean.data(), r.var.data(), r.y.data(), false);
  CHECK_THROWS(p->backward(*r.stream, r.x.data(), r.dy.data(), r.gamma.data(), r.dx.data(), r.dgamma.data(),
                           r.dbeta.data()));
}
