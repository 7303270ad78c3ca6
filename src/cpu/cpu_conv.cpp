// Convolution plans on oneDNN: convolution for the ordinary case, deconvolution for the
// transposed one (weights [c, k, r, s], i.e. PyTorch's ConvTranspose2d layout = oneDNN iohw).
// The three primitives (forward, backward data, backward weights) are made once; a step only
// rebinds the caller's pointers and the stream's scratchpad (sized for the largest of them).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/core/error.hpp"
#include "src/cpu/cpu_backend.hpp"
#include "src/cpu/cpu_info.hpp"
#include "src/cpu/cpu_winograd.hpp"
#include "src/cpu/dnnl_util.hpp"

namespace squall::cpu {

namespace {

using namespace dnnl_util;

// The two families share their shape of API; this picks the primitive types and algorithm.
struct DirectConv {
  using fwd = dnnl::convolution_forward;
  using bwd_data = dnnl::convolution_backward_data;
  using bwd_weights = dnnl::convolution_backward_weights;
  static constexpr dnnl::algorithm algo = dnnl::algorithm::convolution_direct;
};
struct TransposedConv {
  using fwd = dnnl::deconvolution_forward;
  using bwd_data = dnnl::deconvolution_backward_data;
  using bwd_weights = dnnl::deconvolution_backward_weights;
  static constexpr dnnl::algorithm algo = dnnl::algorithm::deconvolution_direct;
};

// One operand of a primitive: the caller's plain-layout view (rebound every call) and, when
// the primitive wants a blocked layout (nChw16c and friends, where oneDNN's AVX-512
// kernels are several times faster than on plain NCHW), a buffer in that layout owned by
// the plan plus the reorder between the two.
struct Operand {
  memory user;
  memory inner;
  dnnl::reorder reorder;  // user -> inner for inputs, inner -> user for outputs
  bool staged = false;

  void init(dnnl::engine& engine, const memory::desc& user_md, const memory::desc& want, bool output) {
    user = memory(user_md, engine, DNNL_MEMORY_NONE);
    staged = want != user_md;
    if (!staged) return;
    inner = memory(want, engine);
    reorder = output ? dnnl::reorder(inner, user) : dnnl::reorder(user, inner);
  }
  // The memory the primitive reads or writes.
  const memory& arg() const { return staged ? inner : user; }
  void bind(const void* p) { user.set_data_handle(const_cast<void*>(p)); }
  void stage_in(dnnl::stream& s) {
    if (staged) reorder.execute(s, user, inner);
  }
  void stage_out(dnnl::stream& s) {
    if (staged) reorder.execute(s, inner, user);
  }
};

// Whether a forward-only plan that oneDNN gives no Winograd kernel computes with squall's
// (cpu_winograd.hpp) instead of oneDNN's direct kernel: where that is measured faster. On the
// U-Net's 3x3 layers at batch 8 (Zen 4 capped at AVX2, bench/RESULTS.md) it was 1.3 to 1.8
// times as fast as oneDNN 2.6's jit:avx2 direct kernel on one thread (1.1 to 1.7 on two), at
// every shape from 16 -> 16 channels at 96 x 144 to 256 -> 256 at 6 x 9, including those
// whose transformed weights (16 c k floats, 4 MiB at 256 x 256) outgrow the L2 cache: a block
// of 6 tiles reads them as a stream.
// Larger layers were not measured and keep oneDNN's kernel.
bool use_own_winograd(const ConvDesc& d) {
  if (!winograd::eligible(d) || !winograd::cpu_supported()) return false;
  return d.c * d.k <= 256 * 256;
}

class CpuConvPlan final : public ConvPlan {
 public:
  CpuConvPlan(dnnl::engine& engine, const ConvDesc& d) : m_desc(d) {
    if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || d.k < 1 || d.r < 1 || d.s < 1 || d.stride_h < 1 ||
        d.stride_w < 1 || d.dil_h < 1 || d.dil_w < 1 || d.pad_h < 0 || d.pad_w < 0)
      throw Error("conv: invalid description (n=" + std::to_string(d.n) + " c=" + std::to_string(d.c) +
                  " h=" + std::to_string(d.h) + " w=" + std::to_string(d.w) + " k=" + std::to_string(d.k) +
                  " kernel " + std::to_string(d.r) + "x" + std::to_string(d.s) + ")");
    const Shape out = d.output();
    if (out.h() < 1 || out.w() < 1)
      throw Error("conv: kernel " + std::to_string(d.r) + "x" + std::to_string(d.s) + " does not fit input " +
                  std::to_string(d.h) + "x" + std::to_string(d.w) + " (output " + out.str() + ")");
    if (d.fold_batch_norm && d.backward)
      throw Error("conv: a folded batch norm is for forward-only plans (ConvDesc::backward = false)");
    if (d.dtype != DType::f32 && d.dtype != DType::bf16)
      throw Error(std::string("conv: oneDNN plans take f32 or bf16 activations, not ") + dtype_name(d.dtype));
    if (d.dtype != DType::f32 && (d.fold_batch_norm || d.relu))
      throw Error("conv: a folded batch norm or ReLU is for f32 plans (Capabilities::fuses)");
    if (d.transposed)
      build<TransposedConv>(engine, d, out);
    else
      build<DirectConv>(engine, d, out);
    if (d.fold_batch_norm) {
      m_folded_w.resize(static_cast<size_t>(d.weight().numel()));
      m_folded_b.resize(static_cast<size_t>(d.k));
    }
  }

