#include "src/nn/graph.hpp"

#include <map>
#include <random>

#include "src/core/error.hpp"
#include "src/nn/gradient_aliases.hpp"
#include "src/nn/init.hpp"
#include "src/nn/memory_plan.hpp"

namespace squall::nn {

struct Graph::Node {
  std::string name;
  std::unique_ptr<Layer> layer;   // null for the input node
  std::vector<int> inputs;
  Shape shape;                    // output shape, with batch
  Layout layout = Layout::nchw;   // of value and grad (resolve_layouts)
  Tensor value, grad;
  bool grad_written = false;      // during backward: first writer overwrites
  std::vector<bool> hands_through;  // per input: its gradient is this node's own (plan_activations)
  size_t param_begin = 0;         // arena offset of its first parameter
  bool has_params = false;
};

const std::string& Graph::node_name(int i) const {
  SQUALL_CHECK(i >= 0 && i < size(), "Graph::node_name: no such node");
  return m_nodes[static_cast<size_t>(i)]->name;
}

Tensor Graph::node_value(int i) const {
  SQUALL_CHECK(i >= 0 && i < size(), "Graph::node_value: no such node");
  return m_nodes[static_cast<size_t>(i)]->value;
}

Tensor Graph::node_grad(int i) const {
  SQUALL_CHECK(i >= 0 && i < size(), "Graph::node_grad: no such node");
  return m_nodes[static_cast<size_t>(i)]->grad;
}

const Layer* Graph::node_layer(int i) const {
  SQUALL_CHECK(i >= 0 && i < size(), "Graph::node_layer: no such node");
  return m_nodes[static_cast<size_t>(i)]->layer.get();
}

const std::vector<int>& Graph::node_inputs(int i) const {
  SQUALL_CHECK(i >= 0 && i < size(), "Graph::node_inputs: no such node");
  return m_nodes[static_cast<size_t>(i)]->inputs;
}

const Shape& Graph::node_shape(int i) const {
  SQUALL_CHECK(i >= 0 && i < size(), "Graph::node_shape: no such node");
  return m_nodes[static_cast<size_t>(i)]->shape;
}

Layout Graph::node_layout(int i) const {
  SQUALL_CHECK(i >= 0 && i < size(), "Graph::node_layout: no such node");
  return m_nodes[static_cast<size_t>(i)]->layout;
}

std::string Graph::layout_text() const {
  if (m_layout != Layout::blocked) return layout_name(m_layout);
  int images = 0, blocked = 0;
  Layout block = Layout::nchw;
  for (const auto& n : m_nodes) {
    if (n->shape.rank != 4) continue;
    ++images;
    if (channel_block(n->layout) != 0) {
      ++blocked;
      block = n->layout;
    }
  }
  if (blocked == 0) return "nchw (blocked: none of " + std::to_string(images) + " activations)";
  return std::string(layout_name(block)) + " (" + std::to_string(blocked) + " of " + std::to_string(images) +
         " activations)";
}

// Layout::blocked per tensor: blocked where the channels fill whole blocks, then, until
// nothing changes, a layer that needs one layout (everything but mixes_layouts()) and sees
// both gets NCHW for all of its 4-D tensors. A change only ever turns blocked into NCHW, so
// this ends.
void Graph::resolve_layouts(const Capabilities& caps) {
  const Layout want = m_layout == Layout::blocked ? caps.blocked_layout_for(m_dtype) : m_layout;
  const int64_t block = channel_block(want);
  for (auto& n : m_nodes) {
    const bool image = n->shape.rank == 4;
    n->layout = !image ? Layout::nchw : block == 0 || n->shape.c() % block == 0 ? want : Layout::nchw;
  }
  for (bool changed = block != 0; changed;) {
    changed = false;
    for (int id = 1; id < size(); ++id) {
      Node& n = *m_nodes[static_cast<size_t>(id)];
      if (n.layer->mixes_layouts()) continue;
      std::vector<Node*> members{&n};
      for (int i : n.inputs) members.push_back(m_nodes[static_cast<size_t>(i)].get());
      bool plain = false, blocked = false;
      for (const Node* m : members) {
        if (m->shape.rank != 4) continue;
        (m->layout == Layout::nchw ? plain : blocked) = true;
      }
      if (!(plain && blocked)) continue;
      for (Node* m : members)
        if (m->shape.rank == 4) m->layout = Layout::nchw;
      changed = true;
    }
  }
}

Graph::Graph(Shape input_sample) : m_input_sample(input_sample) {
  auto in = std::make_unique<Node>();
  in->name = "input";
  m_nodes.push_back(std::move(in));
}

Graph::~Graph() = default;

int Graph::add(std::string name, std::unique_ptr<Layer> layer, std::vector<int> inputs) {
  for (int i : inputs)
    if (i < 0 || i >= size())
      throw Error("graph: node '" + name + "' uses node " + std::to_string(i) + ", which does not exist");
  auto node = std::make_unique<Node>();
  node->name = std::move(name);
  node->layer = std::move(layer);
  node->inputs = std::move(inputs);
  m_nodes.push_back(std::move(node));
  m_output = size() - 1;
  return m_output;
}

void Graph::setup(int64_t batch) {
  if (batch <= 0) throw Error("graph: batch size must be positive");
  m_batch = batch;
  m_fused_into.clear();  // fusion and layouts are chosen afterwards (build(), plan_layouts())
  for (int id = 1; id < size(); ++id) m_nodes[static_cast<size_t>(id)]->layer->set_tile_output(nullptr);
  setup_nodes(m_input_sample.with_batch(batch));
  m_full_shapes.clear();
  if (!m_place && m_wrap_columns) {
    // Wrapped columns on one rank: the one tile of a [1, 1] split, whose halos are its own.
    m_solo = std::make_unique<SoloTileComm>();
    m_comm = m_solo.get();
    m_place = std::make_unique<SpatialPlace>(SpatialPlace::make(SpatialSplit{}, 0, m_input_sample.h(),
                                                                m_input_sample.w(), 1, true));
  }
  if (!m_place) return;
  // A split sample: the whole sample's shapes first (they say where every tensor's tiles lie),
  // then every layer again on this rank's tile, then each layer told its tiles.
  for (const auto& n : m_nodes) m_full_shapes.push_back(n->shape);
  const size_t params = m_param_count, state = m_state_count;
  const SpatialPlace& place = *m_place;
  // A tensor of no pixels is whole on every rank (TensorTile::image).
  const auto tile_of = [&](int i) {
    const Shape& full = m_full_shapes[static_cast<size_t>(i)];
    return full.rank == 4 ? tensor_tile(place, full.h(), full.w()) : whole_tensor();
  };
  const std::string what = place.split.split() ? "a sample split across ranks (parallel.spatial " + place.split.str() + ")"
                                               : std::string("wrapped columns (model.padding = \"periodic_longitude\")");
  if (m_full_shapes[static_cast<size_t>(m_output)].rank != 4)
    throw Error("the model's output, node '" + m_nodes[static_cast<size_t>(m_output)]->name + "', gives " +
                m_full_shapes[static_cast<size_t>(m_output)].str() + ", features of no pixels: " + what +
                " needs a model that gives a value per pixel (a segmentation model)");
  const TensorTile input = tile_of(k_input);
  const std::string on_tile = "this rank's tile (rows [" + std::to_string(input.rows().begin) + ", " +
                              std::to_string(input.rows().end) + ") x columns [" + std::to_string(input.cols().begin) +
                              ", " + std::to_string(input.cols().end) + ") under parallel.spatial " +
                              place.split.str() + ")";
  std::vector<TensorTile> outputs;
  for (int id = 0; id < size(); ++id) outputs.push_back(tile_of(id));
  for (int id = 1; id < size(); ++id)
    m_nodes[static_cast<size_t>(id)]->layer->set_tile_output(&outputs[static_cast<size_t>(id)]);
  try {
    setup_nodes(Shape(batch, m_input_sample.c(), input.rows().size(), input.cols().size()));
  } catch (const Error& e) {
    throw Error("the model cannot be set up on " + on_tile + ": " + e.what() +
                " (a layer whose output size is fixed by the whole sample cannot be split)");
  }
  if (params != m_param_count || state != m_state_count)
    throw Error("the model's parameters change size on " + on_tile +
                ": a layer's weights depend on the sample's size, which a split cannot keep");
  for (int id = 1; id < size(); ++id) {
    Node& n = *m_nodes[static_cast<size_t>(id)];
    TileContext t;
    t.place = m_place.get();
    t.comm = m_comm;
    t.node = id;
    t.output = tile_of(id);
    for (int i : n.inputs) t.inputs.push_back(tile_of(i));
    const std::string where = "model node '" + n.name + "' (" + n.layer->type() + ")";
    if (t.output.image && (n.shape.h() != t.output.rows().size() || n.shape.w() != t.output.cols().size()))
      throw Error(where + " gives " + n.shape.str() + " on this rank's tile, not its share " +
                  std::to_string(t.output.rows().size()) + "x" + std::to_string(t.output.cols().size()) +
                  " of the whole sample's " + m_full_shapes[static_cast<size_t>(id)].str() +
                  " under parallel.spatial " + place.split.str());
    const std::string why = n.layer->set_tile(t);
    if (!why.empty()) throw Error(where + " cannot run on " + what + ": " + why);
  }
}

void Graph::setup_nodes(const Shape& input) {
  m_nodes[0]->shape = input;
  m_param_count = m_state_count = m_param_arena = m_state_arena = 0;
  m_param_info.clear();
  m_state_info.clear();
  m_param_specs.clear();
  m_state_specs.clear();
  for (int id = 1; id < size(); ++id) {
    Node& n = *m_nodes[static_cast<size_t>(id)];
    std::vector<Shape> in_shapes;
    for (int i : n.inputs) in_shapes.push_back(m_nodes[static_cast<size_t>(i)]->shape);
    try {
      n.shape = n.layer->setup(in_shapes);
    } catch (const Error& e) {
      throw Error("model node '" + n.name + "' (" + n.layer->type() + "): " + e.what());
    }
    n.param_begin = m_param_arena;
    n.has_params = !n.layer->param_specs().empty();
    for (const auto& s : n.layer->param_specs()) {
      const auto count = static_cast<size_t>(s.shape.numel());
      m_param_info.push_back({n.name + "." + s.name, m_param_arena, count, s.shape, s.weight_decay});
      m_param_arena = arena_aligned(m_param_arena + count);
      m_param_count += count;
      m_param_specs.push_back(s);
    }
    for (const auto& s : n.layer->state_specs()) {
      const auto count = static_cast<size_t>(s.shape.numel());
      m_state_info.push_back({n.name + "." + s.name, m_state_arena, count, s.shape, false});
      m_state_arena = arena_aligned(m_state_arena + count);
      m_state_count += count;
      m_state_specs.push_back(s);
    }
  }
}

void Graph::set_tile(const SpatialPlace& place, TileComm* comm) {
  if (built()) throw Error("graph: the tile must be set before build()");
  SQUALL_CHECK(comm != nullptr || !place.split.split(), "graph: a split sample needs its group's communicator");
  SQUALL_CHECK(place.height == m_input_sample.h() && place.width == m_input_sample.w(),
               "graph: the tiles are of a " + std::to_string(place.height) + "x" + std::to_string(place.width) +
                   " sample, the model's input is " + m_input_sample.str());
  m_place = std::make_unique<SpatialPlace>(place);
  m_place->wrap_columns = m_wrap_columns;
  m_comm = comm;
  m_solo.reset();
}

void Graph::set_wrap_columns(bool on) {
  if (built()) throw Error("graph: wrapped columns must be set before build()");
  m_wrap_columns = on;
  if (m_place) m_place->wrap_columns = on;
}

const Shape& Graph::node_full_shape(int i) const {
  SQUALL_CHECK(i >= 0 && i < size(), "Graph::node_full_shape: no such node");
  return m_full_shapes.empty() ? m_nodes[static_cast<size_t>(i)]->shape : m_full_shapes[static_cast<size_t>(i)];
}

double Graph::forward_flops() const {
  if (m_batch <= 0) throw Error("graph: forward_flops() needs setup() or build() first");
  double total = 0.0;
  for (int id = 1; id < size(); ++id) {
    const Node& n = *m_nodes[static_cast<size_t>(id)];
    std::vector<Shape> in_shapes;
    for (int i : n.inputs) in_shapes.push_back(m_nodes[static_cast<size_t>(i)]->shape);
    total += n.layer->forward_flops(in_shapes, n.shape);
  }
  return total;
}

void Graph::set_dtype(DType t) {
  if (t != DType::f32 && t != DType::bf16 && t != DType::f16)
    throw Error(std::string("graph: activations cannot be of type ") + dtype_name(t));
  if (built()) throw Error("graph: the activation type must be set before build()");
  m_dtype = t;
}

void Graph::set_layout(Layout l) {
  if (built()) throw Error("graph: the activation layout must be set before build()");
  m_layout = l;
}

// Activation memory (docs/design.md, "Activation memory"): the values of a training graph all
// live through the step, since backward reads them; its gradients live only from the backward
// of a node's last reader down to the node's own backward, and share memory where those spans
// do not meet. A forward-only graph has no gradients, and its values share memory in the same
// way, each living from its node's forward to its last reader's. Every view starts on a
// 256-byte boundary, as a cudaMalloc'd block does: cuDNN's and cuBLAS's vectorised
// (tensor-core) kernels need 16-byte aligned bf16/f16 operands, and a view at an odd element
// offset of a 2-byte type would not be.
struct Graph::ActivationPlan {
  std::vector<size_t> value_at, grad_at;  // per node, bytes into the arena; grad_at of node 0 unused
  size_t bytes = 0;
  size_t largest = 0;  // elements of the largest gradient (the scratch buffer's size)
  std::vector<std::vector<bool>> hands_through;
};

Graph::ActivationPlan Graph::plan_activations() const {
  SQUALL_CHECK(m_batch > 0, "graph: activation memory is planned after setup()");
  const size_t bytes_per = dtype_size(m_dtype);
  const int count = size();
  const auto node_bytes = [&](int i) {
    return (static_cast<size_t>(m_nodes[static_cast<size_t>(i)]->shape.numel()) * bytes_per + k_view_alignment - 1) /
           k_view_alignment * k_view_alignment;
  };
  std::vector<int> last_reader(static_cast<size_t>(count), -1);
  for (int id = 1; id < count; ++id)
    for (int i : m_nodes[static_cast<size_t>(id)]->inputs) last_reader[static_cast<size_t>(i)] = id;
  const auto span = [&](int i) {
    if (!m_reuse_memory) return std::pair<int, int>{0, count};  // alive throughout: nothing shared
    return std::pair<int, int>{i, i == m_output ? count : std::max(i, last_reader[static_cast<size_t>(i)])};
  };

  ActivationPlan p;
  std::vector<MemoryBlock> values;
  for (int i = 0; i < count; ++i) {
    const auto [first, last] = m_forward_only ? span(i) : std::pair<int, int>{0, count};
    values.push_back({node_bytes(i), first, last});
  }
  // A fused node has no memory of its own: its value is its head's, which lives as long as
  // the last of them is read.
  const auto fused_into = [&](int i) {
    return static_cast<size_t>(i) < m_fused_into.size() ? m_fused_into[static_cast<size_t>(i)] : -1;
  };
  for (int i = 0; i < count; ++i) {
    const int head = fused_into(i);
    if (head < 0) continue;
    values[static_cast<size_t>(head)].last = std::max(values[static_cast<size_t>(head)].last, values[static_cast<size_t>(i)].last);
    values[static_cast<size_t>(i)] = {0, values[static_cast<size_t>(head)].first, values[static_cast<size_t>(head)].first};
  }
  const MemoryPlan value_plan = plan_memory(values, k_view_alignment);
  p.value_at = value_plan.offsets;
  for (int i = 0; i < count; ++i)
    if (fused_into(i) >= 0) p.value_at[static_cast<size_t>(i)] = p.value_at[static_cast<size_t>(fused_into(i))];
  p.bytes = value_plan.bytes;
  p.grad_at.assign(static_cast<size_t>(count), 0);
  p.hands_through.resize(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i)
    p.hands_through[static_cast<size_t>(i)].assign(m_nodes[static_cast<size_t>(i)]->inputs.size(), false);
  if (m_forward_only) return p;

  // Gradients: one block per group of nodes that share one (a residual add and the inputs it
  // hands its gradient to), spanning every member's span; node 0's is never needed.
  if (m_alias_gradients) {
    BackwardStructure structure;
    for (int i = 0; i < count; ++i) {
      const Node& n = *m_nodes[static_cast<size_t>(i)];
      structure.inputs.push_back(n.inputs);
      structure.passes_through.push_back(n.layer != nullptr && n.layer->passes_gradient_through());
      // The fused chains as backward walks them: the head takes its fused nodes' gradient, and
      // may overwrite it (a convolution's ReLU mask) while an input handed the same memory by
      // a residual add has yet to read it.
      structure.fused.push_back(fused_into(i) >= 0);
      structure.overwrites_gradient.push_back(n.layer != nullptr && n.layer->overwrites_output_gradient());
    }
    structure.output = m_output;
    p.hands_through = plan_gradient_aliases(structure);
  }
  // A fused node's gradient is its head's: the head's backward takes it as its output gradient.
  for (int i = 1; i < count; ++i)
    if (fused_into(i) >= 0) p.hands_through[static_cast<size_t>(i)].assign(m_nodes[static_cast<size_t>(i)]->inputs.size(), true);
  std::vector<int> group(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) group[static_cast<size_t>(i)] = i;
  for (int id = count - 1; id >= 1; --id) {  // from the last down: an add's own group is final first
    const Node& n = *m_nodes[static_cast<size_t>(id)];
    for (size_t q = 0; q < n.inputs.size(); ++q)
      if (p.hands_through[static_cast<size_t>(id)][q])
        group[static_cast<size_t>(n.inputs[q])] = group[static_cast<size_t>(id)];
  }
  std::vector<MemoryBlock> grads(static_cast<size_t>(count));  // empty where a node is not its group's top
  for (int i = count - 1; i >= 1; --i) {  // a group's top node before its members
    const size_t g = static_cast<size_t>(group[static_cast<size_t>(i)]);
    const auto [first, last] = span(i);
    if (g == static_cast<size_t>(i)) {
      grads[g] = {node_bytes(i), first, last};
    } else {
      SQUALL_CHECK(grads[g].bytes == node_bytes(i),
                   "graph node '" + m_nodes[static_cast<size_t>(i)]->name + "' shares a gradient of another size");
      grads[g].first = std::min(grads[g].first, first);
      grads[g].last = std::max(grads[g].last, last);
    }
    p.largest = std::max(p.largest, static_cast<size_t>(m_nodes[static_cast<size_t>(i)]->shape.numel()));
  }
  const MemoryPlan grad_plan = plan_memory(grads, k_view_alignment);
  for (int i = 1; i < count; ++i)
    p.grad_at[static_cast<size_t>(i)] = p.bytes + grad_plan.offsets[static_cast<size_t>(group[static_cast<size_t>(i)])];
  p.bytes += grad_plan.bytes;
  return p;
}

size_t Graph::activation_bytes() const { return plan_activations().bytes; }

void Graph::plan_layouts(const Capabilities& caps) {
  SQUALL_CHECK(m_batch > 0, "graph: plan_layouts() after setup()");
  if (built()) throw Error("graph: plan_layouts() is for a graph that is not built");
  resolve_layouts(caps);
  plan_fusion(caps);
}

void Graph::build(Backend& backend, int64_t batch, uint64_t seed) {
  setup(batch);
  m_backend = &backend;
  m_mirrors_current.store(false);
  const Capabilities caps = backend.capabilities();
  resolve_layouts(caps);
  plan_fusion(caps);
  const ActivationPlan plan = plan_activations();
  const size_t bytes_per = dtype_size(m_dtype);

  // Arenas: one allocation each.
  m_params = backend.allocate(std::max<size_t>(m_param_arena, 1));
  m_grads = backend.allocate(std::max<size_t>(m_param_arena, 1));
  m_state = backend.allocate(std::max<size_t>(m_state_arena, 1));
  m_activations = backend.allocate(plan.bytes / bytes_per, m_dtype);
  m_scratch = m_forward_only ? Buffer{} : backend.allocate(plan.largest, m_dtype);
  const bool convert_input = m_dtype != DType::f32 || m_nodes[0]->layout != Layout::nchw;
  m_input_f32 = convert_input ? backend.allocate(static_cast<size_t>(m_nodes[0]->shape.numel())) : Buffer{};
  const Shape& out_shape = m_nodes[static_cast<size_t>(m_output)]->shape;
  if (m_nodes[static_cast<size_t>(m_output)]->layout != Layout::nchw) {
    m_output_nchw = backend.allocate(static_cast<size_t>(out_shape.numel()), m_dtype);
    m_output_grad_nchw = m_forward_only ? Buffer{} : backend.allocate(static_cast<size_t>(out_shape.numel()), m_dtype);
  } else {
    m_output_nchw = m_output_grad_nchw = Buffer{};
  }
  for (int i = 0; i < size(); ++i) {
    Node& n = *m_nodes[static_cast<size_t>(i)];
    n.value = m_activations.view(n.shape, plan.value_at[static_cast<size_t>(i)] / bytes_per);
    n.grad = m_forward_only || i == k_input
                 ? Tensor{nullptr, n.shape, m_dtype}
                 : m_activations.view(n.shape, plan.grad_at[static_cast<size_t>(i)] / bytes_per);
    n.hands_through = plan.hands_through[static_cast<size_t>(i)];
  }

  // Initial values, drawn on the host, as PyTorch does per layer type. The padding between
  // tensors is written too (zeros), in all three arenas: it must never hold garbage that a
  // sum of squares over the arena or a sum over ranks would read.
  auto stream = backend.create_stream();
  {
    std::vector<float> host(m_param_arena, 0.0f);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < m_param_specs.size(); ++i)
      initialize(m_param_specs[i], host.data() + m_param_info[i].offset, rng);
    if (m_param_arena) backend.copy_from_host(*stream, m_params.data(), host.data(), m_param_arena);
    std::vector<float> state(m_state_arena, 0.0f);
    for (size_t i = 0; i < m_state_specs.size(); ++i)
      initialize(m_state_specs[i], state.data() + m_state_info[i].offset, rng);
    if (m_state_arena) backend.copy_from_host(*stream, m_state.data(), state.data(), m_state_arena);
    backend.fill(*stream, m_grads.data(), m_param_arena, 0.0f);
    backend.synchronize(*stream);
  }

