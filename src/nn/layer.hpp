#pragma once
// A Layer computes one node of a model graph on a Backend. Its life:
//   setup(input shapes)  -> output shape; declares its parameters and state (once per batch)
//   build(backend, ...)  -> makes the backend plans and workspaces for that batch size,
//                           receives views of its parameters, gradients and state
//   forward / backward   -> every step; backward overwrites din (the graph sums branches)
// Parameters live in the model's flat arenas (values, gradients, state), so that
// optimizers, allreduce and model averaging see each of them as one contiguous buffer.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/spatial.hpp"
#include "src/nn/tensor.hpp"

namespace squall::nn {

enum class Init {
  zeros,
  ones,
  uniform_fan_in,     // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for conv/linear
  kaiming_normal_out, // N(0, sqrt(2 / fan_out)): ResNet convolutions
};

struct ParamSpec {
  std::string name;       // "weight", "bias", "running_mean", ...
  Shape shape;
  Init init = Init::zeros;
  int64_t fan_in = 1, fan_out = 1;
  bool weight_decay = true;  // false for biases and norm scales/shifts
};

struct RunMode {
  bool train = true;
  uint64_t seed = 0;  // per learner; with step, seeds dropout masks
  uint64_t step = 0;
  uint64_t node = 0;  // set by the graph for each layer: salts per-layer random streams
  // Set by the graph: the plans' weight mirrors hold the parameters' current values
  // (Layer::weight_mirrors, docs/design.md "Weight mirrors"), so forward need not copy them.
  bool weights_mirrored = false;
  // Nonzero (a value of new_weights_version()): the caller vouches that the graph's parameters
  // and state have not been written since the last forward that carried this same value, so a
  // plan may reuse what it derived from them then (a convolution's weights with the batch norm
  // folded in, reordered for its kernel). Evaluation takes a new value per pass over its
  // samples, after the weights are copied in; 0 (the default): derive them again.
  uint64_t weights_version = 0;
};

// A value for RunMode::weights_version that no earlier call returned (any thread).
inline uint64_t new_weights_version() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}

// A layer's settings as an exporter needs them (src/export/onnx_export.cpp): what its type
// alone does not say. Fields a layer does not have keep their defaults.
struct LayerAttributes {
  int64_t kernel = 0, stride = 1, padding = 0, dilation = 1, output_padding = 0;
  bool bias = false;     // conv2d, conv_transpose2d, linear
  float eps = 0.0f;      // batch_norm
  float p = 0.0f;        // dropout
  int64_t out_h = 0, out_w = 0;  // upsample_bilinear
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string type() const = 0;

  // Shapes include the batch dimension. Throws squall::Error naming the layer on a mismatch.
  virtual Shape setup(const std::vector<Shape>& inputs) = 0;
  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  virtual std::vector<ParamSpec> state_specs() const { return {}; }  // not learned (running stats)
  virtual LayerAttributes attributes() const { return {}; }
  // Floating-point operations of one forward pass over the batch of the last setup(), given
  // the input shapes and the output shape that setup returned (for performance models,
  // src/perf/perf_model.hpp). A multiply-add counts 2. 0: the layer only moves data.
  virtual double forward_flops(const std::vector<Shape>& inputs, const Shape& output) const {
    (void)inputs;
    (void)output;
    return 0.0;
  }

  // The type of the activations (inputs, outputs and their gradients), set by the graph
  // before build(): f32, or bf16/f16 for mixed precision. Parameters are f32 regardless.
  void set_dtype(DType t) { m_dtype = t; }
  DType dtype() const { return m_dtype; }
  // The memory order of 4-D activations, set by the graph before build() (docs/design.md,
  // "Layout"): the output's (and its gradient's), and each input's (and its gradient's), which
  // are the output's unless set. Shapes are [n, c, h, w] in every layout. A blocked graph
  // gives a layer inputs in another layout than its output only where mixes_layouts() says it
  // can take them; the others see one layout throughout.
  void set_layout(Layout l) {
    m_layout = l;
    m_in_layouts.clear();
  }
  void set_layouts(std::vector<Layout> inputs, Layout output) {
    m_layout = output;
    m_in_layouts = std::move(inputs);
  }
  Layout layout() const { return m_layout; }
  Layout input_layout(size_t i) const { return i < m_in_layouts.size() ? m_in_layouts[i] : m_layout; }
  // True when the layer reads its 4-D inputs in any layout and writes its output in any
  // other (convolutions, which oneDNN runs between any two; and the layers that compute on
  // NCHW copies or give a 2-D output).
  virtual bool mixes_layouts() const { return false; }

  // One sample across ranks (src/nn/spatial.hpp; docs/design.md, "One sample across ranks"):
  // after setup() on this rank's tile, the graph hands a layer of a split graph its tiles and
  // the group's communicator, before build(). Returns "" when the layer runs on tiles, else
  // why it cannot (the graph then refuses the split, naming the node). The default: it cannot.
  virtual std::string set_tile(const TileContext& tile) {
    (void)tile;
    return "it has no form for a sample split across ranks";
  }
  // Before each setup(): the tile of the layer's output on this rank (null for the whole
  // sample's setup), for a layer whose output size is fixed rather than read from its input
  // (an upsampling to a given size), which then gives its tile's size.
  virtual void set_tile_output(const TensorTile* output) { (void)output; }
  // After set_tile: the values of its input this rank receives from the rest of its group per
  // forward pass (its halos; as many go back in backward where the input has a gradient), for
  // the performance model's count of a split's traffic. 0 for a layer that exchanges nothing.
  virtual int64_t halo_values() const { return 0; }