  ConvForwardInfo forward_info() const { return {m_fwd_impl, m_f_src.staged, m_f_dst.staged}; }

  void bind_batch_norm(const float* gamma, const float* beta, const float* mean, const float* var) override {
    if (!m_desc.fold_batch_norm) throw Error("conv: bind_batch_norm on a plan that folds none (ConvDesc::fold_batch_norm)");
    m_bn = {gamma, beta, mean, var};
    m_weights_version = 0;
  }

  void forward(Stream& s, const void* x, const float* w, const float* b, void* y) override {
    m_queued.run(s, [=, this, &s] {
      m_weights_version = 0;
      prepare_weights(s, w, b);
      run_forward(s, x, y);
    });
  }

  // The weights as the last forward_unchanged of this version left them: folded, reordered
  // and bound, when w and b are the same tensors (and the batch norm's tensors were not bound
  // again since: bind_batch_norm clears the version).
  void forward_unchanged(Stream& s, const void* x, const float* w, const float* b, void* y,
                         uint64_t version) override {
    m_queued.run(s, [=, this, &s] {
      if (version == 0 || version != m_weights_version || w != m_prepared_w || b != m_prepared_b) {
        prepare_weights(s, w, b);
        m_weights_version = version;
        m_prepared_w = w;
        m_prepared_b = b;
      }
      run_forward(s, x, y);
    });
  }

  void backward_data(Stream& s, const void* dy, const float* w, void* dx) override {
    m_queued.run(s, [=, this, &s] {
      require_backward();
      auto& st = CpuBackend::dnnl_stream(s);
      stage_dy(st, m_d_dy, dy);
      m_d_wei.bind(w);
      m_d_wei.stage_in(st);
      m_d_dx.bind(dx);
      bind_scratch(s);
      m_bwd_data.execute(st, m_bwd_data_args);
      m_d_dx.stage_out(st);
    });
  }

