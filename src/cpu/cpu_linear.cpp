// Fully connected plans on oneDNN's inner product: x [n, in] (nc), w [out, in] (oi), b [out].
#include <algorithm>
#include <unordered_map>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"
#include "src/cpu/dnnl_util.hpp"

namespace squall::cpu {

namespace {

using namespace dnnl_util;

class CpuLinearPlan final : public LinearPlan {
 public:
  CpuLinearPlan(dnnl::engine& engine, const LinearDesc& d) : m_desc(d) {
    if (d.n < 1 || d.in < 1 || d.out < 1)
      throw Error("linear: invalid description n=" + std::to_string(d.n) + " in=" + std::to_string(d.in) +
                  " out=" + std::to_string(d.out));
    const memory::desc src_md({d.n, d.in}, dt::f32, tag::nc);
    const memory::desc wei_md({d.out, d.in}, dt::f32, tag::oi);
    const memory::desc bias_md = d.bias ? memory::desc({d.out}, dt::f32, tag::x) : memory::desc();
    const memory::desc dst_md({d.n, d.out}, dt::f32, tag::nc);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      dnnl::inner_product_forward::primitive_desc fwd_pd(
          dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src_md, wei_md, bias_md, dst_md),
          attr, engine);
      dnnl::inner_product_backward_data::primitive_desc data_pd(
          dnnl::inner_product_backward_data::desc(src_md, wei_md, dst_md), attr, engine, fwd_pd);
      dnnl::inner_product_backward_weights::primitive_desc weights_pd(
          dnnl::inner_product_backward_weights::desc(src_md, wei_md, bias_md, dst_md), attr, engine, fwd_pd);
      m_fwd = dnnl::inner_product_forward(fwd_pd);
      m_bwd_data = dnnl::inner_product_backward_data(data_pd);
      m_bwd_weights = dnnl::inner_product_backward_weights(weights_pd);
      const size_t scratch = std::max({fwd_pd.scratchpad_desc().get_size(), data_pd.scratchpad_desc().get_size(),
                                       weights_pd.scratchpad_desc().get_size(), size_t{1}});
      m_scratch = memory(memory::desc({static_cast<int64_t>(scratch)}, dt::u8, tag::x), engine);
    } catch (const dnnl::error& e) {
      throw Error("linear: oneDNN rejected inner product " + std::to_string(d.in) + " -> " +
                  std::to_string(d.out) + " (batch " + std::to_string(d.n) + "): " + e.what());
    }
    m_src = memory(src_md, engine, DNNL_MEMORY_NONE);
    m_wei = memory(wei_md, engine, DNNL_MEMORY_NONE);
    m_dst = memory(dst_md, engine, DNNL_MEMORY_NONE);
    m_fwd_args = {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_WEIGHTS, m_wei}, {DNNL_ARG_DST, m_dst},
                  {DNNL_ARG_SCRATCHPAD, m_scratch}};
    m_bwd_data_args = {{DNNL_ARG_DIFF_DST, m_dst}, {DNNL_ARG_WEIGHTS, m_wei}, {DNNL_ARG_DIFF_SRC, m_src},
                       {DNNL_ARG_SCRATCHPAD, m_scratch}};
    m_bwd_weights_args = {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_DIFF_DST, m_dst}, {DNNL_ARG_DIFF_WEIGHTS, m_wei},
                          {DNNL_ARG_SCRATCHPAD, m_scratch}};
    if (d.bias) {
      m_bias = memory(bias_md, engine, DNNL_MEMORY_NONE);
      m_fwd_args.insert({DNNL_ARG_BIAS, m_bias});
      m_bwd_weights_args.insert({DNNL_ARG_DIFF_BIAS, m_bias});
    }
  }

  void forward(Stream& s, const void* xv, const float* w, const float* b, void* yv) override {
    m_queued.run(s, [=, this, &s] {
      const auto* x = static_cast<const float*>(xv);
      auto* y = static_cast<float*>(yv);
      m_src.set_data_handle(bind(x));
      m_wei.set_data_handle(bind(w));
      if (m_desc.bias) m_bias.set_data_handle(bind(b));
      m_dst.set_data_handle(y);
      m_fwd.execute(CpuBackend::dnnl_stream(s), m_fwd_args);
    });
  }

  void backward_data(Stream& s, const void* dyv, const float* w, void* dxv) override {
    m_queued.run(s, [=, this, &s] {
      const auto* dy = static_cast<const float*>(dyv);
      auto* dx = static_cast<float*>(dxv);
      m_dst.set_data_handle(bind(dy));
      m_wei.set_data_handle(bind(w));
      m_src.set_data_handle(dx);
      m_bwd_data.execute(CpuBackend::dnnl_stream(s), m_bwd_data_args);
    });
  }

  void backward_weights(Stream& s, const void* xv, const void* dyv, float* dw, float* db) override {
    m_queued.run(s, [=, this, &s] {
      const auto* x = static_cast<const float*>(xv);
      const auto* dy = static_cast<const float*>(dyv);
      m_src.set_data_handle(bind(x));
      m_dst.set_data_handle(bind(dy));
      m_wei.set_data_handle(dw);
      if (m_desc.bias) m_bias.set_data_handle(db);
      m_bwd_weights.execute(CpuBackend::dnnl_stream(s), m_bwd_weights_args);
    });
  }

 private:
  LinearDesc m_desc;
  dnnl::primitive m_fwd, m_bwd_data, m_bwd_weights;
  memory m_src, m_wei, m_bias, m_dst;  // rebound every call: x or dx; w or dw; b or db; y or dy
  memory m_scratch;
  std::unordered_map<int, memory> m_fwd_args, m_bwd_data_args, m_bwd_weights_args;
  QueuedWork m_queued;  // last: its destructor waits for the passes still queued
};

}  // namespace

std::unique_ptr<LinearPlan> CpuBackend::make_linear(const LinearDesc& d) {
  if (d.dtype != DType::f32) {
    return make_reduced_linear(*this, d, std::make_unique<CpuLinearPlan>(m_engine, as_f32(d)));
  }
  return std::make_unique<CpuLinearPlan>(m_engine, d);
}

}  // namespace squall::cpu
