// Reduced precision on the CPU backend (docs/design.md, "Precision"): bf16 and f16
// activations. The CPU backend is the reference, not the fast path for reduced precision:
// each typed operation widens its bf16/f16 inputs to f32, runs the f32 loop or oneDNN
// primitive, and rounds its outputs to the activation type (round to nearest even). A
// product of two bf16 (or two f16) values is exact in f32, so this gives the results of a
// GPU that multiplies in the reduced type and accumulates in f32 (tensor cores, cuDNN's
// "pseudo-half" configurations), up to the order of the sums; overflow to infinity in f16
// happens where it would happen there. Weights are rounded to the activation type before
// use and weight gradients after, as a GPU's reduced-precision weight copy would be.
#include <cstring>
#include <vector>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"

namespace squall::cpu {

namespace {

bool is_float_type(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

void require_float(DType t, const char* op) {
  if (!is_float_type(t)) throw Error(std::string(op) + ": activations of type " + dtype_name(t) + " are not supported");
}

// f32 copy of n elements of type t (a pooled allocation, returned when the Buffer goes).
Buffer widen(CpuBackend& b, DType t, const void* p, size_t n) {
  Buffer out = b.allocate(n);
  convert_now(p, t, out.data(), DType::f32, n);
  return out;
}

void narrow(const float* p, DType t, void* out, size_t n) {
  convert_now(p, DType::f32, out, t, n);
}

// x <- x rounded to type t (f32 values representable in t).
void round_to(DType t, float* x, size_t n, Buffer& scratch) {
  if (n == 0) return;
  convert_now(x, DType::f32, scratch.raw(), t, n);
  convert_now(scratch.raw(), t, x, DType::f32, n);
}

inline const float* f32(const void* p) { return static_cast<const float*>(p); }
inline float* f32(void* p) { return static_cast<float*>(p); }

// ---- plans ---------------------------------------------------------------------------------

// Convolution and linear share the shape of their plans: forward, backward_data,
// backward_weights over f32 weights. One template serves both.
template <class Plan>
class ReducedWeightPlan : public Plan {
 public:
  ReducedWeightPlan(CpuBackend& backend, DType dtype, std::unique_ptr<Plan> inner, size_t x_count, size_t y_count,
                    size_t w_count, size_t b_count)
      : m_b(backend), m_t(dtype), m_inner(std::move(inner)), m_x_count(x_count), m_y_count(y_count),
        m_w_count(w_count), m_b_count(b_count) {
    require_float(dtype, "reduced-precision plan");
    m_x = backend.allocate(x_count);
    m_dx = backend.allocate(x_count);
    m_y = backend.allocate(y_count);
    m_w = backend.allocate(std::max<size_t>(w_count, 1));
    m_round = backend.allocate(std::max<size_t>(std::max(w_count, b_count), 1), dtype);
  }

  void forward(Stream& s, const void* x, const float* w, const float* bias, void* y) override {
    m_queued.run(s, [=, this, &s] {
      std::memcpy(m_w.data(), w, m_w_count * sizeof(float));
      round_to(m_t, m_w.data(), m_w_count, m_round);
      forward_rounded(s, x, bias, y);
    });
  }

  void backward_data(Stream& s, const void* dy, const float*, void* dx) override {
    m_queued.run(s, [=, this, &s] {
      convert_now(dy, m_t, m_y.data(), DType::f32, m_y_count);
      m_inner->backward_data(s, m_y.data(), m_w.data(), m_dx.data());
      narrow(m_dx.data(), m_t, dx, m_x_count);
    });
  }

  void backward_weights(Stream& s, const void* x, const void* dy, float* dw, float* db) override {
    m_queued.run(s, [=, this, &s] {
      convert_now(x, m_t, m_x.data(), DType::f32, m_x_count);
      convert_now(dy, m_t, m_y.data(), DType::f32, m_y_count);
      m_inner->backward_weights(s, m_x.data(), m_y.data(), dw, db);
      round_to(m_t, dw, m_w_count, m_round);
      if (db != nullptr) round_to(m_t, db, m_b_count, m_round);
    });
  }

 protected:
  // forward with the rounded weights as m_w holds them.
  void forward_rounded(Stream& s, const void* x, const float* bias, void* y) {
    convert_now(x, m_t, m_x.data(), DType::f32, m_x_count);
    m_inner->forward(s, m_x.data(), m_w.data(), bias, m_y.data());
    narrow(m_y.data(), m_t, y, m_y_count);
  }

  CpuBackend& m_b;
  DType m_t;
  std::unique_ptr<Plan> m_inner;
  size_t m_x_count, m_y_count, m_w_count, m_b_count;
  Buffer m_x, m_dx, m_y, m_w, m_round;  // f32: x, dx, y or dy, rounded w; m_round of type t
  QueuedWork m_queued;  // last: its destructor waits for the passes still queued
};

// A convolution's rounded weights are its mirror (docs/design.md, "Weight mirrors"): f32
// values of the activation type, in the weights' order. When the fused update has written
// them, forward uses them as they are, so that a CPU run checks the mirrors' freshness: a
// stale one computes with the wrong weights here as on a GPU.
class ReducedConvPlan final : public ReducedWeightPlan<ConvPlan> {
 public:
  using ReducedWeightPlan<ConvPlan>::ReducedWeightPlan;
  WeightMirror weight_mirror() const override {
    return {m_w.raw(), m_t, true, false, static_cast<int64_t>(m_w_count), 1, 1};
  }
  void forward_mirrored(Stream& s, const void* x, const float*, const float* bias, void* y) override {
    m_queued.run(s, [=, this, &s] {
      forward_rounded(s, x, bias, y);
    });
  }
};

class ReducedPool final : public PoolPlan {
 public:
  ReducedPool(CpuBackend& backend, const PoolDesc& d, std::unique_ptr<PoolPlan> inner)
      : m_b(backend), m_t(d.dtype), m_inner(std::move(inner)) {
    require_float(d.dtype, "pool");
    m_x_count = static_cast<size_t>(d.n * d.c * d.h * d.w);
    m_y_count = static_cast<size_t>(d.output().numel());
    m_x = backend.allocate(m_x_count);
    m_y = backend.allocate(m_y_count);
  }
  void forward(Stream& s, const void* x, void* y, bool train) override {
    m_queued.run(s, [=, this, &s] {
      convert_now(x, m_t, m_x.data(), DType::f32, m_x_count);
      m_inner->forward(s, m_x.data(), m_y.data(), train);
      narrow(m_y.data(), m_t, y, m_y_count);
    });
  }
  void backward(Stream& s, const void* dy, void* dx) override {
    m_queued.run(s, [=, this, &s] {
      convert_now(dy, m_t, m_y.data(), DType::f32, m_y_count);
      m_inner->backward(s, m_y.data(), m_x.data());
      narrow(m_x.data(), m_t, dx, m_x_count);
    });
  }

 private:
  CpuBackend& m_b;
  DType m_t;
  std::unique_ptr<PoolPlan> m_inner;
  size_t m_x_count = 0, m_y_count = 0;
  Buffer m_x, m_y;
  QueuedWork m_queued;  // last: its destructor waits for the passes still queued
};

// Batch norm keeps gamma, beta and the statistics in f32, as cuDNN does for bf16/f16 data.
class ReducedBatchNorm final : public BatchNormPlan {
 public:
  ReducedBatchNorm(CpuBackend& backend, const BatchNormDesc& d, std::unique_ptr<BatchNormPlan> inner)
      : m_b(backend), m_t(d.dtype), m_inner(std::move(inner)), m_count(static_cast<size_t>(d.n * d.c * d.h * d.w)) {
    require_float(d.dtype, "batch norm");
    m_x = backend.allocate(m_count);
    m_y = backend.allocate(m_count);
    m_dx = backend.allocate(m_count);
  }
  void forward(Stream& s, const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool train) override {
    m_queued.run(s, [=, this, &s] {
      convert_now(x, m_t, m_x.data(), DType::f32, m_count);
      m_inner->forward(s, m_x.data(), gamma, beta, running_mean, running_var, m_y.data(), train);
      narrow(m_y.data(), m_t, y, m_count);
    });
  }
  void backward(Stream& s, const void* x, const void* dy, const float* gamma, void* dx, float* dgamma,
                float* dbeta) override {
    m_queued.run(s, [=, this, &s] {
      convert_now(x, m_t, m_x.data(), DType::f32, m_count);
      convert_now(dy, m_t, m_y.data(), DType::f32, m_count);
      m_inner->backward(s, m_x.data(), m_y.data(), gamma, m_dx.data(), dgamma, dbeta);
      narrow(m_dx.data(), m_t, dx, m_count);
    });
  }

 private:
  CpuBackend& m_b;
  DType m_t;
  std::unique_ptr<BatchNormPlan> m_inner;
  size_t m_count;
  Buffer m_x, m_y, m_dx;
  QueuedWork m_queued;  // last: its destructor waits for the passes still queued
};

}  // namespace

std::unique_ptr<ConvPlan> make_reduced_conv(CpuBackend& b, const ConvDesc& d, std::unique_ptr<ConvPlan> inner) {
  const auto x = static_cast<size_t>(d.n * d.c * d.h * d.w);
  const auto y = static_cast<size_t>(d.output().numel());
  const auto w = static_cast<size_t>(d.weight().numel());
  return std::make_unique<ReducedConvPlan>(b, d.dtype, std::move(inner), x, y, w, d.bias ? static_cast<size_t>(d.k) : 0);
}

std::unique_ptr<LinearPlan> make_reduced_linear(CpuBackend& b, const LinearDesc& d,
                                                std::unique_ptr<LinearPlan> inner) {
  return std::make_unique<ReducedWeightPlan<LinearPlan>>(
      b, d.dtype, std::move(inner), static_cast<size_t>(d.n * d.in), static_cast<size_t>(d.n * d.out),
      static_cast<size_t>(d.in * d.out), d.bias ? static_cast<size_t>(d.out) : 0);
}

std::unique_ptr<PoolPlan> make_reduced_pool(CpuBackend& b, const PoolDesc& d, std::unique_ptr<PoolPlan> inner) {
  return std::make_unique<ReducedPool>(b, d, std::move(inner));
}

std::unique_ptr<BatchNormPlan> make_reduced_batch_norm(CpuBackend& b, const BatchNormDesc& d,
                                                      std::unique_ptr<BatchNormPlan> inner) {
  return std::make_unique<ReducedBatchNorm>(b, d, std::move(inner));
}

// ---- typed element-wise calls -------------------------------------------------------------

void CpuBackend::relu_forward(Stream& s, DType t, const void* x, void* y, size_t n) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return relu_forward_f32(s, f32(x), f32(y), n);
    require_float(t, "relu");
    Buffer xs = widen(*this, t, x, n), ys = allocate(n);
    relu_forward_f32(s, xs.data(), ys.data(), n);
    narrow(ys.data(), t, y, n);
  });
}