  void backward_weights(Stream& s, const void* x, const void* dy, float* dw, float* db) override {
    m_queued.run(s, [=, this, &s] {
      require_backward();
      auto& st = CpuBackend::dnnl_stream(s);
      // The forward already staged x into the same layout: reuse it when it is the same tensor.
      const bool reuse_src = m_share_src && x == m_forward_x;
      if (!reuse_src) {
        Operand& src = m_share_src ? m_f_src : m_w_src;  // same layout: restage into the forward's buffer
        src.bind(x);
        src.stage_in(st);
      }
      Operand& ddst = m_share_dy ? m_d_dy : m_w_dy;
      stage_dy(st, ddst, dy);
      m_w_dw.bind(dw);
      if (m_desc.bias) {
        m_bias.set_data_handle(db);  // the forward's bias memory: bound again at the next forward
        m_weights_version = 0;
      }
      bind_scratch(s);
      m_bwd_weights.execute(st, m_bwd_weights_args);
      m_w_dw.stage_out(st);
      // The bias it adds itself, its gradient too, summed in double: oneDNN's float sum over a
      // large image rounds at 1e-5 of its value, and a sample split across ranks must get
      // the gradient it gets whole (docs/design.md, "One sample across ranks").
      if (m_own_bias && db != nullptr) {
        const Shape out = m_desc.output();
        bias_gradient(static_cast<const float*>(dy), m_desc.y_layout(), out.n(), out.c(), out.h() * out.w(), db);
      }
    });
  }

  // db[c] = the sum of dy over the pixels of channel c, in dy's layout, accumulated in double.
  static void bias_gradient(const float* dy, Layout l, int64_t n, int64_t k, int64_t hw, float* db) {
    const int64_t block = l == Layout::nhwc ? k : std::max<int64_t>(channel_block(l), 1);  // 1: NCHW
    const int64_t groups = l == Layout::nhwc ? 1 : k / block;
#pragma omp parallel for schedule(static) if (n * k * hw >= 16384)
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<double> sum(static_cast<size_t>(block), 0.0);
      for (int64_t i = 0; i < n; ++i) {
        if (l == Layout::nhwc) {
          for (int64_t p = 0; p < hw; ++p)
            for (int64_t c = 0; c < k; ++c) sum[static_cast<size_t>(c)] += dy[(i * hw + p) * k + c];
        } else {
          const float* run = dy + (i * groups + g) * hw * block;
          for (int64_t p = 0; p < hw; ++p)
            for (int64_t c = 0; c < block; ++c) sum[static_cast<size_t>(c)] += run[p * block + c];
        }
      }
      for (int64_t c = 0; c < block; ++c) db[g * block + c] = static_cast<float>(sum[static_cast<size_t>(c)]);
    }
  }

 private:
  bool has_bias() const { return m_desc.bias || m_desc.fold_batch_norm; }

  // The forward's weights and bias as its primitive reads them: with the batch norm folded in
  // (fold_batch_norm), reordered into the primitive's layout, bound.
  void prepare_weights(Stream& s, const float* w, const float* b) {
    auto& st = CpuBackend::dnnl_stream(s);
    if (m_desc.fold_batch_norm) {
      fold(w, b);
      w = m_folded_w.data();
      b = m_folded_b.data();
    }
    m_forward_b = b;
    if (m_wino) {
      m_wino->set_weights(w);
      return;
    }
    m_f_wei.bind(w);
    m_f_wei.stage_in(st);
    if (has_bias() && !m_own_bias) m_bias.set_data_handle(const_cast<float*>(b));
  }

  // The primitives' scratchpad: the stream's (CpuStream::scratch), bound for this call.
  void bind_scratch(Stream& s) { m_scratch.set_data_handle(cpu_stream(s).scratch(m_scratch_bytes)); }

  void run_forward(Stream& s, const void* x, void* y) {
    if (m_wino) {
      m_wino->run(static_cast<const float*>(x), has_bias() ? m_forward_b : nullptr, m_desc.relu,
                  static_cast<float*>(y));
      m_forward_x = x;
      return;
    }
    auto& st = CpuBackend::dnnl_stream(s);
    m_f_src.bind(x);
    m_f_src.stage_in(st);
    m_f_dst.bind(y);
    bind_scratch(s);
    m_fwd.execute(st, m_fwd_args);
    m_f_dst.stage_out(st);
    if (m_own_bias) {
      const Shape out = m_desc.output();
      add_bias(static_cast<float*>(y), m_desc.y_layout(), out.n(), out.c(), out.h() * out.w(), m_forward_b,
               m_desc.relu);
    }
    // What backward may reuse: the staged input of this forward; a new dy comes next.
    m_forward_x = x;
    m_staged_dy = nullptr;
  }

