// One learner's replica and its pass (src/parallel/learner.hpp): the batch staged on the
// learner's copy stream ahead of its step and taken into the graph's input, the pass
// enqueued, and the pass captured once as a CUDA graph (parallel.cuda_graphs).
#include "src/parallel/learner.hpp"
#include "src/core/clock.hpp"
#include "src/core/numeric.hpp"

#include <limits>
#include <string>

#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/nn/spatial.hpp"

namespace squall::parallel {
namespace {


}  // namespace

Learner::Learner(const LearnerSetup& s, int idx) : backend(*s.backend), setup(s), index(idx) {
  graph = s.make_graph();
  graph->set_dtype(s.precision);
  graph->set_layout(s.layout);
  graph->build(backend, s.batch, s.seed);
  stream = backend.create_stream();
  done = backend.create_event();
  labels = backend.allocate_labels(static_cast<size_t>(s.label_count), labels_owner);
  loss_dev = backend.allocate(1);
  loss_host = backend.allocate_host(1, nn::DType::f32);
  norm_dev = backend.allocate(1);
  norm_host = backend.allocate_host(1, nn::DType::f32);
  if (!backend.capabilities().host_accessible) {
    copy_stream = backend.create_stream();
    in_images = backend.allocate(static_cast<size_t>(graph->input().numel()));
    in_labels = backend.allocate_labels(static_cast<size_t>(s.label_count), in_labels_owner);
    staged = backend.create_event();
    consumed = backend.create_event();
  }
  for (int i = 0; i <= graph->size(); ++i) {
    mark_offset.push_back(0);
    mark_event.push_back(backend.create_event());
  }
  // The update writes the convolutions' own weight copies too, so that the next forward need
  // not (docs/design.md, "Weight mirrors").
  const std::vector<nn::WeightMirror> mirrors = graph->weight_mirrors();
  std::vector<optim::ParamGroup> groups;
  for (size_t i = 0; i < graph->param_info().size(); ++i) {
    const nn::ParamInfo& p = graph->param_info()[i];
    groups.push_back({graph->params() + p.offset, graph->grads() + p.offset, p.count,
                      p.weight_decay || s.optimizer.decay_bias_and_norm, p.name,
                      mirrors.empty() ? nn::WeightMirror{} : mirrors[i]});
  }
  nn::Graph* g = graph.get();
  optimizer = optim::make_optimizer(s.optimizer, backend, std::move(groups), [g] { g->mark_mirrors_current(); });
  if (s.tile != nullptr) {
    if (!backend.capabilities().host_accessible)
      throw Error("parallel.spatial: the " + backend.name() + " backend cannot split a sample yet (its memory is not the host's)");
    share_dev = backend.allocate(1);
    share_host = backend.allocate_host(1, nn::DType::f32);
  }
  mode.train = true;
  mode.seed = splitmix64(s.seed ^ splitmix64((static_cast<uint64_t>(s.rank) << 20) | static_cast<uint64_t>(idx)));
}

void Learner::pass(const LearnerBatch& in, int64_t step, nn::Event& after, const PassOptions& options,
                   const LearnerBatch* next) {
  nn::Graph& g = *graph;
  const double t0 = steady_seconds();
  backend.wait(*stream, after);  // the group's last work on this replica
  if (in_images) {
    take_input(in, step);
    // The next step's batch goes on its way now, while this pass computes.
    if (next != nullptr) stage_input(*next, step + 1);
  }
  mode.step = static_cast<uint64_t>(step);
  if (setup.tile != nullptr) weigh_tile(in);
  // parallel.cuda_graphs: a plain pass (no timeline, no per-layer marks) is captured at the
  // learner's second pass (its first, eager, has grown every workspace, made every handle and
  // chosen every algorithm) and replayed from then on. It starts at the graph's input, which
  // take_input has just filled. A pass that could not be captured runs eagerly, now and later.
  const bool plain = options.capture && in_images && !options.hook && !options.marks && !capture_failed;
  if (plain && !captured && eager_passes > 0) {
    captured = capture_pass(in, options);
    capture_failed = !captured;
  }
  double t1 = t0;
  if (plain && captured) {
    backend.replay(*captured, *stream);
  } else {
    enqueue_forward(in, options);
    // The forward/backward split of the timeline needs the forward pass complete.
    if (options.hook) {
      backend.synchronize(*stream);
      t1 = steady_seconds();
      options.hook("forward", index, t0, t1);
    }
    if (options.marks) {
      marks_done.store(0, std::memory_order_relaxed);
      g.backward(*stream, [&](size_t offset) {
        const int i = marks_done.load(std::memory_order_relaxed);
        mark_offset[static_cast<size_t>(i)] = offset;
        backend.record(*mark_event[static_cast<size_t>(i)], *stream);
        marks_done.store(i + 1, std::memory_order_release);
      });
    } else {
      g.backward(*stream);
    }
    ++eager_passes;
  }
  if (setup.tile != nullptr && setup.sum_over_tile) sum_tile_gradients();
  // The finite check's input, read by the host with the loss (train.nonfinite, loss scaling).
  backend.sum_squares(*stream, g.grads(), g.param_arena_floats(), norm_dev.data());
  backend.copy_to_host(*stream, norm_host.data(), norm_dev.data(), 1);
  backend.record(*done, *stream);
  if (options.hook) backend.synchronize(*stream);
  pass_end = steady_seconds();
  // A replayed pass is one launch: the timeline shows it as its backward part.
  if (options.hook) options.hook("backward", index, t1, pass_end);
}

// The batch `in` of step `step` on its way into the learner's staging buffers, on its copy
// stream, once the pass before has taken the previous batch out of them. `in` must stay
// valid until the pass of `step` has run (the trainer holds the loader's buffer, pinned on
// CUDA, until then).
void Learner::stage_input(const LearnerBatch& in, int64_t step) {
  const auto pixels = static_cast<size_t>(graph->input().numel());
  const auto label_count = static_cast<size_t>(setup.label_count);
  backend.wait(*copy_stream, *consumed);
  backend.copy_from_host(*copy_stream, in_images.data(), in.images, pixels);
  backend.copy_labels_from_host(*copy_stream, in_labels, in.labels, label_count);
  backend.record(*staged, *copy_stream);
  staged_step = step;
  staged_images = in.images;
  staged_labels = in.labels;
}

// The staged batch of `step` into the graph's input and the labels, on the learner's stream
// (device to device): staged now if the previous step did not stage this very batch.
void Learner::take_input(const LearnerBatch& in, int64_t step) {
  if (staged_step != step || staged_images != in.images || staged_labels != in.labels) stage_input(in, step);
  nn::Graph& g = *graph;
  backend.wait(*stream, *staged);
  backend.copy(*stream, g.input().f32(), in_images.data(), static_cast<size_t>(g.input().numel()));
  backend.copy_bytes(*stream, labels, in_labels, static_cast<size_t>(setup.label_count) * sizeof(int32_t));
  backend.record(*consumed, *stream);
  staged_step = -1;
}

// A learner's pass up to its backward: the batch into backend memory (a backend the host
// can read takes it from the host here; a device one has it from take_input), forward, loss,
// and the loss on its way to the host.
void Learner::enqueue_forward(const LearnerBatch& in, const PassOptions& options) {
  nn::Graph& g = *graph;
  if (!in_images) {
    backend.copy_from_host(*stream, g.input().f32(), in.images, static_cast<size_t>(g.input().numel()));
    backend.copy_labels_from_host(*stream, labels, in.labels, static_cast<size_t>(setup.label_count));
  }
  g.forward(*stream, mode);
  const auto out = g.output_shape();
  // A split sample's tile: its mean loss's gradient scaled by the tile's share of the sample's
  // label weights (the config refuses fp16's loss scale with a split).
  const float* grad_scale = setup.tile != nullptr ? share_dev.data() : options.loss_scale;
  backend.softmax_cross_entropy(*stream, g.dtype(), g.output().data, labels, options.class_weights, out.n(),
                                out.c(), out.h() * out.w(), g.output_grad().data, loss_dev.data(), grad_scale);
  backend.copy_to_host(*stream, loss_host.data(), loss_dev.data(), 1);
}

// The tile's label weights over the group's: the host reads its labels (host memory), and the
// group sums them on this thread, which is the graph's (its stream has finished the pass
// before, whose layers call the same communicator).
void Learner::weigh_tile(const LearnerBatch& in) {
  backend.synchronize(*stream);
  const double mine = nn::label_weight_sum(in.labels, static_cast<size_t>(setup.label_count),
                                           setup.class_weights.empty() ? nullptr : setup.class_weights.data(),
                                           setup.class_weights.empty() ? std::numeric_limits<int32_t>::max()
                                                                       : static_cast<int64_t>(setup.class_weights.size()));
  double total = mine;
  setup.tile->sum(&total, 1);
  m_share = total > 0 ? mine / total : 0.0;
  share_host.data()[0] = static_cast<float>(m_share);
  backend.copy_from_host(*stream, share_dev.data(), share_host.data(), 1);
}

// The group's gradient of the whole sample on every rank of the group: each tile's share
// summed in double in group-rank order, so that every rank gets the same bits. On a device
// the gradients go through a host copy each way.
void Learner::sum_tile_gradients() {
  const size_t n = graph->param_arena_floats();
  float* g = graph->grads();
  const bool host = backend.capabilities().host_accessible;
  if (!host) {
    m_tile_host.resize(n);
    backend.copy_to_host(*stream, m_tile_host.data(), g, n);
  }
  backend.synchronize(*stream);
  const float* from = host ? g : m_tile_host.data();
  m_tile_sum.assign(from, from + n);
  setup.tile->sum(m_tile_sum.data(), n);
  float* to = host ? g : m_tile_host.data();
  for (size_t i = 0; i < n; ++i) to[i] = static_cast<float>(m_tile_sum[i]);
  if (!host) {
    backend.copy_from_host(*stream, g, m_tile_host.data(), n);
    backend.synchronize(*stream);
  }
}

// The learner's pass recorded as one graph. A call the backend refuses inside the capture
// (nn::CaptureError: an allocation, a workspace that would grow, a handle, a host wait)
// abandons it: the stream is left as it was and the pass runs eagerly, now and later.
// Any other error abandons the capture too, then goes on up.
std::unique_ptr<nn::Captured> Learner::capture_pass(const LearnerBatch& in, const PassOptions& options) {
  backend.begin_capture(*stream);
  try {
    enqueue_forward(in, options);
    graph->backward(*stream);
  } catch (const nn::CaptureError& e) {
    backend.abandon_capture(*stream);
    log::warn("learner " + std::to_string(index) + ": its pass cannot be captured as a CUDA graph (" + e.what() +
              "); it runs eagerly");
    return nullptr;
  } catch (...) {
    backend.abandon_capture(*stream);
    throw;
  }
  return backend.end_capture(*stream);
}

}  // namespace squall::parallel
