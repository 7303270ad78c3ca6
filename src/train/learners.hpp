#pragma once
// The learners of one rank (one device) and the synchronisation algorithms that keep the
// job's learners together (docs/design.md, "Learners and the training algorithms").
//
// A LearnerGroup owns L learners, each a replica of the model (its own Graph, optimizer,
// stream and random stream) that trains on its own batch. On the CPU backend each learner
// runs on its own thread with a share of the cores; a group of one learner runs on the
// caller's thread. After every learner's forward and backward pass, step() synchronises:
//
//  - ssgd: the learners' gradients are summed inside the device (level 1 of the
//    hierarchical allreduce), summed over the job by the allreduce (levels 2-4) and divided
//    by the job's learner count; learner 0 applies the optimizer and the others copy its
//    weights, so every replica is the same model, which is also the central model. Across
//    ranks the learners run on worker threads and the gradients go to the allreduce in
//    buckets (whole tensors, last layers first) as soon as every learner's backward pass
//    has finished them, so the allreduce overlaps the rest of the backward pass; a bucket
//    is handed over without waiting for the ones before it, so several are in flight.
//  - sma (Crossbow): on a synchronisation step (every `period` steps), with z the central
//    model, W the sum of all replicas in the job, L the job's learner count and
//    (alpha, beta, mu) = sma_coefficients(...),
//        c_j = alpha (w_j - z);   w_j <- w_j - c_j - lr * update_j;
//        z   <- z + beta (W / L - z) + mu (z - z_prev).
//    beta defaults to min(alpha L, 1): Crossbow's own rule (z moves by the sum of the c_j)
//    while alpha L <= 1, and a fixed moving rate towards the learners' mean beyond, as in
//    EASGD, so that the centre stays stable for any L (docs/training.md, "SMA at any
//    scale"). The correction is applied before the optimizer's update, so weight decay (if
//    any) sees the corrected weights. Between
//    synchronisation steps the learners take independent optimizer steps. W only needs the
//    weights from before the update, so across ranks its allreduce runs while the learners
//    compute their forward and backward passes (on worker threads), as in Crossbow.
//  - local-sgd: the learners step independently and every `period` steps every replica is
//    replaced by the job's average, which becomes the central model. Before `start_step`
//    the group runs ssgd (post-local SGD: a synchronous warm-up phase).
//
// BatchNorm running statistics (the graphs' state arena) are averaged over the job at every
// synchronisation, into the central state; evaluation and checkpoints use the central
// model (central_params(), central_state()). The sums over learners and ranks are fused
// into one buffer [parameters or gradients | state] and reduced in one call.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint_file.hpp"
#include "mpi/sum.hpp"
#include "src/core/error.hpp"
#include "src/nn/backend.hpp"
#include "src/nn/graph.hpp"
#include "src/train/config.hpp"
#include "src/train/loss_scaler.hpp"
#include "src/train/optimizer.hpp"
#include "src/train/sma.hpp"

