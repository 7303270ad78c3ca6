#pragma once
// One learner: a replica of the model (its own Graph, optimizer, streams and random stream)
// that trains on its own batch (docs/design.md, "The learner group"). It enqueues its pass
// on its own stream and does not wait for it: the pass ends by recording `done`, after the
// loss and the sum of squares of the gradients (the finite check) are on their way to
// pinned host memory, and whoever needs the results orders itself after that event.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/optim/optimizer.hpp"

namespace squall::parallel {

// One learner's input for a step: host memory, [batch, c, h, w] images and labels.
struct LearnerBatch {
  const float* images = nullptr;
  const int32_t* labels = nullptr;
};

// What every learner of a group is built from.
struct LearnerSetup {
  nn::Backend* backend = nullptr;
  std::function<std::unique_ptr<nn::Graph>()> make_graph;
  int64_t batch = 0, label_count = 0;
  nn::DType precision = nn::DType::f32;
  nn::Layout layout = nn::Layout::nchw;
  uint64_t seed = 1;  // parameter initialisation; with (rank, index) the dropout stream
  int rank = 0;
  optim::OptimizerOptions optimizer;
  // parallel.spatial: the group that splits each sample (null: none; docs/design.md, "One
  // sample across ranks"). The graph make_graph builds is set on this rank's tile; each pass
  // weights its tile's loss by the tile's share of the sample's label weights (summed over the
  // group from class_weights, host copies), and, where sum_over_tile says so, sums its
  // gradients over the group after backward, so that every rank of the group holds the whole
  // sample's gradient (every algorithm but ssgd across groups, whose one allreduce over the job
  // sums the tiles' shares with the groups').
  nn::TileComm* tile = nullptr;
  std::vector<float> class_weights;
  bool sum_over_tile = false;
};

// How one pass runs: the weights of the classes (backend memory or null), the loss scale
// (backend memory or null), whether to publish the backward marks (ssgd's buckets), and a
// timeline hook (the pass then waits for its stream to time the forward and backward parts).
struct PassOptions {
  const float* class_weights = nullptr;
  const float* loss_scale = nullptr;
  bool marks = false;
  bool capture = false;  // parallel.cuda_graphs: capture once, replay after
  std::function<void(const char* phase, int learner, double t0, double t1)> hook;
};

class Learner {
 public:
  // Builds the replica on the calling thread (CPU kernels size their thread teams there).
  Learner(const LearnerSetup& setup, int index);
  Learner(const Learner&) = delete;
  Learner& operator=(const Learner&) = delete;

  // The pass of `step` on batch `in`, after `after` (the group stream's last work on this
  // replica). Enqueues; returns without waiting for the device (unless a hook is set). `next`:
  // the batch of step + 1, staged now on a device backend while this pass computes.
  void pass(const LearnerBatch& in, int64_t step, nn::Event& after, const PassOptions& options,
            const LearnerBatch* next);
  // After `done` has completed: the pass's loss and the sum of squares of its gradients.
  float loss() const { return loss_host.data()[0]; }
  float grad_norm2() const { return norm_host.data()[0]; }
  // parallel.spatial: this tile's share of its sample's label weights in the last pass (1
  // without a split); the sample's loss is the group's sum of loss() x share().
  double share() const { return m_share; }

  // Its batch on the way into backend memory on the copy stream (device backends).
  void stage_input(const LearnerBatch& in, int64_t step);

  nn::Backend& backend;
  const LearnerSetup& setup;
  int index = 0;
  std::unique_ptr<nn::Graph> graph;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<nn::Stream> stream;
  std::unique_ptr<nn::Event> done;  // the pass (and any local update) so far
  nn::Buffer labels_owner;
  int32_t* labels = nullptr;
  nn::RunMode mode;
  nn::Buffer loss_dev, loss_host;  // the loss of its last pass, and its pinned host copy
  nn::Buffer norm_dev, norm_host;  // its gradients' sum of squares (the finite check)
  bool overflow = false;           // this step's update was skipped (non-finite gradients)
  double pass_end = 0;             // when the host had enqueued (or, timed, finished) its pass
  // ssgd across ranks: the backward hook's marks. Mark i: gradients at arena offsets >=
  // offset[i] are written once event i has completed. marks_done counts the published ones.
  std::vector<size_t> mark_offset;
  std::vector<std::unique_ptr<nn::Event>> mark_event;
  std::atomic<int> marks_done{0};
  // parallel.cuda_graphs: the pass captured once and replayed; capture_failed: the backend
  // could not capture it, it runs eagerly. A capture needs one eager pass first (it sizes the
  // stream's workspaces and makes its library handles), whatever the step number: a resumed
  // run or a learner the auto-tuner adds starts at step > 0.
  std::unique_ptr<nn::Captured> captured;
  bool capture_failed = false;
  int64_t eager_passes = 0;

 private:
  void take_input(const LearnerBatch& in, int64_t step);
  void enqueue_forward(const LearnerBatch& in, const PassOptions& options);
  std::unique_ptr<nn::Captured> capture_pass(const LearnerBatch& in, const PassOptions& options);
  // parallel.spatial: the tile's share of the sample's label weights, summed over the group,
  // on its way to share_dev (the loss's gradient scale); and, after backward, the gradients
  // summed over the group.
  void weigh_tile(const LearnerBatch& in);
  void sum_tile_gradients();

  double m_share = 1;
  nn::Buffer share_dev, share_host;
  std::vector<double> m_tile_sum;  // sum_tile_gradients' buffer
  std::vector<float> m_tile_host;  // its host copy of a device's gradients

  // Device backends: the batch staged in backend memory ahead of its pass, on a copy stream
  // of the learner's own; the pass copies it into the graph's input on its own stream.
  // `consumed`: the pass has taken the staged batch, `staged`: the copy stream has put the
  // next one in place; staged_step/images/labels: which batch that is (step -1: none).
  std::unique_ptr<nn::Stream> copy_stream;
  nn::Buffer in_images, in_labels_owner;
  int32_t* in_labels = nullptr;
  std::unique_ptr<nn::Event> staged, consumed;
  int64_t staged_step = -1;
  const float* staged_images = nullptr;
  const int32_t* staged_labels = nullptr;
};

}  // namespace squall::parallel
