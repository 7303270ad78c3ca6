// NHWC activations on the CPU backend (docs/design.md, "Layout"): the permutation between
// the two memory orders, and batch norm in NHWC. Convolution and pooling take NHWC directly
// (oneDNN's nhwc format, cpu_conv.cpp and cpu_pool.cpp); batch norm's loops are written for
// NCHW, so an NHWC plan permutes into NCHW copies, runs them and permutes back: the CPU is
// the reference for NHWC, not a fast path.
#include <cstring>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"

namespace squall::cpu {

namespace {

// dst[n, hw, c] = src[n, c, hw] (to_nhwc) or the reverse, for elements of `e` bytes.
template <class E>
void permute(const E* src, E* dst, int64_t n, int64_t c, int64_t hw, bool to_nhwc) {
#pragma omp parallel for collapse(2) schedule(static) if (n * c * hw >= 65536)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p) {
      const int64_t base = i * c * hw;
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t nchw = base + ch * hw + p, nhwc = base + p * c + ch;
        if (to_nhwc)
          dst[nhwc] = src[nchw];
        else
          dst[nchw] = src[nhwc];
      }
    }
}

class NhwcBatchNorm final : public BatchNormPlan {
 public:
  NhwcBatchNorm(CpuBackend& backend, const BatchNormDesc& d, std::unique_ptr<BatchNormPlan> nchw)
      : m_b(backend), m_d(d), m_inner(std::move(nchw)) {
    const auto count = static_cast<size_t>(d.n * d.c * d.h * d.w);
    m_x = backend.allocate(count, d.dtype);
    m_y = backend.allocate(count, d.dtype);
    m_dx = backend.allocate(count, d.dtype);
  }
  void forward(Stream& s, const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool train) override {
    to_nchw(s, x, m_x.raw());
    m_inner->forward(s, m_x.raw(), gamma, beta, running_mean, running_var, m_y.raw(), train);
    to_nhwc(s, m_y.raw(), y);
  }
  void backward(Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                float* dbeta) override {
    to_nchw(s, x, m_x.raw());
    to_nchw(s, dy, m_y.raw());
    m_inner->backward(s, m_x.raw(), m_y.raw(), gamma, m_dx.raw(), dgamma, dbeta);
    to_nhwc(s, m_dx.raw(), dx);
  }

 private:
  void to_nchw(Stream& s, const void* src, void* dst) {
    m_b.permute_layout(s, m_d.dtype, src, Layout::nhwc, dst, Layout::nchw, m_d.n, m_d.c, m_d.h, m_d.w);
  }
  void to_nhwc(Stream& s, const void* src, void* dst) {
    m_b.permute_layout(s, m_d.dtype, src, Layout::nchw, dst, Layout::nhwc, m_d.n, m_d.c, m_d.h, m_d.w);
  }

  CpuBackend& m_b;
  BatchNormDesc m_d;
  std::unique_ptr<BatchNormPlan> m_inner;
  Buffer m_x, m_y, m_dx;  // NCHW copies of x, y (then dy), dx
};

}  // namespace

std::unique_ptr<BatchNormPlan> make_nhwc_batch_norm(CpuBackend& b, const BatchNormDesc& d,
                                                   std::unique_ptr<BatchNormPlan> nchw) {
  return std::make_unique<NhwcBatchNorm>(b, d, std::move(nchw));
}

void CpuBackend::permute_layout(Stream&, DType t, const void* src, Layout from, void* dst, Layout to, int64_t n,
                                int64_t c, int64_t h, int64_t w) {
  if (n < 0 || c < 0 || h < 0 || w < 0)
    throw Error("permute_layout: bad shape " + Shape(n, c, h, w).str());
  const size_t bytes = static_cast<size_t>(n * c * h * w) * dtype_size(t);
  if (bytes == 0) return;
  if (from == to) {
    if (src != dst) std::memcpy(dst, src, bytes);
    return;
  }
  const bool to_nhwc = to == Layout::nhwc;
  if (dtype_size(t) == 4)
    permute(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), n, c, h * w, to_nhwc);
  else
    permute(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), n, c, h * w, to_nhwc);
}

}  // namespace squall::cpu