namespace squall::train {

enum class Algorithm { ssgd, sma, local_sgd };
// "ssgd" | "sma" | "local-sgd"; anything else throws squall::Error naming the value.
Algorithm parse_algorithm(std::string_view name);
const char* algorithm_name(Algorithm a);
// train.precision: "fp32" | "bf16" | "fp16" -> the activations' DType; anything else throws
// squall::Error naming the value.
nn::DType precision_dtype(std::string_view name);
// model.layout: "nchw" | "nhwc" | "auto" (nhwc on the cuda backend at bf16/f16, where
// tensor-core convolutions read NHWC directly; nchw otherwise); anything else throws.
nn::Layout resolve_layout(std::string_view name, std::string_view backend, nn::DType precision);

// What happens around each phase, for the timeline: phase is "forward", "backward",
// "update", "device_sum"; learner is -1 for work of the whole group. Times are seconds on
// the steady clock.
using PhaseHook = std::function<void(const char* phase, int learner, double t_begin, double t_end)>;

struct LearnerGroupOptions {
  Algorithm algorithm = Algorithm::ssgd;
  int learners = 1;             // replicas on this device
  int ranks = 1;                // ranks in the job (all with the same learner count)
  int rank = 0;                 // this rank in the job (salts the learners' random streams)
  int64_t period = 1;           // sma / local-sgd
  double alpha = 0.1;           // sma: pull of each learner towards the central model
  double centre_rate = 0;       // sma: beta; 0 = min(alpha * job learners, 1)
  double momentum = 0.9;        // sma: mu on the central model
  int64_t start_step = 0;       // local-sgd: ssgd before this step
  uint64_t seed = 1;            // parameter initialisation (the same on every learner)
  int threads = 0;              // compute threads for the whole group (0: the backend's)
  size_t bucket_floats = size_t{1} << 18;  // ssgd across ranks: gradients reduced in buckets of
                                           // at least this many floats (1 MiB; parallel.bucket_mb)
                                           // during the backward pass, several in flight at once
  nn::DType precision = nn::DType::f32;  // the activations' type (train.precision)
  nn::Layout layout = nn::Layout::nchw;  // their memory order (model.layout, resolved)
  LossScaling loss_scaling;     // fp16: dynamic loss scaling
  bool bf16_gradients = false;  // parallel.comm_precision = bf16: gradient sums across ranks in
                                // bf16 (half the bytes); model sums and BatchNorm statistics stay f32
  bool skip_nonfinite = false;  // train.nonfinite = skip: a step with non-finite gradients is not
                                // applied (counted in skipped_steps); false: step() throws
                                // NonFiniteStep naming the rank, learner and layer
  bool graphs = false;          // capture each learner's pass once (after its first, eager, pass) and replay
                                // it (a CUDA graph); steps with a timeline or per-layer buckets run
                                // eagerly. Needs a backend that can_capture() and a model without dropout.
};

// A step whose gradients are NaN or infinite under train.nonfinite = stop. job_wide: found in
// the gradient sum over the job (ssgd), so every rank throws it at the same step and the
// caller may gather the culprits' descriptions; otherwise only this rank found it (a learner's
// own update under sma or local-sgd). `culprit`: "rank R learner J: the output of layer
// 'conv2' is NaN", or empty when no learner of this rank produced it.
class NonFiniteStep : public Error {
 public:
  NonFiniteStep(const std::string& what, std::string culprit, bool job_wide)
      : Error(what), m_culprit(std::move(culprit)), m_job_wide(job_wide) {}
  const std::string& culprit() const { return m_culprit; }
  bool job_wide() const { return m_job_wide; }

 private:
  std::string m_culprit;
  bool m_job_wide;
};

// One learner's input for a step: host memory, [batch, c, h, w] images and labels.
struct LearnerBatch {
  const float* images = nullptr;
  const int32_t* labels = nullptr;
};

class LearnerGroup {
 public:
  // make_graph builds an unbuilt Graph of the model (called once per learner, plus once for
  // the central model's evaluation graph). label_count: labels per batch (batch, or
  // batch * h * w for per-pixel labels). class_weights: per-class loss weights or empty.
  LearnerGroup(nn::Backend& backend, std::function<std::unique_ptr<nn::Graph>()> make_graph, int64_t batch,
               int64_t label_count, const OptimizerConfig& optimizer, std::vector<float> class_weights,
               LearnerGroupOptions options, mpi::Allreduce& reducer);
  ~LearnerGroup();
  LearnerGroup(const LearnerGroup&) = delete;
  LearnerGroup& operator=(const LearnerGroup&) = delete;

  int learners() const { return static_cast<int>(m_learners.size()); }
  int64_t batch() const { return m_batch; }
  const LearnerGroupOptions& options() const { return m_options; }
  size_t param_count() const { return m_param_count; }
  size_t state_count() const { return m_state_count; }
  std::string optimizer_name() const;