  // Plans, with views of each layer's parameters (arena order = node order).
  size_t pi = 0, si = 0;
  std::vector<std::vector<Tensor>> node_params(static_cast<size_t>(size())), node_state(static_cast<size_t>(size()));
  for (int id = 1; id < size(); ++id) {
    Layer& layer = *m_nodes[static_cast<size_t>(id)]->layer;
    layer.set_dtype(m_dtype);
    std::vector<Layout> in_layouts;
    for (int i : m_nodes[static_cast<size_t>(id)]->inputs) in_layouts.push_back(m_nodes[static_cast<size_t>(i)]->layout);
    layer.set_layouts(std::move(in_layouts), m_nodes[static_cast<size_t>(id)]->layout);
    layer.set_forward_only(m_forward_only);
    std::vector<Tensor> params, grads, state;
    for (size_t k = 0; k < layer.param_specs().size(); ++k, ++pi) {
      params.push_back(m_params.view(m_param_info[pi].shape, m_param_info[pi].offset));
      grads.push_back(m_grads.view(m_param_info[pi].shape, m_param_info[pi].offset));
    }
    for (size_t k = 0; k < layer.state_specs().size(); ++k, ++si)
      state.push_back(m_state.view(m_state_info[si].shape, m_state_info[si].offset));
    layer.build(backend, params, grads, state);
    node_params[static_cast<size_t>(id)] = std::move(params);
    node_state[static_cast<size_t>(id)] = std::move(state);
  }
  for (int id = 1; id < size(); ++id) {
    const int head = m_fused_into[static_cast<size_t>(id)];
    if (head < 0 || m_nodes[static_cast<size_t>(id)]->layer->type() != "batch_norm") continue;
    const auto& p = node_params[static_cast<size_t>(id)];
    const auto& st = node_state[static_cast<size_t>(id)];
    SQUALL_CHECK(p.size() == 2 && st.size() == 2, "graph: a fused batch norm has weight, bias and running statistics");
    m_nodes[static_cast<size_t>(head)]->layer->bind_fused_batch_norm(p[0], p[1], st[0], st[1]);
  }
}