  // y += b per channel, then the ReLU when asked, in y's own layout. Transposed convolutions
  // add their bias here: oneDNN 2.6's deconvolution adds it in a plain loop after its kernel,
  // five times the kernel's own time for the U-Net's 2x2 upsampling (4.5 against 0.8 ms at
  // 8 x 32 x 48 x 72), and its binary post-op is slower still.
  static void add_bias(float* y, Layout l, int64_t n, int64_t k, int64_t hw, const float* b, bool relu) {
    const int64_t block = l == Layout::nhwc ? k : std::max<int64_t>(channel_block(l), 1);  // 1: NCHW
    // Runs of memory with one pattern of channels: a pixel's channels (NHWC), a channel's
    // plane (NCHW) or a block's pixels (blocked).
    const int64_t runs = l == Layout::nhwc ? n * hw : n * (k / block);
    const int64_t run_len = l == Layout::nhwc ? k : hw * block;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < runs; ++r) {
      float* p = y + r * run_len;
      if (l == Layout::nhwc) {
        for (int64_t c = 0; c < k; ++c) p[c] = relu ? std::max(p[c] + b[c], 0.0f) : p[c] + b[c];
      } else if (block == 1) {
        const float bias = b[r % k];
        for (int64_t i = 0; i < hw; ++i) p[i] = relu ? std::max(p[i] + bias, 0.0f) : p[i] + bias;
      } else {
        const float* bb = b + (r % (k / block)) * block;
        for (int64_t i = 0; i < hw; ++i)
          for (int64_t c = 0; c < block; ++c) {
            float& v = p[i * block + c];
            v = relu ? std::max(v + bb[c], 0.0f) : v + bb[c];
          }
      }
    }
  }

  // The batch norm after the convolution, in eval mode, as the convolution's own weights and
  // bias: per output channel o, scale = gamma / sqrt(var + eps), w' = w * scale and
  // b' = (b - mean) * scale + beta. Output channels are the weights' first dimension, or the
  // second of a transposed convolution's [c, k, r, s].
  void fold(const float* w, const float* b) {
    if (m_bn.gamma == nullptr) throw Error("conv: the folded batch norm's tensors were never bound (bind_batch_norm)");
    const ConvDesc& d = m_desc;
    const int64_t area = d.r * d.s, outer = d.transposed ? d.c : 1;
#pragma omp parallel for schedule(static) if (d.k * d.c * area >= 65536)
    for (int64_t o = 0; o < d.k; ++o) {
      const float scale = m_bn.gamma[o] / std::sqrt(m_bn.var[o] + d.bn_eps);
      m_folded_b[static_cast<size_t>(o)] = ((b != nullptr ? b[o] : 0.0f) - m_bn.mean[o]) * scale + m_bn.beta[o];
      const int64_t inner = d.transposed ? 1 : d.c;  // filters of o: [inner][area] per outer index
      for (int64_t i = 0; i < outer; ++i) {
        const int64_t base = d.transposed ? (i * d.k + o) * area : o * d.c * area;
        for (int64_t j = 0; j < inner * area; ++j)
          m_folded_w[static_cast<size_t>(base + j)] = w[base + j] * scale;
      }
    }
  }

  void require_backward() const {
    if (!m_desc.backward) throw Error("conv: backward on a plan made for forward only (ConvDesc::backward)");
  }

  // dy is staged once per step for both backward calls when their layouts agree.
  void stage_dy(dnnl::stream& st, Operand& op, const void* dy) {
    if (&op == &m_d_dy && m_share_dy && m_staged_dy == dy) return;
    op.bind(dy);
    op.stage_in(st);
    if (&op == &m_d_dy) m_staged_dy = dy;
  }

  template <class Kind>
  void build(dnnl::engine& engine, const ConvDesc& d, const Shape& out) {
    // Activations in their own type (bf16 where the CPU has bf16 arithmetic, f32 otherwise);
    // the caller's weights, bias and weight gradients are f32 always: the primitives read bf16
    // weights, staged (rounded to nearest even) from the f32 ones, and write f32 gradients.
    const dt adt = d.dtype == DType::bf16 ? dt::bf16 : dt::f32;
    memory::desc src_md({d.n, d.c, d.h, d.w}, adt, activation_tag(d.layout, "conv"));  // x, dx
    memory::desc dst_md({out.n(), out.c(), out.h(), out.w()}, adt, activation_tag(d.y_layout(), "conv"));  // y, dy
    const memory::desc wei_md = d.transposed ? memory::desc({d.k, d.c, d.r, d.s}, dt::f32, tag::iohw)
                                             : memory::desc({d.k, d.c, d.r, d.s}, dt::f32, tag::oihw);
    const memory::desc any_src({d.n, d.c, d.h, d.w}, adt, tag::any);
    const memory::desc any_dst({out.n(), out.c(), out.h(), out.w()}, adt, tag::any);
    const memory::desc any_wei({d.k, d.c, d.r, d.s}, adt, tag::any);
    const memory::desc any_dwei({d.k, d.c, d.r, d.s}, dt::f32, tag::any);
    const memory::desc bias_md = has_bias() ? memory::desc({d.k}, dt::f32, tag::x) : memory::desc();
    const memory::dims strides{d.stride_h, d.stride_w};
    const memory::dims dilates{d.dil_h - 1, d.dil_w - 1};  // oneDNN counts the gaps, not the step
    const memory::dims pad_l{d.pad_h, d.pad_w};
    // The right padding that makes the sizes agree exactly: PyTorch's floor for the
    // ordinary case, pad - output_padding for the transposed one.
    const int64_t ext_h = (d.r - 1) * d.dil_h + 1, ext_w = (d.s - 1) * d.dil_w + 1;
    const memory::dims pad_r =
        d.transposed ? memory::dims{(d.h - 1) * d.stride_h + ext_h - out.h() - d.pad_h,
                                    (d.w - 1) * d.stride_w + ext_w - out.w() - d.pad_w}
                     : memory::dims{(out.h() - 1) * d.stride_h + ext_h - d.h - d.pad_h,
                                    (out.w() - 1) * d.stride_w + ext_w - d.w - d.pad_w};

    // Two attributes, each made afresh: a primitive_attr is a handle, and a copy's post-ops
    // would be the backward primitives' too.
    dnnl::primitive_attr attr, fwd_attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    fwd_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    m_own_bias = d.transposed && has_bias() && adt == dt::f32;  // add_bias adds it, and the ReLU after it
    if (d.relu && !m_own_bias) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      fwd_attr.set_post_ops(ops);
    }
    try {
      const auto prop = d.backward ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
      const auto fwd_pd_for = [&](const memory::desc& src, const memory::desc& dst) {
        const typename Kind::fwd::desc fwd_desc(prop, Kind::algo, src, any_wei, m_own_bias ? memory::desc() : bias_md,
                                                dst, strides, dilates, pad_l, pad_r);
        return typename Kind::fwd::primitive_desc(fwd_desc, fwd_attr, engine);
      };
      // Free to choose, oneDNN 2.6's forward_inference on AVX-512 takes its brgemm kernels in
      // NHWC, so that a blocked activation went through two reorders per convolution (in and
      // out), which cost more than the kernel saved. A forward-only plan therefore asks for its
      // activations' own blocked layouts, where oneDNN has direct kernels (the layout that
      // training's forward picks); a layout it could only serve with its reference loops is
      // left to oneDNN's choice, as are plain layouts.
      const bool pin_src = !d.backward && channel_block(d.layout) > 1;
      const bool pin_dst = !d.backward && channel_block(d.y_layout()) > 1;
      typename Kind::fwd::primitive_desc fwd_pd = fwd_pd_for(pin_src ? src_md : any_src, pin_dst ? dst_md : any_dst);
      if ((pin_src || pin_dst) && std::string(fwd_pd.impl_info_str()).rfind("ref", 0) == 0)
        fwd_pd = fwd_pd_for(any_src, any_dst);
      // Forward-only f32 convolutions let oneDNN choose the algorithm (convolution_auto) in the
      // same pinned layouts: on AVX-512 it takes its Winograd F(4x4, 3x3) kernel for 3x3
      // stride-1 convolutions of a batch (2.3 times the direct kernel's speed on the U-Net's
      // middle layers at batch 8 on two Zen 4 cores, bench/RESULTS.md), and the direct one for a
      // single sample or where it has no Winograd kernel (AVX2, bf16). Winograd rounds
      // differently from the direct kernel: an evaluation's logits agree with training's forward
      // within float rounding, not bit for bit (tests/unit/test_memory_plan.cpp).
      bool dnnl_winograd = false;
      if constexpr (std::is_same_v<Kind, DirectConv>) {
        if (pin_src && pin_dst && adt == dt::f32 && !d.transposed) {
          try {
            const typename Kind::fwd::desc auto_desc(prop, dnnl::algorithm::convolution_auto, src_md, any_wei, bias_md,
                                                     dst_md, strides, dilates, pad_l, pad_r);
            typename Kind::fwd::primitive_desc auto_pd(auto_desc, fwd_attr, engine);
            if (std::string(auto_pd.impl_info_str()).find("wino") != std::string::npos) {
              fwd_pd = auto_pd;
              dnnl_winograd = true;
            }
          } catch (const dnnl::error&) {
            // no implementation for the pinned layouts: the direct choice above stands
          }
        }
      }
      // Where oneDNN offers no Winograd (AVX2: its kernels are AVX-512 only), squall's own
      // F(2x2, 3x3) in nChw8c, for the shapes where it was measured faster (use_own_winograd).
      if (!dnnl_winograd && !d.backward && pin_src && pin_dst && use_own_winograd(d)) {
        m_wino = std::make_unique<winograd::Forward>(d);
        m_fwd_impl = winograd::k_impl_name;
        return;  // no oneDNN forward, nor its buffers
      }
      // One block of 16 channels in and out: nChw16c is NHWC, byte for byte, and oneDNN 2.6's
      // brgemm kernels in NHWC beat its direct ones there once the batch has some 8192 output
      // pixels (the U-Net's 16-channel layers at full resolution: 2.3 against 3.4 ms at 8 x 96 x
      // 144 on two Zen 4 cores; at 8 x 16 x 16 the direct kernel wins). The same memory is then
      // described as NHWC, so nothing is reordered.
      const int64_t block = channel_block(d.layout);
      if (!dnnl_winograd && !d.backward && !d.transposed && block == 16 && d.y_layout() == d.layout && d.c == block &&
          d.k == block && out.n() * out.h() * out.w() >= 8192) {
        const memory::desc src_nhwc({d.n, d.c, d.h, d.w}, adt, tag::nhwc);
        const memory::desc dst_nhwc({out.n(), out.c(), out.h(), out.w()}, adt, tag::nhwc);
        typename Kind::fwd::primitive_desc nhwc_pd = fwd_pd_for(src_nhwc, dst_nhwc);
        if (std::string(nhwc_pd.impl_info_str()).rfind("brg", 0) == 0) {
          fwd_pd = nhwc_pd;
          src_md = src_nhwc;
          dst_md = dst_nhwc;
        }
      }
      m_fwd = typename Kind::fwd(fwd_pd);
      m_fwd_impl = fwd_pd.impl_info_str();
      m_f_src.init(engine, src_md, fwd_pd.src_desc(), false);
      m_f_wei.init(engine, wei_md, fwd_pd.weights_desc(), false);
      m_f_dst.init(engine, dst_md, fwd_pd.dst_desc(), true);
      size_t scratch = fwd_pd.scratchpad_desc().get_size();
      if (d.backward) {  // a forward-only plan makes no backward primitives, nor their staging buffers
        const typename Kind::bwd_data::desc data_desc(Kind::algo, any_src, any_wei, any_dst, strides, dilates, pad_l,
                                                      pad_r);
        const typename Kind::bwd_weights::desc weights_desc(Kind::algo, any_src, any_dwei, bias_md, any_dst, strides,
                                                            dilates, pad_l, pad_r);
        const typename Kind::bwd_data::primitive_desc data_pd(data_desc, attr, engine, fwd_pd);
        const typename Kind::bwd_weights::primitive_desc weights_pd(weights_desc, attr, engine, fwd_pd);
        m_bwd_data = typename Kind::bwd_data(data_pd);
        m_bwd_weights = typename Kind::bwd_weights(weights_pd);
        scratch = std::max({scratch, data_pd.scratchpad_desc().get_size(), weights_pd.scratchpad_desc().get_size()});
        m_d_dy.init(engine, dst_md, data_pd.diff_dst_desc(), false);
        m_d_wei.init(engine, wei_md, data_pd.weights_desc(), false);
        m_d_dx.init(engine, src_md, data_pd.diff_src_desc(), true);
        m_share_src = weights_pd.src_desc() == fwd_pd.src_desc();
        m_share_dy = weights_pd.diff_dst_desc() == data_pd.diff_dst_desc();
        if (!m_share_src) m_w_src.init(engine, src_md, weights_pd.src_desc(), false);
        if (!m_share_dy) m_w_dy.init(engine, dst_md, weights_pd.diff_dst_desc(), false);
        m_w_dw.init(engine, wei_md, weights_pd.diff_weights_desc(), true);
      }
      m_scratch_bytes = std::max<size_t>(scratch, 1);
      m_scratch = memory(memory::desc({static_cast<int64_t>(m_scratch_bytes)}, dt::u8, tag::x), engine, DNNL_MEMORY_NONE);
    } catch (const dnnl::error& e) {
      throw Error(std::string("conv: oneDNN rejected ") + (d.transposed ? "transposed " : "") + "convolution " +
                  Shape(d.n, d.c, d.h, d.w).str() + " -> " + out.str() + ": " + e.what());
    }
    m_bias = has_bias() ? memory(bias_md, engine, DNNL_MEMORY_NONE) : memory();
    // The argument maps are built once: the memory objects in them stay, only their data
    // handles are rebound per call.
    const Operand& w_src = m_share_src ? m_f_src : m_w_src;
    const Operand& w_dy = m_share_dy ? m_d_dy : m_w_dy;
    m_fwd_args = {{DNNL_ARG_SRC, m_f_src.arg()}, {DNNL_ARG_WEIGHTS, m_f_wei.arg()}, {DNNL_ARG_DST, m_f_dst.arg()},
                  {DNNL_ARG_SCRATCHPAD, m_scratch}};
    if (has_bias() && !m_own_bias) m_fwd_args.insert({DNNL_ARG_BIAS, m_bias});
    if (!d.backward) return;
    m_bwd_data_args = {{DNNL_ARG_DIFF_DST, m_d_dy.arg()}, {DNNL_ARG_WEIGHTS, m_d_wei.arg()},
                       {DNNL_ARG_DIFF_SRC, m_d_dx.arg()}, {DNNL_ARG_SCRATCHPAD, m_scratch}};
    m_bwd_weights_args = {{DNNL_ARG_SRC, w_src.arg()}, {DNNL_ARG_DIFF_DST, w_dy.arg()},
                          {DNNL_ARG_DIFF_WEIGHTS, m_w_dw.arg()}, {DNNL_ARG_SCRATCHPAD, m_scratch}};
    if (d.bias) m_bwd_weights_args.insert({DNNL_ARG_DIFF_BIAS, m_bias});
  }

  ConvDesc m_desc;
  dnnl::primitive m_fwd, m_bwd_data, m_bwd_weights;
  Operand m_f_src, m_f_wei, m_f_dst;   // forward: x, w, y
  Operand m_d_dy, m_d_wei, m_d_dx;     // backward data: dy, w, dx
  Operand m_w_src, m_w_dy, m_w_dw;     // backward weights: x, dy (when not shared), dw
  bool m_share_src = false, m_share_dy = false;
  bool m_own_bias = false;             // the forward's bias (and ReLU) are added by add_bias
  std::string m_fwd_impl;              // oneDNN's implementation of the forward, or squall's Winograd
  std::unique_ptr<winograd::Forward> m_wino;  // squall's Winograd forward, when it replaces oneDNN's
  const void* m_forward_x = nullptr;   // x of the last forward (its staged copy is m_f_src)
  const float* m_forward_b = nullptr;  // the bias add_bias adds (the folded one when folding)
  // What forward_unchanged prepared the weights from: its version (0: nothing reusable), w, b.
  uint64_t m_weights_version = 0;
  const float* m_prepared_w = nullptr;
  const float* m_prepared_b = nullptr;
  const void* m_staged_dy = nullptr;   // dy staged in m_d_dy during this backward
  memory m_bias;                       // b or db: always plain
  memory m_scratch;                    // the stream's scratchpad (bind_scratch), for the three primitives
  size_t m_scratch_bytes = 0;          // the largest of theirs
  std::unordered_map<int, memory> m_fwd_args, m_bwd_data_args, m_bwd_weights_args;
  struct {
    const float *gamma = nullptr, *beta = nullptr, *mean = nullptr, *var = nullptr;
  } m_bn;                                    // fold_batch_norm: the norm's tensors
  std::vector<float> m_folded_w, m_folded_b;  // fold_batch_norm: the weights and bias with the norm in them
  QueuedWork m_queued;  // last: its destructor waits for the passes still queued
};