  // Set by the graph before build(): the layer will only run forward (a forward-only graph:
  // evaluation, prediction), so its plans need nothing for backward.
  void set_forward_only(bool on) { m_forward_only = on; }
  bool forward_only() const { return m_forward_only; }
  virtual void build(Backend& backend, const std::vector<Tensor>& params,
                     const std::vector<Tensor>& grads, const std::vector<Tensor>& state) = 0;
  virtual void forward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out,
                       const RunMode& mode) = 0;
  // din[i].data == nullptr: the gradient of input i is not needed (e.g. the model input), or
  // the graph has made it dout itself (passes_gradient_through).
  virtual void backward(Stream& stream, const std::vector<Tensor>& in, const Tensor& out,
                        const Tensor& dout, const std::vector<Tensor>& din) = 0;
  // True when backward writes dout unchanged into every input gradient (the residual add):
  // the graph may then give an input dout's memory as its gradient instead of a copy
  // (src/nn/gradient_aliases.hpp).
  virtual bool passes_gradient_through() const { return false; }
  // True when backward writes dout before it has read it (a convolution that took the ReLU
  // after it masks that gradient in place): no other node's gradient may then share dout's
  // memory while that node has yet to read it (src/nn/gradient_aliases.hpp). Known after the
  // graph's fusion.
  virtual bool overwrites_output_gradient() const { return false; }
  // Fusion (docs/design.md, "Inference"): before build(), the graph offers the layer the node
  // that alone reads its output (`training`: in a training graph); true means the layer's
  // forward computes that node's too, and its backward takes that node's output gradient (the
  // graph then skips the node, whose value and gradient are this layer's). A layer that took
  // a batch norm gets the norm's tensors after build().
  virtual bool fuse_next(const Layer& next, bool training) {
    (void)next, (void)training;
    return false;
  }
  virtual void reset_fusion() {}
  virtual void bind_fused_batch_norm(const Tensor& gamma, const Tensor& beta, const Tensor& mean, const Tensor& var) {
    (void)gamma, (void)beta, (void)mean, (void)var;
    throw Error(type() + ": takes no batch norm");
  }
  // After build: per parameter of param_specs(), the copy its plan computes with
  // (WeightMirror; none for most). Empty: none at all.
  virtual std::vector<WeightMirror> weight_mirrors() const { return {}; }

 protected:
  DType m_dtype = DType::f32;
  Layout m_layout = Layout::nchw;
  std::vector<Layout> m_in_layouts;  // per input; empty: all m_layout
  bool m_forward_only = false;
};

// ---- factories (src/nn/layers/*.cpp) --------------------------------------------------------
struct Conv2dOptions {
  int64_t out_channels = 1, kernel = 3, stride = 1, padding = 0, dilation = 1;
  bool bias = true;
  Init init = Init::uniform_fan_in;
};
struct ConvTranspose2dOptions {
  int64_t out_channels = 1, kernel = 2, stride = 2, padding = 0, output_padding = 0;
  bool bias = true;
};
std::unique_ptr<Layer> conv2d(const Conv2dOptions&);
std::unique_ptr<Layer> conv_transpose2d(const ConvTranspose2dOptions&);
std::unique_ptr<Layer> linear(int64_t out_features, bool bias = true);
std::unique_ptr<Layer> batch_norm(float eps = 1e-5f, float momentum = 0.1f);
std::unique_ptr<Layer> relu();
std::unique_ptr<Layer> max_pool(int64_t kernel, int64_t stride, int64_t padding = 0);
std::unique_ptr<Layer> avg_pool(int64_t kernel, int64_t stride, int64_t padding = 0);
std::unique_ptr<Layer> global_avg_pool();          // [n,c,h,w] -> [n,c]
std::unique_ptr<Layer> upsample_bilinear(int64_t out_h, int64_t out_w);
std::unique_ptr<Layer> dropout(float p);
std::unique_ptr<Layer> add();                      // two inputs, same shape
std::unique_ptr<Layer> concat();                   // channel concat of >= 2 inputs
std::unique_ptr<Layer> flatten();                  // [n,c,h,w] -> [n,c*h*w]

// A convolution's or a linear layer's Layer::build: its parameters and their gradients are
// [weight] or, with a bias, [weight, bias]; `who` names the layer in the error.
inline void bind_weights(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, bool bias,
                         const std::string& who, Tensor& w, Tensor& dw, Tensor& b, Tensor& db) {
  const size_t expected = bias ? 2 : 1;
  SQUALL_CHECK(params.size() == expected && grads.size() == expected, who + ": parameter count");
  w = params[0];
  dw = grads[0];
  if (bias) {
    b = params[1];
    db = grads[1];
  }
}

}  // namespace squall::nn