Tensor Graph::input() const {
  return m_input_f32 ? m_input_f32.view(m_nodes[0]->shape) : m_nodes[0]->value;
}
Tensor Graph::output() const {
  if (m_output_nchw) return m_output_nchw.view(output_shape());
  return m_nodes[static_cast<size_t>(m_output)]->value;
}
Tensor Graph::output_grad() const {
  if (m_forward_only) throw Error("graph: a forward-only graph has no gradients (set_forward_only)");
  if (m_output_grad_nchw) return m_output_grad_nchw.view(output_shape());
  return m_nodes[static_cast<size_t>(m_output)]->grad;
}
Shape Graph::output_shape() const { return m_nodes[static_cast<size_t>(m_output)]->shape; }

float* Graph::params() const {
  m_mirrors_current.store(false, std::memory_order_release);
  return m_params.data();
}

void Graph::set_weight_mirrors(bool on) {
  if (built()) throw Error("graph: weight mirrors must be chosen before build()");
  m_mirrors_enabled = on;
}

// By parameter name, so that the answer follows param_info() whatever order the arena has.
std::vector<WeightMirror> Graph::weight_mirrors() const {
  if (!m_mirrors_enabled || !built()) return {};
  std::map<std::string, WeightMirror> by_name;
  for (int id = 1; id < size(); ++id) {
    const Node& n = *m_nodes[static_cast<size_t>(id)];
    const std::vector<ParamSpec> specs = n.layer->param_specs();
    const std::vector<WeightMirror> mirrors = n.layer->weight_mirrors();
    if (mirrors.empty()) continue;
    SQUALL_CHECK(mirrors.size() == specs.size(), "layer '" + n.name + "' names a weight mirror per parameter");
    for (size_t k = 0; k < specs.size(); ++k)
      if (mirrors[k].data != nullptr) by_name[n.name + "." + specs[k].name] = mirrors[k];
  }
  std::vector<WeightMirror> out;
  for (const ParamInfo& p : m_param_info) {
    const auto it = by_name.find(p.name);
    out.push_back(it == by_name.end() ? WeightMirror{} : it->second);
  }
  return out;
}