void CpuBackend::relu_backward(Stream& s, DType t, const void* y, const void* dy, void* dx, size_t n) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return relu_backward_f32(s, f32(y), f32(dy), f32(dx), n);
    require_float(t, "relu");
    Buffer ys = widen(*this, t, y, n), dys = widen(*this, t, dy, n), dxs = allocate(n);
    relu_backward_f32(s, ys.data(), dys.data(), dxs.data(), n);
    narrow(dxs.data(), t, dx, n);
  });
}

void CpuBackend::add(Stream& s, DType t, const void* a, const void* b, void* y, size_t n) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return add_f32(s, f32(a), f32(b), f32(y), n);
    require_float(t, "add");
    Buffer as = widen(*this, t, a, n), bs = widen(*this, t, b, n);
    add_f32(s, as.data(), bs.data(), as.data(), n);
    narrow(as.data(), t, y, n);
  });
}

void CpuBackend::dropout_forward(Stream& s, DType t, const void* x, void* y, void* mask, size_t n, float p,
                                 uint64_t seed, uint64_t offset) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return dropout_forward_f32(s, f32(x), f32(y), f32(mask), n, p, seed, offset);
    require_float(t, "dropout");
    Buffer xs = widen(*this, t, x, n), ys = allocate(n), ms = allocate(n);
    dropout_forward_f32(s, xs.data(), ys.data(), ms.data(), n, p, seed, offset);
    narrow(ys.data(), t, y, n);
    narrow(ms.data(), t, mask, n);
  });
}

