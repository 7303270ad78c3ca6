// Convolution and transposed convolution: thin layers over the backend's ConvPlan.
#include <memory>
#include <optional>

#include "src/core/error.hpp"
#include "src/nn/layer.hpp"
#include "src/nn/layers/halo.hpp"
#include "src/nn/layers/image_input.hpp"

namespace squall::nn {
namespace {

// Both convolutions keep the same state: the plan and views of weight, bias and their grads.
class ConvBase : public Layer {
 public:
  void build(Backend& backend, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             const std::vector<Tensor>& state) override {
    bind_weights(params, grads, m_desc.bias, type(), m_weight, m_dweight, m_bias, m_dbias);
    m_desc.dtype = m_dtype;
    m_desc.layout = input_layout(0);
    m_desc.out_layout.reset();
    if (m_layout != m_desc.layout) m_desc.out_layout = m_layout;
    m_desc.backward = !forward_only();
    m_desc.fold_batch_norm = m_fuse_bn;
    m_desc.relu = m_fuse_relu;
    m_plan = backend.make_conv(m_desc);
    m_backend = &backend;
    m_mirror = m_plan->weight_mirror();
    m_halo.reset();
    if (m_tile && ConvTile::needs_halos(m_desc, *m_tile)) m_halo = std::make_unique<ConvTile>(backend, m_desc, *m_tile);
  }

  // On a tile: a halo around the plan where the kernel reaches across a tile edge
  // (src/nn/layers/halo.hpp); set after setup() on the tile, so that the description is the tile's.
  std::string set_tile(const TileContext& t) override {
    m_tile.reset();
    const std::string why = ConvTile::check(m_desc, t);
    if (why.empty()) m_tile = t;
    return why;
  }

  int64_t halo_values() const override { return m_tile ? ConvTile::received_values(m_desc, *m_tile) : 0; }

  // The plan's copy of the weights (reduced precision, NHWC) is used as it stands when the
  // graph says the optimizer has written it from the current weights.
  void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const RunMode& mode) override {
    const float* b = m_desc.bias ? m_bias.f32() : nullptr;
    if (m_halo && m_halo->whole()) return m_halo->forward_whole(stream, in[0].data, m_weight.f32(), b, out.data);
    if (m_halo) m_halo->start_forward(stream, in[0].data);
    if (mode.weights_mirrored && m_mirror.data != nullptr)
      m_plan->forward_mirrored(stream, in[0].data, m_weight.f32(), b, out.data);
    else if (mode.weights_version != 0)
      m_plan->forward_unchanged(stream, in[0].data, m_weight.f32(), b, out.data, mode.weights_version);
    else
      m_plan->forward(stream, in[0].data, m_weight.f32(), b, out.data);
    if (m_halo) m_halo->finish_forward(stream, in[0].data, m_weight.f32(), b, out.data);
  }

  bool mixes_layouts() const override { return true; }

  // A forward-only graph's convolution takes the batch norm after it (folded into its weights)
  // and the ReLU after that (a post-op), as inference runtimes do. A training graph's takes
  // a ReLU right after it: the post-op forward, and backward masks the ReLU's output gradient
  // where the output is positive before the convolution's own backward reads it.
  bool fuse_next(const Layer& next, bool training) override {
    // The edge strips overwrite the plan's output: nothing fused into it.
    if (m_tile && ConvTile::needs_halos(m_desc, *m_tile)) return false;
    if (next.type() == "batch_norm" && !training && !m_fuse_bn && !m_fuse_relu) {
      m_fuse_bn = true;
      m_desc.bn_eps = next.attributes().eps;
      return true;
    }
    if (next.type() == "relu" && !m_fuse_relu) return m_fuse_relu = true;
    return false;
  }
  void reset_fusion() override { m_fuse_bn = m_fuse_relu = false; }
  // The fused ReLU's backward masks dout in place (below).
  bool overwrites_output_gradient() const override { return m_fuse_relu; }
  void bind_fused_batch_norm(const Tensor& gamma, const Tensor& beta, const Tensor& mean, const Tensor& var) override {
    SQUALL_CHECK(m_fuse_bn && m_plan, type() + ": bind_fused_batch_norm after build, with fuse_next");
    m_plan->bind_batch_norm(gamma.f32(), beta.f32(), mean.f32(), var.f32());
  }

