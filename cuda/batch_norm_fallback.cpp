#include "cuda/batch_norm_fallback.hpp"

#include "cuda/check.cuh"
#include "src/core/error.hpp"
#include "src/core/log.hpp"

namespace squall::cuda::detail {

bool is_refusal(cudnnStatus_t status) {
#if CUDNN_MAJOR >= 9
  // cuDNN 9 groups its statuses by thousands: 2xxx bad parameters, 3xxx not supported.
  const int category = static_cast<int>(status) / 1000 * 1000;
  return category == CUDNN_STATUS_BAD_PARAM || category == CUDNN_STATUS_NOT_SUPPORTED;
#else
  return status == CUDNN_STATUS_BAD_PARAM || status == CUDNN_STATUS_NOT_SUPPORTED;
#endif
}

void ExRefusalLog::refused(const std::string& line) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_refusals++ == 0 && m_sink) m_sink(line);
}

int ExRefusalLog::refusals() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_refusals;
}

ExRefusalLog& ExRefusalLog::process() {
  // Never destroyed: a learner thread may still report while the process exits.
  static ExRefusalLog* log = new ExRefusalLog([](const std::string& line) { log::warn(line); });
  return *log;
}

FallbackBatchNormPlan::FallbackBatchNormPlan(const nn::BatchNormDesc& desc, std::unique_ptr<BatchNormExCalls> ex,
                                             std::unique_ptr<nn::BatchNormPlan> plain, ExRefusalLog& log)
    : m_desc(desc), m_ex(std::move(ex)), m_plain(std::move(plain)), m_log(log) {
  if (!m_ex || !m_plain) throw Error("batch norm: the extended plan needs its calls and a plain plan");
}

bool FallbackBatchNormPlan::ran(cudnnStatus_t status, bool forward) {
  if (status == CUDNN_STATUS_SUCCESS) return true;
  const std::string call = m_ex->call_name(forward);
  const char* why = cudnnGetErrorString(status);
  // A capture is abandoned (check_failed throws nn::CaptureError on a capturing thread), and so
  // is anything that is not a refusal, which takes the job down as every failed call does.
  if (capturing_stream() != nullptr || !is_refusal(status)) check_failed("cuDNN", call.c_str(), why, __FILE__, __LINE__);
  m_refused = true;
  const nn::Shape shape(m_desc.n, m_desc.c, m_desc.h, m_desc.w);
  m_log.refused("batch norm: cuDNN refused " + call + " for " + dtype_name(m_desc.dtype) + " " +
                nn::layout_name(m_desc.layout) + " " + shape.str() + " (" + (why ? why : "?") +
                "): such batch norms train through the plain calls from now on" +
                (m_desc.dtype == nn::DType::bf16 ? " (bf16 through f32 copies)" : "") +
                "; SQUALL_CUDNN_BN_EX=0 keeps every batch norm on them from the start");
  return false;
}

void FallbackBatchNormPlan::forward(nn::Stream& s, const void* x, const float* gamma, const float* beta,
                                    float* running_mean, float* running_var, void* y, bool train) {
  m_stats = Stats::none;
  if (!train) {
    m_plain->forward(s, x, gamma, beta, running_mean, running_var, y, false);
    return;
  }
  if (m_desc.n * m_desc.h * m_desc.w < 2)
    throw Error("batch norm: training needs more than one value per channel, got input " +
                nn::Shape(m_desc.n, m_desc.c, m_desc.h, m_desc.w).str());
  if (!m_refused && ran(m_ex->forward_training(s, x, gamma, beta, running_mean, running_var, y), true)) {
    m_stats = Stats::ex;
    return;
  }
  m_plain->forward(s, x, gamma, beta, running_mean, running_var, y, true);
  m_stats = Stats::plain;
}

void FallbackBatchNormPlan::backward(nn::Stream& s, const void* x, const void* dy, const float* gamma, void* dx,
                                     float* dgamma, float* dbeta) {
  if (m_stats == Stats::none) throw Error("batch norm: backward needs a forward with train=true first");
  if (m_stats == Stats::ex) {
    if (ran(m_ex->backward(s, x, dy, gamma, dx, dgamma, dbeta), false)) return;
    // The extended forward's statistics are not the plain backward's to read: the plain
    // forward makes its own from the same x. Its y goes to dx and its running statistics to
    // scratch (the layer's were updated by the extended forward); beta only shifts that y.
    float* stats = m_ex->scratch_statistics();
    m_plain->forward(s, x, gamma, gamma, stats, stats + m_desc.c, dx, true);
    m_stats = Stats::plain;
  }
  m_plain->backward(s, x, dy, gamma, dx, dgamma, dbeta);
}

}  // namespace squall::cuda::detail
