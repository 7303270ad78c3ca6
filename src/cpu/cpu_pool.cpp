// Pooling plans on oneDNN. Max pooling in training keeps oneDNN's workspace (where each
// maximum came from) in the plan for backward; average pooling divides by the number of
// input elements in the window, padding excluded (PyTorch's count_include_pad=False).
#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"
#include "src/cpu/dnnl_util.hpp"

namespace squall::cpu {

namespace {

using namespace dnnl_util;

// Throws for a description no pooling plan takes (both kinds below check with it).
void check_pool_desc(const PoolDesc& d) {
  const Shape out = d.output();
  if (d.n < 1 || d.c < 1 || d.r < 1 || d.s < 1 || d.stride_h < 1 || d.stride_w < 1 || d.pad_h < 0 ||
        d.pad_w < 0 || out.h() < 1 || out.w() < 1)
      throw Error("pool: invalid description: input " + Shape(d.n, d.c, d.h, d.w).str() + ", window " +
                  std::to_string(d.r) + "x" + std::to_string(d.s) + ", output " + out.str());
    if (d.pad_h * 2 > d.r || d.pad_w * 2 > d.s)
      throw Error("pool: padding must be at most half the window (PyTorch's rule), got pad " +
                  std::to_string(d.pad_h) + "x" + std::to_string(d.pad_w) + " for window " +
                  std::to_string(d.r) + "x" + std::to_string(d.s));
}

class CpuPoolPlan final : public PoolPlan {
 public:
  CpuPoolPlan(dnnl::engine& engine, const PoolDesc& d) : m_desc(d) {
    check_pool_desc(d);
    const Shape out = d.output();
    const tag order = activation_tag(d.layout, "pool");
    const memory::desc src_md({d.n, d.c, d.h, d.w}, dt::f32, order);
    const memory::desc dst_md({out.n(), out.c(), out.h(), out.w()}, dt::f32, order);
    const memory::dims strides{d.stride_h, d.stride_w}, kernel{d.r, d.s}, pad_l{d.pad_h, d.pad_w};
    // Exact right padding for PyTorch's floor-mode output size.
    const memory::dims pad_r{(out.h() - 1) * d.stride_h + d.r - d.h - d.pad_h,
                             (out.w() - 1) * d.stride_w + d.s - d.w - d.pad_w};
    const dnnl::algorithm algo =
        d.kind == PoolKind::max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      dnnl::pooling_forward::primitive_desc train_pd(
          dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, algo, src_md, dst_md, strides, kernel, pad_l,
                                      pad_r),
          attr, engine);
      dnnl::pooling_forward::primitive_desc infer_pd(
          dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, algo, src_md, dst_md, strides, kernel,
                                      pad_l, pad_r),
          attr, engine);
      dnnl::pooling_backward::primitive_desc bwd_pd(
          dnnl::pooling_backward::desc(algo, src_md, dst_md, strides, kernel, pad_l, pad_r), attr, engine, train_pd);
      m_train = dnnl::pooling_forward(train_pd);
      m_infer = dnnl::pooling_forward(infer_pd);
      m_bwd = dnnl::pooling_backward(bwd_pd);
      const size_t scratch = std::max({train_pd.scratchpad_desc().get_size(), infer_pd.scratchpad_desc().get_size(),
                                       bwd_pd.scratchpad_desc().get_size(), size_t{1}});
      m_scratch = memory(memory::desc({static_cast<int64_t>(scratch)}, dt::u8, tag::x), engine);
      if (train_pd.workspace_desc().get_size() > 0) m_workspace = memory(train_pd.workspace_desc(), engine);
    } catch (const dnnl::error& e) {
      throw Error("pool: oneDNN rejected pooling " + Shape(d.n, d.c, d.h, d.w).str() + " -> " + out.str() + ": " +
                  e.what());
    }
    m_src = memory(src_md, engine, DNNL_MEMORY_NONE);
    m_dst = memory(dst_md, engine, DNNL_MEMORY_NONE);
    m_train_args = {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_DST, m_dst}, {DNNL_ARG_SCRATCHPAD, m_scratch}};
    m_infer_args = m_train_args;
    m_bwd_args = {{DNNL_ARG_DIFF_DST, m_dst}, {DNNL_ARG_DIFF_SRC, m_src}, {DNNL_ARG_SCRATCHPAD, m_scratch}};
    if (m_workspace) {
      m_train_args.insert({DNNL_ARG_WORKSPACE, m_workspace});
      m_bwd_args.insert({DNNL_ARG_WORKSPACE, m_workspace});
    }
  }

  void forward(Stream& s, const void* xv, void* yv, bool train) override {
    m_queued.run(s, [=, this, &s] {
      const auto* x = static_cast<const float*>(xv);
      auto* y = static_cast<float*>(yv);
      m_src.set_data_handle(bind(x));
      m_dst.set_data_handle(y);
      if (train) {
        m_train.execute(CpuBackend::dnnl_stream(s), m_train_args);
        m_have_workspace = true;
      } else {
        m_infer.execute(CpuBackend::dnnl_stream(s), m_infer_args);
      }
    });
  }

  void backward(Stream& s, const void* dyv, void* dxv) override {
    m_queued.run(s, [=, this, &s] {
      const auto* dy = static_cast<const float*>(dyv);
      auto* dx = static_cast<float*>(dxv);
      if (m_desc.kind == PoolKind::max && !m_have_workspace)
        throw Error("pool: max-pooling backward needs a forward with train=true first (it keeps the argmax)");
      m_dst.set_data_handle(bind(dy));
      m_src.set_data_handle(dx);
      m_bwd.execute(CpuBackend::dnnl_stream(s), m_bwd_args);
    });
  }

 private:
  PoolDesc m_desc;
  dnnl::primitive m_train, m_infer, m_bwd;
  memory m_src, m_dst;        // rebound every call: x or dx; y or dy
  memory m_scratch;
  memory m_workspace;         // max pooling: where each maximum came from, for backward
  bool m_have_workspace = false;
  std::unordered_map<int, memory> m_train_args, m_infer_args, m_bwd_args;
  QueuedWork m_queued;  // last: its destructor waits for the passes still queued
};