  // One training step: learner j trains on batches[j] (batches.size() == learners()), then
  // the group synchronises as its algorithm says at this step (collective through the
  // allreduce on every rank). Returns each learner's loss (before the update). A non-finite
  // loss is returned, not thrown: the caller names the step.
  // next: the batches of step + 1, when the caller has them already. On a device backend
  // they are copied to the device while this step computes (on each learner's copy stream),
  // and the next step() that is given the very same batches uses them without copying
  // again. Their memory must stay valid until that step has returned.
  std::vector<float> step(const std::vector<LearnerBatch>& batches, int64_t step, float lr,
                          const std::vector<LearnerBatch>* next = nullptr);

  // The central model (backend memory), current after every step.
  const float* central_params() const;
  const float* central_state() const;
  // A graph of batch() samples holding the central model, for evaluation (inference mode).
  nn::Graph& eval_graph();
  // One learner's replica (for tests).
  const float* replica_params(int learner) const;
  nn::Graph& replica_graph(int learner);

  // The auto-tuner: one more learner, starting from the central model (its optimizer state
  // from learner 0 under ssgd, fresh otherwise); or one less (the last). Collective in the
  // sense that every rank must make the same change before the next step.
  void add_learner();
  void remove_learner();
  void set_job_ranks(int ranks) { m_options.ranks = ranks; }

  void set_phase_hook(PhaseHook hook) { m_hook = std::move(hook); }
  // Seconds since construction: waiting for the allreduce (not hidden behind the learners'
  // passes), the allreduce's time that was hidden behind them (SMA), and everything else in
  // step().
  double reduce_seconds() const { return m_reduce_s; }
  double overlapped_reduce_seconds() const { return m_overlapped_s; }
  double compute_seconds() const { return m_compute_s; }
  // ssgd across ranks: the gradient buckets of one step, and the most of them that were in
  // the allreduce's hands at once (handed over, not yet complete) since construction.
  size_t buckets() const { return m_buckets.size(); }
  int max_buckets_in_flight() const { return m_max_buckets_in_flight; }
  // Learners whose pass is being replayed from a capture (parallel.cuda_graphs).
  int captured_learners() const;
  // Dynamic loss scaling: the scale the next step uses, and the steps skipped so far
  // (in ssgd a step of the job; in sma/local-sgd a step in which one of this group's
  // learners skipped its update).
  float loss_scale() const { return m_scaler->scale(); }
  int64_t skipped_steps() const { return m_scaler->skipped_steps(); }
  nn::Layout layout() const { return m_options.layout; }

  // Checkpoints (docs/training.md, "Checkpoints and restart"). The group's whole state as
  // named host arrays and numbers: save_shared() what every rank holds alike (the central
  // model; while the replicas are one model, as under ssgd, that replica's optimizer state and
  // the loss scale), save_own() what differs per rank when replicas_differ() (each learner's
  // replica and optimizer state, the loss scale). restore() takes both (own: null when the
  // checkpoint has no per-rank part) and throws squall::Error naming the checkpoint and the
  // entry when something is missing or of another size. Random streams need no saving: a
  // learner's dropout mask is drawn from (seed, rank, learner, step).
  bool replicas_differ() const { return !central_is_replica0(); }
  void save_shared(io::CheckpointData& out);
  void save_own(io::CheckpointData& out);
  void restore(const io::CheckpointData& shared, const io::CheckpointData* own);

 private:
  struct Learner;
  class Pool;

