#pragma once
// Graph: a model as a DAG of layers, materialised for one backend and one batch size.
//
// Nodes are added in topological order (a node's inputs already exist); node 0 is the
// input. build() runs every layer's setup, lays out all parameters in one arena, each on a
// 256-byte boundary (their gradients in a second of the same layout, non-learned state such as
// BatchNorm running statistics in a third: src/nn/param_arena.hpp), allocates one activation
// and one gradient tensor per node in one arena, sharing memory between those whose lifetimes
// do not meet (src/nn/memory_plan.hpp), and makes the layers' backend plans. Nothing is
// allocated after build().
//
// Backward visits nodes in reverse; a node used by several consumers (a residual branch)
// receives the first consumer's gradient directly and the others' through a scratch
// buffer that is added in, so layers can always overwrite their input gradients. A layer
// that passes its gradient through unchanged (the residual add) hands it on without a copy:
// its inputs' gradients are its own gradient's memory wherever that is safe
// (src/nn/gradient_aliases.hpp), decided once by build().
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/nn/backend.hpp"
#include "src/nn/layer.hpp"
#include "src/nn/model_padding.hpp"
#include "src/nn/param_arena.hpp"

namespace squall::nn {

class Graph {
 public:
  // input_sample: one sample's shape with batch 1, e.g. [1, 1, 28, 28].
  explicit Graph(Shape input_sample);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  static constexpr int k_input = 0;
  // Bytes every activation view (a node's value and gradient) is aligned to.
  static constexpr size_t k_view_alignment = 256;
  // Returns the new node's id. Throws squall::Error for an input id that does not exist.
  int add(std::string name, std::unique_ptr<Layer> layer, std::vector<int> inputs);
  int add(std::string name, std::unique_ptr<Layer> layer, int input) {
    return add(std::move(name), std::move(layer), std::vector<int>{input});
  }
  void set_output(int node) { m_output = node; }
  int size() const { return static_cast<int>(m_nodes.size()); }

  // One sample across ranks (src/nn/spatial.hpp; docs/design.md, "One sample across ranks"):
  // this rank holds the tile `place` names of every sample. setup() and build() then make every
  // activation that tile's (input(), output() and output_grad() too), and the layers exchange
  // halos and sum statistics with the rest of the group through `comm`, which must outlive the
  // graph. Throws squall::Error, naming the node and why, for a layer that cannot run on tiles
  // or a tile too thin for a layer's halo. Set before setup() or build().
  void set_tile(const SpatialPlace& place, TileComm* comm);
  const SpatialPlace* tile() const { return m_place.get(); }
  // model.padding = "periodic_longitude": the sample's columns wrap (a global field), so every
  // layer that reads across the west or east edge reads the other edge's columns instead of
  // zeros. An unsplit graph then runs as the one tile of a [1, 1] split (its halos its own
  // columns); a split one's westernmost and easternmost tiles are neighbours. Set before setup().
  void set_wrap_columns(bool on);
  bool wrap_columns() const { return m_wrap_columns; }
  // After setup(): node i's shape for the whole sample (its node_shape() on a split graph is
  // this rank's tile of it; the same otherwise).
  const Shape& node_full_shape(int i) const;