// Pooling on NCHW as OpenMP loops over the planes. oneDNN's NCHW pooling is a plain reference
// loop (LeNet-5's 6-channel pooling took 40% of its step in it, and staging it through a
// padded blocked copy did not make it faster); a plane is contiguous, so each thread reads
// and writes its own run of memory. Max pooling keeps the index of each maximum in its plane
// (the first of equal values, as PyTorch) for backward.
class PlanePoolPlan final : public PoolPlan {
 public:
  explicit PlanePoolPlan(const PoolDesc& d) : m_d(d), m_out(d.output()) {
    check_pool_desc(d);
    if (d.kind == PoolKind::max) m_argmax.resize(static_cast<size_t>(m_out.numel()));
  }

  void forward(Stream& s, const void* xv, void* yv, bool train) override {
    m_queued.run(s, [=, this, &s] {
      const auto* x = static_cast<const float*>(xv);
      auto* y = static_cast<float*>(yv);
      const int64_t planes = m_d.n * m_d.c, ih = m_d.h, iw = m_d.w, oh = m_out.h(), ow = m_out.w();
      const bool max = m_d.kind == PoolKind::max;
#pragma omp parallel for schedule(static) if (planes * ih * iw >= k_parallel_min)
      for (int64_t p = 0; p < planes; ++p) {
        const float* in = x + p * ih * iw;
        float* out = y + p * oh * ow;
        int32_t* arg = max ? m_argmax.data() + p * oh * ow : nullptr;
        for (int64_t oy = 0; oy < oh; ++oy) {
          const auto [y0, y1] = window(oy, m_d.stride_h, m_d.pad_h, m_d.r, ih);
          for (int64_t ox = 0; ox < ow; ++ox) {
            const auto [x0, x1] = window(ox, m_d.stride_w, m_d.pad_w, m_d.s, iw);
            if (max) {
              int64_t best = y0 * iw + x0;
              for (int64_t yy = y0; yy < y1; ++yy)
                for (int64_t xx = x0; xx < x1; ++xx)
                  if (in[yy * iw + xx] > in[best]) best = yy * iw + xx;
              out[oy * ow + ox] = in[best];
              arg[oy * ow + ox] = static_cast<int32_t>(best);
            } else {
              float sum = 0.0f;
              for (int64_t yy = y0; yy < y1; ++yy)
                for (int64_t xx = x0; xx < x1; ++xx) sum += in[yy * iw + xx];
              out[oy * ow + ox] = sum / static_cast<float>((y1 - y0) * (x1 - x0));
            }
          }
        }
      }
      if (max && train) m_have_argmax = true;
    });
  }