  std::vector<WeightMirror> weight_mirrors() const override {
    if (m_mirror.data == nullptr) return {};
    std::vector<WeightMirror> mirrors{m_mirror};
    if (m_desc.bias) mirrors.emplace_back();
    return mirrors;
  }

  void backward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out, const Tensor& dout,
                const std::vector<Tensor>& din) override {
    // The fused ReLU's backward, in place: its output gradient is this layer's (the graph gave
    // the two nodes one gradient), and no node that has yet to read it shares that memory
    // (overwrites_output_gradient: the gradient aliases keep a copy for such a node instead).
    if (m_fuse_relu)
      m_backend->relu_backward(stream, m_dtype, out.data, dout.data, dout.data, static_cast<size_t>(out.shape.numel()));
    if (m_halo && m_halo->whole())
      return m_halo->backward_whole(stream, dout.data, m_weight.f32(), m_dweight.f32(),
                                    m_desc.bias ? m_dbias.f32() : nullptr, din[0].data);
    // On a tile, the halos' gradients leave first and travel while the plan computes.
    if (m_halo) m_halo->start_backward(stream, dout.data, m_weight.f32(), din[0].data != nullptr);
    m_plan->backward_weights(stream, in[0].data, dout.data, m_dweight.f32(),
                             m_desc.bias ? m_dbias.f32() : nullptr);
    if (m_halo) m_halo->add_halo_weight_gradients(stream, m_dweight.f32());
    if (din[0].data != nullptr) m_plan->backward_data(stream, dout.data, m_weight.f32(), din[0].data);
    if (m_halo && din[0].data != nullptr) m_halo->finish_backward(stream, din[0].data);
  }

  // Direct convolution: 2 * c * r * s per output element (padding included, as cuDNN computes
  // it); transposed: 2 * k * r * s per input element. The bias adds 1 per output element.
  double forward_flops(const std::vector<Shape>& inputs, const Shape& output) const override {
    const double area = static_cast<double>(m_desc.r * m_desc.s);
    const double macs = m_desc.transposed ? static_cast<double>(inputs.at(0).numel()) * m_desc.k * area
                                          : static_cast<double>(output.numel()) * m_desc.c * area;
    return 2.0 * macs + (m_desc.bias ? static_cast<double>(output.numel()) : 0.0);
  }

 protected:
  // Validates the output size that setup computed into m_desc.
  // The fields both kinds share: a square kernel, one stride and one padding for both axes.
  void set_square_desc(const Shape& x, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding) {
    m_desc = ConvDesc{};
    m_desc.n = x.n();
    m_desc.c = x.c();
    m_desc.h = x.h();
    m_desc.w = x.w();
    m_desc.k = out_channels;
    m_desc.r = m_desc.s = kernel;
    m_desc.stride_h = m_desc.stride_w = stride;
    m_desc.pad_h = m_desc.pad_w = padding;
  }

  Shape checked_output(const Shape& x) const {
    const Shape y = m_desc.output();
    if (y[2] <= 0 || y[3] <= 0)
      throw Error(type() + ": input " + x.str() + " gives an empty output " + y.str() +
                  " (kernel " + std::to_string(m_desc.r) + ", stride " + std::to_string(m_desc.stride_h) +
                  ", padding " + std::to_string(m_desc.pad_h) + ")");
    return y;
  }

  ConvDesc m_desc;
  std::unique_ptr<ConvPlan> m_plan;
  WeightMirror m_mirror;  // the plan's copy of the weights, if it keeps one
  Backend* m_backend = nullptr;
  bool m_fuse_bn = false, m_fuse_relu = false;  // the following batch norm (forward-only), ReLU
  Tensor m_weight, m_bias, m_dweight, m_dbias;
  std::optional<TileContext> m_tile;  // a split sample: this rank's tiles (set_tile)
  std::unique_ptr<ConvTile> m_halo;   // its halos, where the kernel reaches across a tile edge
};

class Conv2d final : public ConvBase {
 public:
  explicit Conv2d(const Conv2dOptions& o) : m_options(o) {
    if (o.out_channels <= 0 || o.kernel <= 0 || o.stride <= 0 || o.padding < 0 || o.dilation <= 0)
      throw Error("conv2d: out_channels, kernel, stride and dilation must be positive and padding "
                  "non-negative (got out_channels " + std::to_string(o.out_channels) + ", kernel " +
                  std::to_string(o.kernel) + ", stride " + std::to_string(o.stride) + ", padding " +
                  std::to_string(o.padding) + ", dilation " + std::to_string(o.dilation) + ")");
  }
  std::string type() const override { return "conv2d"; }
  LayerAttributes attributes() const override {
    LayerAttributes a;
    a.kernel = m_options.kernel;
    a.stride = m_options.stride;
    a.padding = m_options.padding;
    a.dilation = m_options.dilation;
    a.bias = m_options.bias;
    return a;
  }