void CpuBackend::multiply(Stream& s, DType t, const void* a, const void* b, void* y, size_t n) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return multiply_f32(s, f32(a), f32(b), f32(y), n);
    require_float(t, "multiply");
    Buffer as = widen(*this, t, a, n), bs = widen(*this, t, b, n);
    multiply_f32(s, as.data(), bs.data(), as.data(), n);
    narrow(as.data(), t, y, n);
  });
}

// A copy moves bits: no widening, any element size.
void CpuBackend::copy_strided(Stream& s, DType t, void* dst, int64_t dst_stride, int64_t dst_offset, const void* src,
                              int64_t src_stride, int64_t src_offset, int64_t rows, int64_t count) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32)
      return copy_strided_f32(s, f32(dst), dst_stride, dst_offset, f32(src), src_stride, src_offset, rows, count);
    if (rows <= 0 || count <= 0) return;
    const auto e = static_cast<int64_t>(dtype_size(t));
    auto* d = static_cast<char*>(dst);
    const auto* c = static_cast<const char*>(src);
#pragma omp parallel for if (rows * count >= 16384) schedule(static)
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(d + (i * dst_stride + dst_offset) * e, c + (i * src_stride + src_offset) * e,
                  static_cast<size_t>(count * e));
  });
}

// A copy moves bits; an accumulation adds in f32 and rounds back to the type, row by row.
void CpuBackend::copy_block(Stream& s, DType t, void* dst, const void* src, const BlockCopy& b, bool accumulate) {
  run_on(s, [=, this] {
    if (b.outer <= 0 || b.rows <= 0 || b.count <= 0) return;
    if (accumulate) require_float(t, "copy_block");
    const auto e = static_cast<int64_t>(dtype_size(t));
    auto* d = static_cast<char*>(dst);
    const auto* c = static_cast<const char*>(src);
    const int64_t lines = b.outer * b.rows;
#pragma omp parallel if (b.elements() >= k_parallel_min)
    {
      std::vector<float> wide_src, wide_dst;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < lines; ++i) {
        const int64_t o = i / b.rows, r = i % b.rows;
        char* to = d + (b.dst_offset + o * b.dst_outer + r * b.dst_row) * e;
        const char* from = c + (b.src_offset + o * b.src_outer + r * b.src_row) * e;
        if (!accumulate) {
          std::memcpy(to, from, static_cast<size_t>(b.count * e));
        } else if (t == DType::f32) {
          float* y = f32(to);
          const float* x = f32(from);
#pragma omp simd
          for (int64_t j = 0; j < b.count; ++j) y[j] += x[j];
        } else {
          const auto n = static_cast<size_t>(b.count);
          wide_src.resize(n);
          wide_dst.resize(n);
          convert_now(from, t, wide_src.data(), DType::f32, n);
          convert_now(to, t, wide_dst.data(), DType::f32, n);
          for (size_t j = 0; j < n; ++j) wide_dst[j] += wide_src[j];
          convert_now(wide_dst.data(), DType::f32, to, t, n);
        }
      }
    }
  });
}