  // Shapes only: runs every layer's setup for this batch size and counts the parameters,
  // allocating nothing (to check a model at a size this machine cannot hold).
  void setup(int64_t batch);
  // The activations' type (docs/design.md, "Precision"): f32 (the default), or bf16/f16
  // for mixed precision, where parameters, gradients and the input stay f32. Set before build().
  void set_dtype(DType t);
  DType dtype() const { return m_dtype; }
  // The memory order of the 4-D activations inside the model (docs/design.md, "Layout"):
  // NCHW (the default), NHWC, or Layout::blocked: the backend's channel-blocked layout
  // (Capabilities::blocked_layout_for) for every tensor whose channels fill whole blocks, NCHW for
  // the others, and NCHW around a layer that needs one layout where its tensors would mix
  // (build() resolves it). input(), output() and output_grad() are NCHW in every layout: the
  // graph permutes the batch in and the logits out. Set before build().
  void set_layout(Layout l);
  Layout layout() const { return m_layout; }
  // After build(): node i's memory order (NCHW for 2-D tensors), and what the activations got
  // in words: "nchw", "nhwc", or "nchw8c (31 of 33 activations)" for a blocked graph.
  Layout node_layout(int i) const;
  std::string layout_text() const;
  // Weight mirrors (docs/design.md, "Weight mirrors"): the convolution plans' own copies of
  // their weights (reduced precision, NHWC) may be written by the optimizer's fused update in
  // the pass that writes the weights, instead of by every forward. weight_mirrors(): after
  // build, one per param_info() entry (none where a parameter has no copy), empty when off.
  // mark_mirrors_current(): the caller has enqueued an update that wrote every one of them
  // from the parameters' new values (an optimizer over all of param_info() with these
  // mirrors); forward then uses them as they are, until params() is called. Default on; set
  // before build(); off, every forward copies the weights (the reference path).
  void set_weight_mirrors(bool on);
  bool weight_mirrors_enabled() const { return m_mirrors_enabled; }
  std::vector<WeightMirror> weight_mirrors() const;
  void mark_mirrors_current() { m_mirrors_current.store(true, std::memory_order_release); }
  bool mirrors_current() const { return m_mirrors_enabled && m_mirrors_current.load(std::memory_order_acquire); }
  // Whether build() lets a residual add's inputs share its gradient's memory (the default)
  // or gives every node a gradient of its own, copied into (the reference path the tests
  // compare with). Set before build().
  void set_gradient_aliasing(bool on);
  bool gradient_aliasing() const { return m_alias_gradients; }
  // A forward-only graph (evaluation, prediction) has no gradients: backward() and
  // output_grad() throw, its layers make no backward plans, and its values share memory where
  // their lifetimes allow, so that node_value(i) of a node other than the output may hold
  // another node's value once forward() has returned. Default off; set before build().
  void set_forward_only(bool on);
  bool forward_only() const { return m_forward_only; }
  // Fusion (docs/design.md, "Inference"): on a backend that fuses (Capabilities::fuses), a layer may
  // compute the nodes after it that alone read its output: in a forward-only graph a
  // convolution the batch norm and the ReLU after it, in any graph a batch norm the ReLU after
  // it. Those nodes are skipped; their values (and gradients) are the layer's. Default on;
  // off is the reference path. Set before build().
  void set_fusion(bool on);
  // After build: how many nodes a layer before them computes (0 without fusion).
  int fused_nodes() const;
  // Whether activations share memory by lifetime (docs/design.md, "Activation memory"): the
  // default; off, every value and gradient has memory of its own (the reference the tests
  // compare with). Set before build().
  void set_memory_reuse(bool on);
  bool memory_reuse() const { return m_reuse_memory; }
  // The bytes of the activation arena (values and gradients) as planned for the batch of the
  // last setup() or build() and the settings above: what build() allocates, or would.
  // After setup() alone, every node has memory of its own value: plan_layouts() first makes
  // it the figure of a backend that fuses.
  size_t activation_bytes() const;
  // After setup(), without a backend and without allocating: the layouts and the fusion that
  // build() would choose on a backend with these capabilities (node_layout(), fused_nodes()
  // and activation_bytes() then say what build() will allocate there). For planning memory at
  // a size this machine cannot hold; build() chooses again on its own backend.
  void plan_layouts(const Capabilities& caps);
  // Materialise; `seed` initialises the parameters (PyTorch-style per layer type).
  void build(Backend& backend, int64_t batch, uint64_t seed);
  bool built() const { return m_backend != nullptr; }
  int64_t batch() const { return m_batch; }

  Tensor input() const;        // copy a batch here before forward() (f32 NCHW at any dtype() and layout())
  Tensor output() const;       // logits after forward() (of dtype(), NCHW)
  Tensor output_grad() const;  // the loss writes d(loss)/d(logits) here before backward() (of dtype(), NCHW)
  Shape output_shape() const;  // with the batch dimension

  void forward(Stream& stream, const RunMode& mode);
  // on_params_ready(offset), when given, is called after each node with parameters has been
  // enqueued, and once more at the end (offset 0): once the stream's work so far completes
  // (the caller records an event), every gradient at arena offset >= `offset` is final (the
  // arena is in node order and backward visits nodes in reverse), so a caller may start
  // reducing those while the earlier layers still compute. Nothing here waits.
  void backward(Stream& stream, const std::function<void(size_t offset)>& on_params_ready = nullptr);

  // Flat arenas: parameters, their gradients (same layout), and non-learned state. Each
  // tensor starts on a 256-byte boundary; the floats between are zero (src/nn/param_arena.hpp).
  // params() hands out the parameters for writing: the weight mirrors count as stale from
  // then on, until an optimizer update that writes them marks them current again.
  float* params() const;
  // The parameters for reading (a copy's source, a sum, a checkpoint): the mirrors stay as
  // they are. Never write through it, nor cast it back to float*.
  const float* read_params() const { return m_params.data(); }
  float* grads() const { return m_grads.data(); }
  float* state() const { return m_state.data(); }
  // Two sizes each, never to be mixed up: the model's true number of parameters (and of state
  // values), which is what a report or a comparison with another framework means, and the
  // floats of the arena that holds them, padding included, which is what memory, copies,
  // sums and optimizer tensor sets over the whole arena mean.
  size_t parameter_count() const { return m_param_count; }
  size_t param_arena_floats() const { return m_param_arena; }
  size_t state_value_count() const { return m_state_count; }
  size_t state_arena_floats() const { return m_state_arena; }
  // Forward FLOPs of the whole batch of the last setup() or build() (Layer::forward_flops).
  double forward_flops() const;
  const std::vector<ParamInfo>& param_info() const { return m_param_info; }
  const std::vector<ParamInfo>& state_info() const { return m_state_info; }
  // Node i (0 = input, in topological order): its name and its value after forward() (of
  // dtype(), in layout()), for diagnostics such as naming the first non-finite layer.
  const std::string& node_name(int i) const;
  Tensor node_value(int i) const;
  // Its gradient during backward(). A node whose gradient a residual add handed on shares
  // the add's memory, which may hold another node's gradient once backward() has returned.
  Tensor node_grad(int i) const;
  // The structure, for exporters (src/export/): node i's layer (null for the input), the
  // nodes it reads, its output shape after setup() or build(), and the output node.
  const Layer* node_layer(int i) const;
  const std::vector<int>& node_inputs(int i) const;
  const Shape& node_shape(int i) const;
  int output_node() const { return m_output; }