  std::unique_ptr<Learner> make_learner(int index);
  void run_learners(const std::function<void(Learner&)>& work);
  int threads_per_learner() const;
  bool is_sync_step(int64_t step) const;
  bool central_is_replica0() const;
  std::vector<std::function<void()>> tasks_for(const std::function<void(Learner&)>& work);
  void copy_optimizer_state(const Learner& from, Learner& to);
  static std::string sma_sum_name(int64_t step);
  void device_sum(bool gradients, bool params_part, bool state_part);
  void stage_input(Learner& l, const LearnerBatch& in, int64_t step);
  void take_input(Learner& l, const LearnerBatch& in, int64_t step);
  void enqueue_forward(Learner& l, const LearnerBatch& in, const float* weights);
  std::unique_ptr<nn::Captured> capture_pass(Learner& l, const LearnerBatch& in, const float* weights);
  double reduce(const std::string& what, bool gradients = false);
  bool bf16_range(size_t lo, size_t hi) const { return m_fused16 && hi <= m_param_count; }
  mpi::Allreduce::Ticket start_reduce(size_t lo, size_t hi, const std::string& what);
  void finish_reduce(size_t lo, size_t hi);
  void sum_learners_and_reduce(bool gradients, const std::string& what);
  bool syncs_gradients(int64_t step) const;     // ssgd, or local-sgd before start_step
  void plan_buckets();
  void reduce_gradients_overlapped(int64_t step, const std::function<void(Learner&)>& pass);
  void sync_gradients(int64_t step, float lr, bool reduced);  // ssgd
  void sync_sma(int64_t step, float lr, bool reduced);  // sma on a synchronisation step
  void start_local_phase();                     // local-sgd at start_step
  void sync_average_replicas(int64_t step);     // local-sgd on a synchronisation step
  void average_state_into_central();
  // Whether the n gradients at g (backend memory) are finite; waits for `stream`.
  bool gradients_finite(nn::Stream& stream, const float* g, size_t n, float* dev, float* host);
  // A learner's update under local steps (sma, local-sgd): unscale and check its gradients
  // first when loss scaling is on; false when the update was skipped.
  bool local_update(Learner& l, float lr, int64_t step);
  // Whether a non-finite step is dropped (fp16's loss scaling, or train.nonfinite = skip).
  bool skips_nonfinite() const { return m_options.loss_scaling.dynamic || m_options.skip_nonfinite; }
  // "the output of layer 'conv2' is NaN", "the gradient of fc1.weight is infinite": where a
  // learner's pass first went non-finite (forward order for a non-finite loss, else the
  // gradients in backward order); "" when all is finite. Reads backend memory: error path only.
  std::string locate_nonfinite(Learner& l);
  int job_learners() const { return m_options.ranks * learners(); }

 public:
  // SMA's coefficients for the job as it is now (the auto-tuner may change L).
  SmaCoefficients sma() const {
    return sma_coefficients(m_options.alpha, m_options.centre_rate, m_options.momentum, job_learners());
  }

 private:
  void phase(const char* name, int learner, double t0, double t1) const;

  nn::Backend& m_backend;
  std::function<std::unique_ptr<nn::Graph>()> m_make_graph;
  int64_t m_batch, m_label_count;
  OptimizerConfig m_optimizer_config;
  std::vector<float> m_class_weights_host;
  LearnerGroupOptions m_options;
  mpi::Allreduce& m_reducer;
  size_t m_param_count = 0, m_state_count = 0;

  std::vector<std::unique_ptr<Learner>> m_learners;
  std::unique_ptr<Pool> m_pool;
  std::unique_ptr<nn::Stream> m_stream;        // the group's: sums and central updates
  std::unique_ptr<nn::Event> m_group_event;    // the group stream's last work on the replicas;
                                               // a learner's stream waits for it before its own
  nn::Buffer m_fused_host;                     // pinned mirror of m_fused (staged reductions)
  nn::Buffer m_class_weights;                  // backend copy of the class weights (or empty)
  nn::Buffer m_fused;                          // [param_count + state_count]
  nn::Buffer m_fused16, m_fused16_host;        // bf16 gradient sums: fused[0:P) in bf16 (and its pinned mirror)
  nn::Buffer m_z, m_z_prev, m_central_state;   // sma / local-sgd central model
  std::vector<std::pair<size_t, size_t>> m_buckets;  // [lo, hi) arena ranges, last layers first
  std::unique_ptr<nn::Graph> m_eval;
  bool m_eval_current = false;
  bool m_local_started = false;                // local-sgd: past start_step
  std::unique_ptr<LossScaler> m_scaler;        // fp16's loss scale, and the steps skipped
  nn::Buffer m_norm_dev, m_norm_host;          // the group's finite check (ssgd)
  bool m_step_overflow = false;                // this step's verdict
  PhaseHook m_hook;
  double m_reduce_s = 0, m_overlapped_s = 0, m_compute_s = 0;
  int m_max_buckets_in_flight = 0;
};

}  // namespace squall::train