void Graph::forward(Stream& stream, const RunMode& run_mode) {
  RunMode mode = run_mode;
  mode.weights_mirrored = mirrors_current();
  std::vector<Tensor>& in = m_in;
  if (m_input_f32) {
    const Tensor& x = m_nodes[0]->value;
    if (m_nodes[0]->layout != Layout::nchw) {  // converted and permuted in one pass
      const Shape& d = x.shape;
      m_backend->permute_convert(stream, m_input_f32.raw(), DType::f32, Layout::nchw, x.data, m_dtype,
                                 m_nodes[0]->layout, d.n(), d.c(), d.h(), d.w());
    } else {
      m_backend->convert(stream, m_input_f32.raw(), DType::f32, x.data, m_dtype, static_cast<size_t>(x.numel()));
    }
  }
  for (int id = 1; id < size(); ++id) {
    Node& n = *m_nodes[static_cast<size_t>(id)];
    if (m_fused_into[static_cast<size_t>(id)] >= 0) continue;  // its head's layer computed it
    in.clear();
    for (int i : n.inputs) in.push_back(m_nodes[static_cast<size_t>(i)]->value);
    mode.node = static_cast<uint64_t>(id);
    n.layer->forward(stream, in, n.value, mode);
  }
  if (m_output_nchw) {
    const Tensor& y = m_nodes[static_cast<size_t>(m_output)]->value;
    const Shape& d = y.shape;
    m_backend->permute_layout(stream, m_dtype, y.data, m_nodes[static_cast<size_t>(m_output)]->layout,
                              m_output_nchw.raw(), Layout::nchw, d.n(), d.c(), d.h(), d.w());
  }
}

