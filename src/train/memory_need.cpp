// The memory a rank needs, before it trains (src/train/memory_need.hpp).
#include "src/train/memory_need.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "src/core/error.hpp"
#include "src/nn/layers/halo.hpp"
#include "src/nn/models/input_multiple.hpp"
#include "src/nn/models/split_check.hpp"
#include "src/optim/optimizer.hpp"

namespace squall::train {
namespace {

constexpr double k_mib = 1024.0 * 1024.0, k_gib = k_mib * 1024.0;

// q's model on group rank `rank`'s tile, set up for `batch` and planned as q's backend would
// build it (layouts, fusion).
struct Planned {
  nn::SpatialPlace place;
  std::unique_ptr<nn::PlanningComm> comm;  // before the graph, which keeps a pointer to it
  std::unique_ptr<nn::Graph> graph;
};

Planned plan_graph(const MemoryQuery& q, int64_t rank, int64_t batch, bool forward_only) {
  Planned p;
  p.place = nn::SpatialPlace::make(q.split, rank, q.sample.h(), q.sample.w(), nn::input_multiple(q.model));
  p.graph = nn::make_model(q.model, q.sample);
  p.graph->set_dtype(q.precision);
  p.graph->set_layout(q.layout);
  p.graph->set_forward_only(forward_only);
  if (q.split.split()) {
    p.comm = std::make_unique<nn::PlanningComm>(rank, q.split.ranks());
    p.graph->set_tile(p.place, p.comm.get());
  }
  p.graph->setup(batch);
  p.graph->plan_layouts(q.caps);
  return p;
}

size_t numel(const nn::Shape& s) { return static_cast<size_t>(s.numel()); }

// A tensor of the whole sample's size `full` on the tiles of `place`, as the graph hands it to
// its layers (nn::Graph::setup).
nn::TensorTile tile_of(const nn::SpatialPlace& place, const nn::Shape& full) {
  return nn::tensor_tile(place, full.h(), full.w());
}

// What a graph allocates besides its arenas for the activations (nn::Graph::build): the
// scratch gradient of a training graph (its largest tensor), the f32 input it converts from
// where the model computes in another type or layout, and the logits (and their gradient) in
// NCHW where the output node is in another layout.
size_t graph_extras(const nn::Graph& g) {
  const size_t esize = dtype_size(g.dtype());
  size_t largest = 0;
  for (int i = 1; i < g.size(); ++i) largest = std::max(largest, numel(g.node_shape(i)));
  size_t bytes = g.forward_only() ? 0 : largest * esize;
  if (g.dtype() != nn::DType::f32 || g.node_layout(nn::Graph::k_input) != nn::Layout::nchw)
    bytes += numel(g.node_shape(nn::Graph::k_input)) * sizeof(float);
  if (g.node_layout(g.output_node()) != nn::Layout::nchw)
    bytes += numel(g.output_shape()) * esize * (g.forward_only() ? 1 : 2);
  return bytes;
}

// workspace_bytes' measured constants (below): per convolution plan, and the share of the
// bytes the convolutions read and write, for each kind of plan oneDNN makes, fitted to the
// probe's figures.
struct PlanCost {
  double mib_per_plan, share;
};
constexpr PlanCost k_train_blocked_avx512{1.0, 0.054}, k_train_blocked{1.0, 0.006}, k_train_plain{1.0, 2.0},
    k_eval_blocked_avx512{0.8, 0.055}, k_eval_winograd{2.75, 0.27}, k_eval_blocked{0.9, 0.03}, k_eval_plain{0.8, 1.03};

// The convolution description of graph node i (a conv2d or conv_transpose2d) on its tile, as the
// layer has it at build (its description is private to it).
nn::ConvDesc conv_desc(const nn::Graph& g, int i) {
  const int in = g.node_inputs(i).at(0);
  const nn::Shape& x = g.node_shape(in);
  const nn::LayerAttributes a = g.node_layer(i)->attributes();
  nn::ConvDesc d;
  d.n = x.n();
  d.c = x.c();
  d.h = x.h();
  d.w = x.w();
  d.k = g.node_shape(i).c();
  d.r = d.s = a.kernel;
  d.stride_h = d.stride_w = a.stride;
  d.pad_h = d.pad_w = a.padding;
  d.dil_h = d.dil_w = a.dilation;
  d.bias = a.bias;
  d.transposed = g.node_layer(i)->type() == "conv_transpose2d";
  d.dtype = g.dtype();
  d.layout = g.node_layout(in);
  if (g.node_layout(i) != d.layout) d.out_layout = g.node_layout(i);
  return d;
}

// What the graph hands conv2d node i of a split graph (nn::Graph::setup).
nn::TileContext tile_context(const Planned& p, int i) {
  const nn::Graph& g = *p.graph;
  nn::TileContext t;
  t.place = &p.place;
  t.comm = p.comm.get();
  t.node = i;
  t.inputs.push_back(tile_of(p.place, g.node_full_shape(g.node_inputs(i).at(0))));
  t.output = tile_of(p.place, g.node_full_shape(i));
  return t;
}

// The halo and edge-strip buffers of every convolution whose kernel reaches across a tile edge
// (nn::ConvTile::buffer_bytes, from the description the layer has on this tile).
size_t halo_bytes(const Planned& p) {
  const nn::Graph& g = *p.graph;
  if (!p.place.split.split()) return 0;
  size_t bytes = 0;
  for (int i = 1; i < g.size(); ++i)  // a transposed convolution on tiles has no halo
    if (g.node_layer(i)->type() == "conv2d") bytes += nn::ConvTile::buffer_bytes(conv_desc(g, i), tile_context(p, i));
  return bytes;
}

// The edge strips' own plans of conv2d node i (nn::ConvTile::strips).
size_t strip_plans(const Planned& p, int i) {
  return nn::ConvTile::strips(conv_desc(*p.graph, i), tile_context(p, i));
}

// The floats of the convolutions' weights (those a reduced-precision plan keeps a copy of).
size_t conv_weight_floats(const nn::Graph& g) {
  size_t floats = 0;
  for (const nn::ParamInfo& p : g.param_info())
    if (p.shape.rank == 4) floats += p.count;
  return floats;
}

// What the workspace estimate is made from: the graph's convolution plans (each edge strip of
// a split sample has a plan of its own) and the bytes its convolutions read and write.
struct ConvWork {
  size_t plans = 0;
  size_t io_bytes = 0;  // the inputs and outputs of every convolution, at the tile and batch
  // A channel-blocked graph keeps a tensor whose channels do not fill whole blocks in NCHW (the
  // U-Net's first level at width 8 on AVX-512); oneDNN convolves such a tensor by GEMM over an
  // im2col copy of each image, r x s x C x H_out x W_out values, which its scratchpad holds.
  size_t im2col_bytes = 0;
};

ConvWork conv_work(const Planned& p) {
  const nn::Graph& g = *p.graph;
  ConvWork w;
  for (int i = 1; i < g.size(); ++i) {
    const std::string type = g.node_layer(i)->type();
    if (type != "conv2d" && type != "conv_transpose2d") continue;
    ++w.plans;
    const int in = g.node_inputs(i).at(0);
    w.io_bytes += (numel(g.node_shape(in)) + numel(g.node_shape(i))) * dtype_size(g.dtype());
    const nn::LayerAttributes a = g.node_layer(i)->attributes();
    const nn::Shape& y = g.node_shape(i);
    if (type == "conv2d" && a.kernel > 1 && g.node_layout(in) == nn::Layout::nchw)
      w.im2col_bytes += static_cast<size_t>(a.kernel * a.kernel * g.node_shape(in).c() * y.h() * y.w()) *
                        dtype_size(g.dtype());
  }
  if (p.place.split.split())
    for (int i = 1; i < g.size(); ++i)
      if (g.node_layer(i)->type() == "conv2d") w.plans += strip_plans(p, i);
  return w;
}

// The workspace of the backend's plans: an ESTIMATE. The CPU backend's oneDNN primitives keep,
// per convolution plan, their generated code and, where the primitive wants another layout
// than the graph's tensors have, reordered copies of its operands, and per stream the largest
// plan's scratchpad (cpu::CpuStream::scratch); squall cannot ask oneDNN for these sizes from
// here. The figure is a fixed part per plan and a part
// proportional to the bytes the convolutions read and write, with constants measured: the
// growth of the peak resident memory (VmHWM) of a process that trains the climate U-Net
// (width 16, depth 4, Adam) for two steps and evaluates once, over its resident memory before,
// less what the exact parts above account for (tests/unit/test_memory_need.cpp, "memory probe";
// oneDNN 2.6, one thread, at 96 x 144 to 384 x 576, batch 1 to 16, splits [2, 1], [2, 2] and
// [4, 1]; AVX-512, and capped at AVX2; within 2.5% of every one-rank figure). A training plan
// costs about 1 MiB whatever its size (an edge strip's as much as a whole tile's). The
// proportional part depends on what oneDNN chooses: in the channel-blocked layout (model.layout
// = auto or blocked at fp32) training needs 5% of the operands on AVX-512 and almost nothing on
// AVX2; the forward-only plans of the evaluation graph take oneDNN's Winograd kernel on AVX-512
// for a batch of 4 or more, which costs some 2.75 MiB a plan and a quarter of the operands
// (refitted on an Intel Xeon with AMX, within 1% at batch 4 to 16, once a stream's plans
// shared one scratchpad: each Winograd plan had kept its own, 8 to 22 MiB at batch 4, and
// their sum had depended on the CPU's cache sizes, 43 MiB more there than on Zen 4); in plain
// NCHW every plan keeps reordered copies of its operands: twice their bytes in training, once
// in evaluation. Two threads per rank instead of one added 1 to 5 MiB. Where
// several ranks share one process (the probe's split runs) their evaluation plans cost less
// than this, in part because oneDNN's primitive cache shares the generated code of identical
// plans. Not calibrated: other models' shapes, more than two threads per rank, bf16/fp16 on the
// CPU (whose reference plans keep f32 copies of their operands and weights; counted as NCHW's),
// and the GPU, where cuDNN's workspace is the stream's, capped at 512 MiB (cuda/conv.cpp): that
// cap is counted, a bound.
size_t workspace_bytes(const Planned& p, const MemoryQuery& q) {
  if (q.gpu) return size_t{512} << 20;
  const nn::Graph& g = *p.graph;
  const ConvWork w = conv_work(p);
  const nn::Layout block = q.caps.blocked_layout_for(nn::DType::f32);
  const bool blocked = g.dtype() == nn::DType::f32 && q.layout == nn::Layout::blocked && block != nn::Layout::nchw;
  const bool avx512 = block == nn::Layout::nchw16c;  // oneDNN's 16-float vectors
  PlanCost c{};
  if (!g.forward_only())
    c = !blocked ? k_train_plain : avx512 ? k_train_blocked_avx512 : k_train_blocked;
  else
    c = !blocked ? k_eval_plain : !avx512 ? k_eval_blocked : g.batch() >= 4 ? k_eval_winograd : k_eval_blocked_avx512;
  // In a blocked graph, its NCHW convolutions' im2col copies on top (measured: the U-Net of
  // width 8 at 1440 x 2880 on AVX-512, whose first level is NCHW, grew 12.9 GiB where the
  // blocked parts' estimate said 5.0 and these copies 7.2).
  return static_cast<size_t>(c.mib_per_plan * k_mib * static_cast<double>(w.plans) +
                             c.share * static_cast<double>(w.io_bytes)) +
         (blocked ? w.im2col_bytes : 0);
}

MemoryNeed need_of_rank(const MemoryQuery& q, int64_t rank) {
  const Planned p = plan_graph(q, rank, q.batch, false);
  const nn::Graph& g = *p.graph;
  const auto learners = static_cast<size_t>(std::max(q.learners, 1));
  MemoryNeed m;
  m.split = q.split;
  m.group_rank = rank;
  m.tile_h = p.place.rows().size();
  m.tile_w = p.place.cols().size();

  const nn::Shape out = g.output_shape();
  const size_t labels = static_cast<size_t>(out.rank == 4 ? out.n() * out.h() * out.w() : out.n()) * sizeof(int32_t);
  size_t per_learner = g.activation_bytes() + graph_extras(g) + labels;
  // A device backend stages each learner's next batch in its own memory (parallel::Learner).
  if (!q.caps.host_accessible) per_learner += numel(g.node_shape(nn::Graph::k_input)) * sizeof(float) + labels;
  m.activations = learners * per_learner;

  const size_t params = g.param_arena_floats(), state = g.state_arena_floats();
  m.parameters = learners * (params + state) * sizeof(float);
  m.gradients = learners * params * sizeof(float);
  m.optimizer = learners * g.parameter_count() * static_cast<size_t>(optim::state_floats_per_parameter(q.optimizer)) *
                sizeof(float);
  if (q.precision != nn::DType::f32) m.mirrors = learners * conv_weight_floats(g) * dtype_size(q.precision);
  m.sums = (params + state + 1) * sizeof(float);
  m.halos = learners * halo_bytes(p);
  m.workspace = learners * workspace_bytes(p, q);

  if (q.eval_batch > 0) {
    const Planned e = plan_graph(q, rank, q.eval_batch, true);
    const nn::Graph& eg = *e.graph;
    // nn::Graph::build allocates a gradient arena in a forward-only graph too.
    m.evaluation = eg.activation_bytes() + graph_extras(eg) + (2 * params + state) * sizeof(float) + halo_bytes(e);
    m.workspace += workspace_bytes(e, q);
  }
  // The host's batches of the tile (images in f32, labels in i32): the loader's slots, and the
  // evaluation's two (one computed on, one being read).
  const nn::Shape in = g.node_shape(nn::Graph::k_input);
  const size_t sample = (static_cast<size_t>(in.c()) * sizeof(float) + sizeof(int32_t)) *
                        static_cast<size_t>(in.h() * in.w());
  m.input = static_cast<size_t>(std::max<int64_t>(q.loader_batches, 0) * q.batch) * sample +
            (q.eval_batch > 0 ? 2 * static_cast<size_t>(q.eval_batch) * sample : 0);
  return m;
}

// The ranks whose need is the largest of a split's: tile rows (and columns) 0 and 1 hold the
// most (tile_spans gives the first tiles the extra blocks), and row 1, where there is a row 2,
// has neighbours on both sides, as many as any row; every other row is no larger and has no
// more neighbours.
std::vector<int64_t> largest_ranks(const nn::SpatialSplit& s) {
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < std::min<int64_t>(s.rows, 2); ++r)
    for (int64_t c = 0; c < std::min<int64_t>(s.cols, 2); ++c) ranks.push_back(r * s.cols + c);
  return ranks;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

size_t MemoryNeed::total() const {
  size_t t = 0;
  for (const auto& [name, bytes] : parts()) t += bytes;
  return t;
}

std::vector<std::pair<std::string, size_t>> MemoryNeed::parts() const {
  return {{"activations", activations}, {"parameters", parameters}, {"gradients", gradients},
          {"optimizer", optimizer},     {"mirrors", mirrors},       {"sums", sums},
          {"halos", halos},             {"evaluation", evaluation}, {"workspace", workspace},
          {"input", input}};
}

std::string MemoryNeed::text() const {
  const size_t t = total();
  const bool gib = static_cast<double>(t) >= k_gib;
  const double unit = gib ? k_gib : k_mib;
  std::string parts_text;
  for (const auto& [name, bytes] : parts()) {
    const bool always = name == "activations" || name == "parameters" || name == "gradients" ||
                        name == "optimizer" || name == "workspace";
    if (!always && bytes == 0) continue;
    parts_text += (parts_text.empty() ? "" : ", ") + name + " " + fixed(static_cast<double>(bytes) / unit, 2);
  }
  return "per rank: " + fixed(static_cast<double>(t) / unit, 2) + (gib ? " GiB" : " MiB") + " (" + parts_text + ")";
}

std::string bytes_text(size_t bytes) {
  const auto b = static_cast<double>(bytes);
  if (b >= k_gib) return fixed(b / k_gib, 1) + " GiB";
  if (b >= k_mib) return fixed(b / k_mib, 1) + " MiB";
  return std::to_string(bytes) + " bytes";
}

MemoryNeed memory_need(const MemoryQuery& q) {
  if (q.batch < 1) throw Error("memory need: the batch must be positive");
  if (q.group_rank >= 0) return need_of_rank(q, q.group_rank);
  MemoryNeed most;
  for (const int64_t rank : largest_ranks(q.split)) {
    MemoryNeed m = need_of_rank(q, rank);
    if (m.total() > most.total()) most = m;
  }
  return most;
}

std::optional<MemoryNeed> fitting_split(const MemoryQuery& q, size_t limit, int64_t max_ranks) {
  for (int64_t n = 1; n <= max_ranks; ++n) {
    std::vector<nn::SpatialSplit> splits;
    for (int64_t rows = n; rows >= 1; --rows)
      if (n % rows == 0) splits.push_back({rows, n / rows});
    // [n, 1] first; then the squarest, more rows than columns first.
    std::stable_sort(splits.begin() + 1, splits.end(), [](const nn::SpatialSplit& a, const nn::SpatialSplit& b) {
      return std::abs(a.rows - a.cols) < std::abs(b.rows - b.cols);
    });
    for (const nn::SpatialSplit& s : splits) {
      MemoryQuery at = q;
      at.split = s;
      at.group_rank = -1;
      MemoryNeed m;
      try {
        m = memory_need(at);
      } catch (const Error&) {
        continue;  // the model cannot run on these tiles
      }
      if (m.total() <= limit) return m;
    }
  }
  return std::nullopt;
}

std::string memory_refusal(const MemoryNeed& need, size_t limit, const std::optional<MemoryNeed>& fits,
                           const std::string& limit_name, const std::string& split_key, int64_t max_ranks) {
  if (need.total() <= limit) return "";
  std::string s = "a rank needs " + bytes_text(need.total()) + " to train on its tile of " +
                  std::to_string(need.tile_h) + " x " + std::to_string(need.tile_w) + " (" + split_key + " = " +
                  need.split.str() + "), more than " + limit_name + " (" + bytes_text(limit) + "): " + need.text();
  if (fits)
    s += "; " + split_key + " = " + fits->split.str() + " would fit (" + bytes_text(fits->total()) +
         " per rank, on tiles of " + std::to_string(fits->tile_h) + " x " + std::to_string(fits->tile_w) + ")";
  else
    s += "; no split of at most " + std::to_string(max_ranks) +
         " ranks would fit: lower train.batch_size, or train on a smaller sample";
  return s;
}

ProcessMemory process_memory() {
  ProcessMemory m;
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    const auto field = [&](const char* name, size_t& to) {
      const std::string key = std::string(name) + ":";
      if (line.rfind(key, 0) == 0) to = static_cast<size_t>(std::strtoull(line.c_str() + key.size(), nullptr, 10)) * 1024;
    };
    field("VmRSS", m.resident);
    field("VmHWM", m.peak);
  }
  return m;
}

}  // namespace squall::train