  Shape setup(const std::vector<Shape>& inputs) override {
    const Shape& x = image_input(type(), inputs);
    set_square_desc(x, m_options.out_channels, m_options.kernel, m_options.stride, m_options.padding);
    m_desc.dil_h = m_desc.dil_w = m_options.dilation;
    m_desc.bias = m_options.bias;
    return checked_output(x);
  }

  std::vector<ParamSpec> param_specs() const override {
    const int64_t area = m_desc.r * m_desc.s;
    std::vector<ParamSpec> specs{{"weight", m_desc.weight(), m_options.init, m_desc.c * area, m_desc.k * area, true}};
    if (m_desc.bias) specs.push_back({"bias", Shape(m_desc.k), Init::uniform_fan_in, m_desc.c * area, m_desc.k * area, false});
    return specs;
  }

 private:
  Conv2dOptions m_options;
};

class ConvTranspose2d final : public ConvBase {
 public:
  explicit ConvTranspose2d(const ConvTranspose2dOptions& o) : m_options(o) {
    if (o.out_channels <= 0 || o.kernel <= 0 || o.stride <= 0 || o.padding < 0 || o.output_padding < 0 ||
        o.output_padding >= o.stride)
      throw Error("conv_transpose2d: out_channels, kernel and stride must be positive, padding "
                  "non-negative and 0 <= output_padding < stride (got out_channels " +
                  std::to_string(o.out_channels) + ", kernel " + std::to_string(o.kernel) + ", stride " +
                  std::to_string(o.stride) + ", padding " + std::to_string(o.padding) + ", output_padding " +
                  std::to_string(o.output_padding) + ")");
  }
  std::string type() const override { return "conv_transpose2d"; }
  LayerAttributes attributes() const override {
    LayerAttributes a;
    a.kernel = m_options.kernel;
    a.stride = m_options.stride;
    a.padding = m_options.padding;
    a.output_padding = m_options.output_padding;
    a.bias = m_options.bias;
    return a;
  }

  Shape setup(const std::vector<Shape>& inputs) override {
    const Shape& x = image_input(type(), inputs);
    set_square_desc(x, m_options.out_channels, m_options.kernel, m_options.stride, m_options.padding);
    m_desc.out_pad_h = m_desc.out_pad_w = m_options.output_padding;
    m_desc.bias = m_options.bias;
    m_desc.transposed = true;
    return checked_output(x);
  }

  // Each input pixel writes its own stride x stride block when kernel = stride with no
  // padding: no tile reaches another's. Overlapping kernels need a halo (not built yet).
  std::string set_tile(const TileContext&) override {
    if (m_options.kernel == m_options.stride && m_options.padding == 0 && m_options.output_padding == 0) return "";
    return "a transposed convolution runs on tiles only with kernel = stride and no padding (got kernel " +
           std::to_string(m_options.kernel) + ", stride " + std::to_string(m_options.stride) + ", padding " +
           std::to_string(m_options.padding) + ")";
  }

  // Weights are [c_in, k_out, r, s]; PyTorch computes fan_in from dimension 1 of the weight,
  // so the default bound of a transposed convolution is 1/sqrt(k_out * r * s).
  std::vector<ParamSpec> param_specs() const override {
    const int64_t area = m_desc.r * m_desc.s;
    std::vector<ParamSpec> specs{{"weight", m_desc.weight(), Init::uniform_fan_in, m_desc.k * area, m_desc.c * area, true}};
    if (m_desc.bias) specs.push_back({"bias", Shape(m_desc.k), Init::uniform_fan_in, m_desc.k * area, m_desc.c * area, false});
    return specs;
  }

 private:
  ConvTranspose2dOptions m_options;
};

}  // namespace

std::unique_ptr<Layer> conv2d(const Conv2dOptions& options) { return std::make_unique<Conv2d>(options); }

std::unique_ptr<Layer> conv_transpose2d(const ConvTranspose2dOptions& options) {
  return std::make_unique<ConvTranspose2d>(options);
}

}  // namespace squall::nn