void Graph::set_forward_only(bool on) {
  if (built()) throw Error("graph: forward-only must be chosen before build()");
  m_forward_only = on;
}

void Graph::set_memory_reuse(bool on) {
  if (built()) throw Error("graph: memory reuse must be chosen before build()");
  m_reuse_memory = on;
}

void Graph::set_fusion(bool on) {
  if (built()) throw Error("graph: fusion must be chosen before build()");
  m_fuse = on;
}

int Graph::fused_nodes() const {
  int count = 0;
  for (const int head : m_fused_into) count += head >= 0;
  return count;
}

// A chain head -> a -> b ... where each next node reads only the one before it, and is its
// only reader: the head's layer is offered each in turn and stops the chain by refusing one.
// The output node may end a chain (its value is the head's output, which forward() leaves
// there).
void Graph::plan_fusion(const Capabilities& caps) {
  m_fused_into.assign(static_cast<size_t>(size()), -1);
  for (int id = 1; id < size(); ++id) m_nodes[static_cast<size_t>(id)]->layer->reset_fusion();
  if (!m_fuse || !caps.fuses(m_dtype)) return;
  std::vector<int> readers(static_cast<size_t>(size()), 0);
  for (const auto& n : m_nodes)
    for (int i : n->inputs) ++readers[static_cast<size_t>(i)];
  for (int head = 1; head < size(); ++head) {
    if (m_fused_into[static_cast<size_t>(head)] >= 0) continue;
    Layer& layer = *m_nodes[static_cast<size_t>(head)]->layer;
    for (int tail = head, next = head + 1; next < size(); tail = next++) {
      const Node& n = *m_nodes[static_cast<size_t>(next)];
      if (tail == m_output || readers[static_cast<size_t>(tail)] != 1 || n.inputs != std::vector<int>{tail} ||
          n.layout != m_nodes[static_cast<size_t>(tail)]->layout || !layer.fuse_next(*n.layer, !m_forward_only))
        break;
      m_fused_into[static_cast<size_t>(next)] = head;
    }
  }
}