// The layout oneDNN picks for a convolution's activations when free to choose: a 3x3
// convolution of 32 channels at a batch of 8, the kind of layer a model is made of.
Layout probe_blocked_layout(dnnl::engine& engine) {
  const memory::dims x{8, 32, 16, 16}, wei{32, 32, 3, 3};
  const dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, memory::desc(x, dt::f32, tag::any),
      memory::desc(wei, dt::f32, tag::any), memory::desc(), memory::desc(x, dt::f32, tag::any), {1, 1}, {0, 0},
      {1, 1}, {1, 1});
  const dnnl::convolution_forward::primitive_desc pd(desc, engine);
  for (const int64_t block : {16, 8})
    if (pd.src_desc() == memory::desc(x, dt::f32, block == 16 ? tag::nChw16c : tag::nChw8c))
      return blocked_layout(block);
  return Layout::nchw;
}

}  // namespace

ConvForwardInfo conv_forward_info(const ConvPlan& p) {
  const auto* plan = dynamic_cast<const CpuConvPlan*>(&p);
  return plan != nullptr ? plan->forward_info() : ConvForwardInfo{};
}

tag dnnl_util::activation_tag(Layout l, const char* what) {
  switch (l) {
    case Layout::nchw: return tag::nchw;
    case Layout::nhwc: return tag::nhwc;
    case Layout::nchw8c: return tag::nChw8c;
    case Layout::nchw16c: return tag::nChw16c;
    case Layout::blocked: break;
  }
  throw Error(std::string(what) + ": layout '" + layout_name(l) +
              "' is a request to a graph, not a memory order (the graph resolves it before making plans)");
}

bool CpuBackend::native_precision(DType t) const {
  return t == DType::f32 || (t == DType::bf16 && !m_reference_precision && dnn_has_bf16());
}

Layout CpuBackend::blocked_layout() const {
  std::call_once(m_blocked_once, [this] { m_blocked = probe_blocked_layout(const_cast<dnnl::engine&>(m_engine)); });
  return m_blocked;
}

std::unique_ptr<ConvPlan> CpuBackend::make_conv(const ConvDesc& d) {
  if (!native_precision(d.dtype)) {  // the reference: an f32 plan between roundings
    return make_reduced_conv(*this, d, std::make_unique<CpuConvPlan>(m_engine, as_f32(d)));
  }
  return std::make_unique<CpuConvPlan>(m_engine, d);
}

}  // namespace squall::cpu
