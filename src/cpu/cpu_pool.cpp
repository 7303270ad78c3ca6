// Pooling plans on oneDNN. Max pooling in training keeps oneDNN's workspace (where each
// maximum came from) in the plan for backward; average pooling divides by the number of
// input elements in the window, padding excluded (PyTorch's count_include_pad=False).
#include <algorithm>
#include <unordered_map>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"
#include "src/cpu/dnnl_util.hpp"

namespace squall::cpu {

namespace {

using namespace dnnl_util;

class CpuPoolPlan final : public PoolPlan {
 public:
  CpuPoolPlan(dnnl::engine& engine, const PoolDesc& d) : m_desc(d) {
    const Shape out = d.output();
    if (d.n < 1 || d.c < 1 || d.r < 1 || d.s < 1 || d.stride_h < 1 || d.stride_w < 1 || d.pad_h < 0 ||
        d.pad_w < 0 || out.h() < 1 || out.w() < 1)
      throw Error("pool: invalid description: input " + Shape(d.n, d.c, d.h, d.w).str() + ", window " +
                  std::to_string(d.r) + "x" + std::to_string(d.s) + ", output " + out.str());
    if (d.pad_h * 2 > d.r || d.pad_w * 2 > d.s)
      throw Error("pool: padding must be at most half the window (PyTorch's rule), got pad " +
                  std::to_string(d.pad_h) + "x" + std::to_string(d.pad_w) + " for window " +
                  std::to_string(d.r) + "x" + std::to_string(d.s));
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
  }

  void backward(Stream& s, const void* dyv, void* dxv) override {
    const auto* dy = static_cast<const float*>(dyv);
    auto* dx = static_cast<float*>(dxv);
    if (m_desc.kind == PoolKind::max && !m_have_workspace)
      throw Error("pool: max-pooling backward needs a forward with train=true first (it keeps the argmax)");
    m_dst.set_data_handle(bind(dy));
    m_src.set_data_handle(dx);
    m_bwd.execute(CpuBackend::dnnl_stream(s), m_bwd_args);
  }

 private:
  PoolDesc m_desc;
  dnnl::primitive m_train, m_infer, m_bwd;
  memory m_src, m_dst;        // rebound every call: x or dx; y or dy
  memory m_scratch;
  memory m_workspace;         // max pooling: where each maximum came from, for backward
  bool m_have_workspace = false;
  std::unordered_map<int, memory> m_train_args, m_infer_args, m_bwd_args;
};

}  // namespace

std::unique_ptr<PoolPlan> CpuBackend::make_pool(const PoolDesc& d) {
  if (d.dtype != DType::f32) {
    PoolDesc f32 = d;
    f32.dtype = DType::f32;
    return make_reduced_pool(*this, d, std::make_unique<CpuPoolPlan>(m_engine, f32));
  }
  return std::make_unique<CpuPoolPlan>(m_engine, d);
}

}  // namespace squall::cpu
