#pragma once
// The way back from cuDNN's extended batch norm calls (cuda/batch_norm.cpp): f16 and bf16
// training goes through cudnnBatchNormalizationForwardTrainingEx / BackwardEx wherever cuDNN
// states a workspace and reserve size for the problem, but a cuDNN may still refuse the call
// itself (CUDNN_STATUS_NOT_SUPPORTED or BAD_PARAM, and their cuDNN 9 sub-codes) the first time
// it runs. Then the plan runs the plain calls (bf16 through f32 copies) for good and says so
// once per process. Device-free: the cuDNN calls are behind BatchNormExCalls, which a cuda-host
// test replaces with one that refuses.
//
// What each path keeps between forward and backward is the batch mean and 1/sqrt(var + eps) of
// the last training forward (and, for the extended calls, their reserve space): a backward
// runs on the path whose forward made them. A refusal at forward runs the plain forward
// instead. A refusal at backward, after an extended forward, redoes the step's statistics on the
// plain path (a plain forward of the same x whose y lands in dx, which the plain backward
// overwrites, and whose running statistics land in scratch, so that the layer's own are updated
// once a step, as they were by the extended forward), then runs the plain backward.
//
// Inside a CUDA-graph capture (docs/design.md, "Capture") a refusal switches nothing: it is
// thrown as nn::CaptureError, the capture is abandoned, and the eager pass that follows meets
// the refusal outside the capture.
#include <cudnn.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "src/nn/backend.hpp"

namespace squall::cuda::detail {

// The extended calls of one problem, as the plan makes them; each returns cuDNN's status.
class BatchNormExCalls {
 public:
  virtual ~BatchNormExCalls() = default;
  virtual cudnnStatus_t forward_training(nn::Stream& s, const void* x, const float* gamma, const float* beta,
                                         float* running_mean, float* running_var, void* y) = 0;
  virtual cudnnStatus_t backward(nn::Stream& s, const void* x, const void* dy, const float* gamma, void* dx,
                                 float* dgamma, float* dbeta) = 0;
  // 2 c floats of backend memory for a redone forward's running statistics (thrown away).
  virtual float* scratch_statistics() = 0;
  virtual std::string call_name(bool forward) const {
    return forward ? "cudnnBatchNormalizationForwardTrainingEx" : "cudnnBatchNormalizationBackwardEx";
  }
};

// Whether cuDNN refused the problem (BAD_PARAM and NOT_SUPPORTED with their sub-codes), as
// opposed to failing to run it.
bool is_refusal(cudnnStatus_t status);

// The refusals of a process: the first is a warning, the rest are counted. Thread-safe (each
// learner has plans of its own).
class ExRefusalLog {
 public:
  explicit ExRefusalLog(std::function<void(const std::string&)> sink) : m_sink(std::move(sink)) {}
  void refused(const std::string& line);
  int refusals() const;
  // The process's: warnings through log::warn.
  static ExRefusalLog& process();

 private:
  std::function<void(const std::string&)> m_sink;
  mutable std::mutex m_mutex;
  int m_refusals = 0;
};

class FallbackBatchNormPlan final : public nn::BatchNormPlan {
 public:
  // `plain`: the plain plan of the same description (f16, or bf16 through f32 copies), which
  // also runs every evaluation forward.
  FallbackBatchNormPlan(const nn::BatchNormDesc& desc, std::unique_ptr<BatchNormExCalls> ex,
                        std::unique_ptr<nn::BatchNormPlan> plain, ExRefusalLog& log);

  void forward(nn::Stream& s, const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool train) override;
  void backward(nn::Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                float* dbeta) override;

  bool on_plain_path() const { return m_refused; }

 private:
  enum class Stats { none, ex, plain };  // which path made the statistics backward needs

  // A status of the extended call `forward` (or backward): true when it ran; false when cuDNN
  // refused it (the plan is then on the plain path); throws otherwise, or inside a capture.
  bool ran(cudnnStatus_t status, bool forward);

  nn::BatchNormDesc m_desc;
  std::unique_ptr<BatchNormExCalls> m_ex;
  std::unique_ptr<nn::BatchNormPlan> m_plain;
  ExRefusalLog& m_log;
  bool m_refused = false;
  Stats m_stats = Stats::none;
};

}  // namespace squall::cuda::detail
