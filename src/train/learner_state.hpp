#pragma once
// One learner of the group (src/train/learners.hpp): its replica, optimizer, streams, input
// staging and captured pass. Included by the group's own sources only: it defines the
// group's private nested struct.
#include <atomic>
#include <memory>
#include <vector>

#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/train/learners.hpp"
#include "src/train/optimizer.hpp"

namespace squall::train {

struct LearnerGroup::Learner {
  int index = 0;
  std::unique_ptr<nn::Graph> graph;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<nn::Stream> stream;
  nn::Buffer labels_owner;
  int32_t* labels = nullptr;
  nn::RunMode mode;
  nn::Buffer loss_dev;    // the loss of its last pass, backend memory
  nn::Buffer loss_host;   // ... copied here (pinned) at the end of the pass
  nn::Buffer norm_dev, norm_host;  // dynamic loss scaling: its gradients' sum of squares
  bool overflow = false;           // ... was not finite this step (its update was skipped)
  // Backends whose memory the host cannot use (CUDA): the batch is staged in backend memory
  // ahead of its pass, on a copy stream of the learner's own (the next step's copy runs while
  // this step computes); the pass then copies it into the graph's input on its own stream.
  // `consumed`: the pass has taken the staged batch, `staged`: the copy stream has put the
  // next one in place; staged_step/images/labels: which batch that is (step -1: none).
  std::unique_ptr<nn::Stream> copy_stream;
  nn::Buffer in_images, in_labels_owner;
  int32_t* in_labels = nullptr;
  std::unique_ptr<nn::Event> staged, consumed;
  int64_t staged_step = -1;
  const float* staged_images = nullptr;
  const int32_t* staged_labels = nullptr;
  float loss = 0;
  double pass_end = 0;  // when its backward pass ended (steady seconds)
  // ssgd across ranks: the backward hook's marks. Mark i: gradients at arena offsets >=
  // offset[i] are written once event i has completed. marks_done counts the published ones.
  std::vector<size_t> mark_offset;
  std::vector<std::unique_ptr<nn::Event>> mark_event;
  std::atomic<int> marks_done{0};
  // parallel.cuda_graphs: the pass (forward, loss, backward, from the graph's input that
  // take_input fills) captured once and replayed; capture_failed: the backend could not
  // capture it, run eagerly. eager_passes: passes this learner has run eagerly on its stream; a capture needs one
  // first (it sizes the stream's workspaces and makes its library handles), whatever the
  // step number: a resumed run or a learner the auto-tuner adds starts at step > 0.
  std::unique_ptr<nn::Captured> captured;
  bool capture_failed = false;
  int64_t eager_passes = 0;
};

}  // namespace squall::train