 private:
  struct Node;
  struct ActivationPlan;
  ActivationPlan plan_activations() const;  // where each value and gradient lives (build())
  void setup_nodes(const Shape& input);       // every layer's setup from this input shape
  void resolve_layouts(const Capabilities& caps);  // each node's layout (build(), plan_layouts())
  std::vector<std::unique_ptr<Node>> m_nodes;
  Shape m_input_sample;
  int m_output = 0;
  std::vector<ParamSpec> m_param_specs, m_state_specs;  // in arena order
  std::unique_ptr<SpatialPlace> m_place;  // a split sample: this rank's tile (set_tile)
  TileComm* m_comm = nullptr;
  bool m_wrap_columns = false;
  std::unique_ptr<TileComm> m_solo;       // wrapped columns on one rank: its group of one
  std::vector<Shape> m_full_shapes;       // a split sample: each node's whole shape (setup)
  Backend* m_backend = nullptr;
  int64_t m_batch = 0;
  DType m_dtype = DType::f32;
  Layout m_layout = Layout::nchw;
  bool m_alias_gradients = true;
  bool m_forward_only = false;
  bool m_reuse_memory = true;
  bool m_fuse = true;
  std::vector<int> m_fused_into;  // per node: the node whose layer computes it, or -1 (build())
  void plan_fusion(const Capabilities& caps);
  bool m_mirrors_enabled = true;
  // Written by whoever calls params() or updates the weights, read by forward, on any thread.
  mutable std::atomic<bool> m_mirrors_current{false};
  Buffer m_params, m_grads, m_state, m_activations, m_scratch;
  Buffer m_input_f32;  // reduced precision, NHWC or blocked: the f32 NCHW input, converted at the start of forward
  Buffer m_output_nchw, m_output_grad_nchw;  // 4-D logits not in NCHW: the logits and their gradient in NCHW
  size_t m_param_count = 0, m_state_count = 0;  // values, without padding
  size_t m_param_arena = 0, m_state_arena = 0;  // floats of the arenas, padding included
  std::vector<ParamInfo> m_param_info, m_state_info;
  std::vector<Tensor> m_in, m_din;  // per-node argument lists, kept to avoid per-step allocation
  std::vector<int> m_pending_add;
};

// ---- model zoo (src/nn/models/*.cpp) --------------------------------------------------------
struct ModelSpec {
  std::string name = "lenet5";     // lenet5 | resnet20 | unet | deeplabv3plus
  int64_t classes = 10;
  int64_t width = 0;               // base channels (0: the model's default)
  int64_t depth = 0;               // unet levels / deeplab encoder stages (0: default)
  std::vector<int64_t> aspp_rates; // deeplabv3plus (empty: 6, 12, 18)
  float dropout = 0.0f;
  ModelPadding padding = ModelPadding::zeros;
};

// Builds the graph for an input sample shape [1, c, h, w]. Throws squall::Error naming the
// model and the problem (unknown name, an input the model cannot take).
std::unique_ptr<Graph> make_model(const ModelSpec& spec, Shape input_sample);
std::vector<std::string> model_names();
// Whether a zoo model predicts a class per pixel (segmentation: unet, deeplabv3plus...) rather
// than one class per sample (a classifier: lenet5, resnet20). False for an unknown name.
bool per_pixel_model(const std::string& name);

// Which of ModelSpec's knobs a zoo model reads, and what it uses when one is 0 or empty (the
// others it ignores; dropout and classes every model reads). For messages that refuse a knob
// and for showing a model's effective shape (`squall model`).
struct ModelKnobs {
  bool width = false, depth = false, aspp_rates = false;
  int64_t default_width = 0, default_depth = 0;
  std::vector<int64_t> default_aspp_rates;
};
// Throws squall::Error naming the model and the known ones for an unknown name.
ModelKnobs model_knobs(const std::string& name);

}  // namespace squall::nn