void CpuBackend::global_avg_pool_forward(Stream& s, DType t, const void* x, void* y, int64_t nc, int64_t hw) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return global_avg_pool_forward_f32(s, f32(x), f32(y), nc, hw);
    require_float(t, "global_avg_pool");
    const auto nx = static_cast<size_t>(nc * hw), ny = static_cast<size_t>(nc);
    Buffer xs = widen(*this, t, x, nx), ys = allocate(ny);
    global_avg_pool_forward_f32(s, xs.data(), ys.data(), nc, hw);
    narrow(ys.data(), t, y, ny);
  });
}

void CpuBackend::global_avg_pool_backward(Stream& s, DType t, const void* dy, void* dx, int64_t nc, int64_t hw) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return global_avg_pool_backward_f32(s, f32(dy), f32(dx), nc, hw);
    require_float(t, "global_avg_pool");
    const auto nx = static_cast<size_t>(nc * hw), ny = static_cast<size_t>(nc);
    Buffer dys = widen(*this, t, dy, ny), dxs = allocate(nx);
    global_avg_pool_backward_f32(s, dys.data(), dxs.data(), nc, hw);
    narrow(dxs.data(), t, dx, nx);
  });
}

void CpuBackend::bilinear_forward(Stream& s, DType t, const void* x, void* y, int64_t nc, int64_t h, int64_t w,
                                  int64_t oh, int64_t ow) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return bilinear_forward_f32(s, f32(x), f32(y), nc, h, w, oh, ow);
    require_float(t, "bilinear");
    const auto nx = static_cast<size_t>(nc * h * w), ny = static_cast<size_t>(nc * oh * ow);
    Buffer xs = widen(*this, t, x, nx), ys = allocate(ny);
    bilinear_forward_f32(s, xs.data(), ys.data(), nc, h, w, oh, ow);
    narrow(ys.data(), t, y, ny);
  });
}