void Graph::set_gradient_aliasing(bool on) {
  if (built()) throw Error("graph: gradient aliasing must be chosen before build()");
  m_alias_gradients = on;
}

void Graph::backward(Stream& stream, const std::function<void(size_t)>& on_params_ready) {
  if (m_forward_only) throw Error("graph: backward() on a forward-only graph (set_forward_only)");
  for (auto& n : m_nodes) n->grad_written = false;
  m_nodes[static_cast<size_t>(m_output)]->grad_written = true;  // the loss wrote it
  if (m_output_grad_nchw) {
    const Tensor& g = m_nodes[static_cast<size_t>(m_output)]->grad;
    const Shape& d = g.shape;
    m_backend->permute_layout(stream, m_dtype, m_output_grad_nchw.raw(), Layout::nchw, g.data,
                              m_nodes[static_cast<size_t>(m_output)]->layout, d.n(), d.c(), d.h(), d.w());
  }
  std::vector<Tensor>& in = m_in;
  std::vector<Tensor>& din = m_din;
  std::vector<int>& pending_add = m_pending_add;
  for (int id = size() - 1; id >= 1; --id) {
    Node& n = *m_nodes[static_cast<size_t>(id)];
    if (!n.grad_written) continue;  // does not reach the output
    if (m_fused_into[static_cast<size_t>(id)] >= 0) {  // its head's backward does its part, in the same memory
      m_nodes[static_cast<size_t>(n.inputs[0])]->grad_written = true;
      continue;
    }
    in.clear();
    din.clear();
    pending_add.clear();
    for (size_t q = 0; q < n.inputs.size(); ++q) {
      const int i = n.inputs[q];
      Node& src = *m_nodes[static_cast<size_t>(i)];
      in.push_back(src.value);
      if (i == k_input || n.hands_through[q]) {  // not needed, or already dout's memory
        din.push_back(Tensor{nullptr, src.shape, m_dtype});
      } else if (!src.grad_written) {
        din.push_back(src.grad);
      } else {
        din.push_back(m_scratch.view(src.shape));
        pending_add.push_back(i);
      }
    }
    // One scratch buffer: at most one input of a node can already hold a gradient with the
    // model builders (add(x, x) and the like are not built).
    SQUALL_CHECK(pending_add.size() <= 1, "graph node '" + n.name + "' needs more than one gradient scratch buffer");
    n.layer->backward(stream, in, n.value, n.grad, din);
    for (int i : n.inputs)
      if (i != k_input) m_nodes[static_cast<size_t>(i)]->grad_written = true;
    for (int i : pending_add) {
      Node& src = *m_nodes[static_cast<size_t>(i)];
      m_backend->add(stream, m_dtype, src.grad.data, m_scratch.raw(), src.grad.data,
                     static_cast<size_t>(src.shape.numel()));
    }
    if (on_params_ready && n.has_params) on_params_ready(n.param_begin);
  }
  if (on_params_ready) on_params_ready(0);
}

}  // namespace squall::nn
