// A learner's input and its pass as the device sees it: the batch staged on the learner's
// copy stream ahead of its step and taken into the graph's input, the pass enqueued, and
// the pass captured once as a CUDA graph (parallel.cuda_graphs).
#include <memory>
#include <string>

#include "src/core/error.hpp"
#include "src/core/log.hpp"
#include "src/train/learner_state.hpp"
#include "src/train/learners.hpp"

namespace squall::train {

// The batch `in` of step `step` on its way into the learner's staging buffers, on its copy
// stream, once the pass before has taken the previous batch out of them. `in` must stay
// valid until the pass of `step` has run (the trainer holds the loader's buffer, pinned on
// CUDA, until then).
void LearnerGroup::stage_input(Learner& l, const LearnerBatch& in, int64_t step) {
  const auto pixels = static_cast<size_t>(l.graph->input().numel());
  const auto label_count = static_cast<size_t>(m_label_count);
  m_backend.wait(*l.copy_stream, *l.consumed);
  m_backend.copy_from_host(*l.copy_stream, l.in_images.data(), in.images, pixels);
  m_backend.copy_labels_from_host(*l.copy_stream, l.in_labels, in.labels, label_count);
  m_backend.record(*l.staged, *l.copy_stream);
  l.staged_step = step;
  l.staged_images = in.images;
  l.staged_labels = in.labels;
}

// The staged batch of `step` into the graph's input and the labels, on the learner's stream
// (device to device): staged now if the previous step did not stage this very batch.
void LearnerGroup::take_input(Learner& l, const LearnerBatch& in, int64_t step) {
  if (l.staged_step != step || l.staged_images != in.images || l.staged_labels != in.labels)
    stage_input(l, in, step);
  nn::Graph& g = *l.graph;
  m_backend.wait(*l.stream, *l.staged);
  m_backend.copy(*l.stream, g.input().f32(), l.in_images.data(), static_cast<size_t>(g.input().numel()));
  m_backend.copy_bytes(*l.stream, l.labels, l.in_labels, static_cast<size_t>(m_label_count) * sizeof(int32_t));
  m_backend.record(*l.consumed, *l.stream);
  l.staged_step = -1;
}

// A learner's pass up to its backward: the batch into backend memory (a backend the host
// can read takes it from the host here; a device one has it from take_input), forward, loss,
// and the loss on its way to the host.
void LearnerGroup::enqueue_forward(Learner& l, const LearnerBatch& in, const float* weights) {
  nn::Graph& g = *l.graph;
  if (!l.in_images) {
    m_backend.copy_from_host(*l.stream, g.input().f32(), in.images, static_cast<size_t>(g.input().numel()));
    m_backend.copy_labels_from_host(*l.stream, l.labels, in.labels, static_cast<size_t>(m_label_count));
  }
  g.forward(*l.stream, l.mode);
  const auto out = g.output_shape();
  m_backend.softmax_cross_entropy(*l.stream, g.dtype(), g.output().data, l.labels, weights, out.n(), out.c(),
                                  out.h() * out.w(), g.output_grad().data, l.loss_dev.data(),
                                  m_scaler->device_scale());
  m_backend.copy_to_host(*l.stream, l.loss_host.data(), l.loss_dev.data(), 1);
}

// The learner's pass recorded as one graph. A call the backend refuses inside the capture
// (nn::CaptureError: an allocation, a workspace that would grow, a handle, a host wait)
// abandons it: the stream is left as it was and the pass runs eagerly, now and later.
// Any other error abandons the capture too, then goes on up.
std::unique_ptr<nn::Captured> LearnerGroup::capture_pass(Learner& l, const LearnerBatch& in, const float* weights) {
  m_backend.begin_capture(*l.stream);
  try {
    enqueue_forward(l, in, weights);
    l.graph->backward(*l.stream);
  } catch (const nn::CaptureError& e) {
    m_backend.abandon_capture(*l.stream);
    log::warn("learner " + std::to_string(l.index) +
              ": its pass cannot be captured as a CUDA graph (" + e.what() + "); it runs eagerly");
    return nullptr;
  } catch (...) {
    m_backend.abandon_capture(*l.stream);
    throw;
  }
  return m_backend.end_capture(*l.stream);
}

}  // namespace squall::train