void CpuBackend::bilinear_backward(Stream& s, DType t, const void* dy, void* dx, int64_t nc, int64_t h, int64_t w,
                                   int64_t oh, int64_t ow) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return bilinear_backward_f32(s, f32(dy), f32(dx), nc, h, w, oh, ow);
    require_float(t, "bilinear");
    const auto nx = static_cast<size_t>(nc * h * w), ny = static_cast<size_t>(nc * oh * ow);
    Buffer dys = widen(*this, t, dy, ny), dxs = allocate(nx);
    bilinear_backward_f32(s, dys.data(), dxs.data(), nc, h, w, oh, ow);
    narrow(dxs.data(), t, dx, nx);
  });
}

void CpuBackend::softmax_cross_entropy(Stream& s, DType t, const void* logits, const int32_t* labels,
                                       const float* class_weights, int64_t n, int64_t classes, int64_t hw,
                                       void* dlogits, float* loss, const float* grad_scale) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32)
      return softmax_cross_entropy_f32(s, f32(logits), labels, class_weights, n, classes, hw, f32(dlogits), loss,
                                       grad_scale);
    require_float(t, "softmax_cross_entropy");
    const auto count = static_cast<size_t>(std::max<int64_t>(n * classes * hw, 0));
    Buffer xs = widen(*this, t, logits, count);
    if (dlogits == nullptr)  // the loss alone
      return softmax_cross_entropy_f32(s, xs.data(), labels, class_weights, n, classes, hw, nullptr, loss, grad_scale);
    Buffer gs = allocate(std::max<size_t>(count, 1));
    softmax_cross_entropy_f32(s, xs.data(), labels, class_weights, n, classes, hw, gs.data(), loss, grad_scale);
    narrow(gs.data(), t, dlogits, count);
  });
}

void CpuBackend::argmax_channels(Stream& s, DType t, const void* x, int32_t* out, int64_t n, int64_t c, int64_t hw) {
  run_on(s, [=, this, &s] {
    if (t == DType::f32) return argmax_channels_f32(s, f32(x), out, n, c, hw);
    require_float(t, "argmax");
    Buffer xs = widen(*this, t, x, static_cast<size_t>(n * c * hw));
    argmax_channels_f32(s, xs.data(), out, n, c, hw);
  });
}

}  // namespace squall::cpu