  void backward(Stream& s, const void* dyv, void* dxv) override {
    m_queued.run(s, [=, this, &s] {
      const auto* dy = static_cast<const float*>(dyv);
      auto* dx = static_cast<float*>(dxv);
      if (m_d.kind == PoolKind::max && !m_have_argmax)
        throw Error("pool: max-pooling backward needs a forward with train=true first (it keeps the argmax)");
      const int64_t planes = m_d.n * m_d.c, ih = m_d.h, iw = m_d.w, oh = m_out.h(), ow = m_out.w();
#pragma omp parallel for schedule(static) if (planes * ih * iw >= k_parallel_min)
      for (int64_t p = 0; p < planes; ++p) {
        float* din = dx + p * ih * iw;
        const float* g = dy + p * oh * ow;
        std::fill(din, din + ih * iw, 0.0f);
        if (m_d.kind == PoolKind::max) {
          const int32_t* arg = m_argmax.data() + p * oh * ow;
          for (int64_t o = 0; o < oh * ow; ++o) din[arg[o]] += g[o];
          continue;
        }
        for (int64_t oy = 0; oy < oh; ++oy) {
          const auto [y0, y1] = window(oy, m_d.stride_h, m_d.pad_h, m_d.r, ih);
          for (int64_t ox = 0; ox < ow; ++ox) {
            const auto [x0, x1] = window(ox, m_d.stride_w, m_d.pad_w, m_d.s, iw);
            const float share = g[oy * ow + ox] / static_cast<float>((y1 - y0) * (x1 - x0));
            for (int64_t yy = y0; yy < y1; ++yy)
              for (int64_t xx = x0; xx < x1; ++xx) din[yy * iw + xx] += share;
          }
        }
      }
    });
  }

 private:
  // The input rows (or columns) [first, last) under output position o, padding cut off.
  static std::pair<int64_t, int64_t> window(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t size) {
    return {std::max<int64_t>(o * stride - pad, 0), std::min<int64_t>(o * stride - pad + k, size)};
  }

  PoolDesc m_d;
  Shape m_out;
  std::vector<int32_t> m_argmax;  // max: per output, the index of its maximum in its input plane
  bool m_have_argmax = false;
  QueuedWork m_queued;  // last: its destructor waits for the passes still queued
};

}  // namespace

std::unique_ptr<PoolPlan> CpuBackend::make_pool(const PoolDesc& d) {
  if (d.dtype != DType::f32) {
    // Not virtual: a subclass (a test's recording backend) sees the one plan it was asked for.
    return make_reduced_pool(*this, d, CpuBackend::make_pool(as_f32(d)));
  }
  if (d.layout == Layout::nchw) {
    return std::make_unique<PlanePoolPlan>(d);
  }
  return std::make_unique<CpuPoolPlan>(m_engine, d);
}

}  // namespace squall::cpu
