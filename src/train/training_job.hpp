#pragma once
// What a training run is made of before its first step (docs/design.md, "The trainer"): the
// data and the plan of steps, then the backend, the job's allreduce, the learner group, the
// schedule and the loader. The loop (trainer.cpp) drives them; this file builds them, checks
// that they fit together and says why when they do not.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/input/loader.hpp"
#include "io/input/sampler.hpp"
#include "mpi/sum.hpp"
#include "mpi/topology.hpp"
#include "src/nn/backend.hpp"
#include "src/parallel/autotune.hpp"
#include "src/parallel/learners.hpp"
#include "src/data/augment.hpp"
#include "src/config/config.hpp"
#include "io/input/open_dataset.hpp"
#include "src/optim/schedule.hpp"
#include "src/train/memory_need.hpp"
#include "src/train/spatial_job.hpp"
#include "src/train/step_plan.hpp"
#include "src/train/trainer.hpp"

namespace squall::train {

// The datasets and the plan of steps: everything that reading the data decides.
struct TrainingData {
  std::unique_ptr<data::DataSource> train, test;  // the test set normalised with the training set's statistics
  int64_t n_train = 0, n_test = 0;          // the samples used (data.train_samples, data.test_samples)
  nn::ModelSpec spec;                       // the model, for this data
  std::unique_ptr<input::Sampler> sampler;     // which samples each rank reads in each epoch
  StepPlan plan;
  int max_learners = 1;                     // the auto-tuner's cap (the learner count without it)
};

// Collective-free; run it under mpi::run_agreed, since any rank may be the one whose data is
// missing. Opens both sets, checks the model against them and plans the steps; throws
// UsageError naming the config and the keys to change when they do not fit (a step larger
// than an epoch, a synchronisation period longer than the run, settings that contradict the
// run's length).
TrainingData open_training_data(const config::Config& cfg, const std::string& origin,
                                const std::vector<int>& node_of_rank);

// The plan of `data` on a job of `ranks` ranks at cfg.train.batch_size (open_training_data
// makes the first; a resume on another shape may change the batch and plan again). Throws
// UsageError as open_training_data does.
StepPlan plan_training(const config::Config& cfg, const std::string& origin, const TrainingData& data, int ranks);

// The pieces that compute, made from the config and the data.
struct TrainingDevice {
  std::unique_ptr<nn::Backend> backend;
  std::unique_ptr<nn::Stream> stream;       // the rank's own work: evaluation, checksums
  std::unique_ptr<mpi::Allreduce> allreduce;  // levels 2-4 of every sum (parallel.device_allreduce)
  // What parallel.cross_node makes of this job's nodes (mpi::cross_rule), for the log; "" when
  // the allreduce has no pipelined cross-node stage. summary.json says what ran.
  std::string cross_rule;
  // parallel.halo_exchange as used ("host" or "nccl"; "" without a split) and, where auto chose
  // host on a GPU, why.
  std::string halo_exchange, halo_why_host;
  std::unique_ptr<mpi::Allreduce> node_allreduce;  // parallel.periods' node level: this node's ranks (or null)
  double bucket_mb = 0;                     // parallel.bucket_mb as used (config::bucket_mb_for)
  std::unique_ptr<parallel::LearnerGroup> group;
  std::unique_ptr<optim::Schedule> schedule;
  // Evaluation's device buffers: a batch's labels and predictions, the class weights.
  nn::Buffer label_buf, pred_buf, weight_buf;
  int32_t* labels = nullptr;
  int32_t* predictions = nullptr;
  const float* class_weights = nullptr;
  // A device backend's loader fills pinned buffers of its own (allocate_host), so that the
  // learners copy batches to the device asynchronously without an extra host copy; the
  // buffers live here, by address, as long as the loader (declared before it, so destroyed
  // after it; on the heap, so that moving the device keeps the loader's pointer to it).
  std::unique_ptr<std::map<void*, nn::Buffer>> pinned_batches = std::make_unique<std::map<void*, nn::Buffer>>();
  std::unique_ptr<input::Loader> loader;
  data::SphereAugment augment;                    // data.augment_roll / augment_flip (off: nothing)
  std::unique_ptr<parallel::AutoTuner> tuner;
  bool lookahead = false;                   // the next step's batches copied during this step
  // What this rank needs in memory at its tile (memory_need.hpp), stated before the group is
  // built, and the limit it was checked against (run.memory_limit, the device's memory; 0: none).
  MemoryNeed memory;
  size_t memory_limit = 0;
  std::string memory_limit_from;            // "run.memory_limit", "the device's memory", or ""
  size_t rss_before_group = 0;              // this process's resident bytes before the group was built
};

// Builds the backend and everything on it, the schedule at `lr_factor` (make_schedule). Usage
// errors (a device allreduce on the CPU, bf16 sums on an allreduce that takes f32 only) name the keys.
// `spatial`: parallel.spatial's groups (their tiles placed: place_tiles); the schedule counts
// its data-parallel ranks and nodes, the learners' graphs run on its tile and the loader reads it.
TrainingDevice build_training_device(const config::Config& cfg, const std::string& origin, const RunOptions& options,
                                     const mpi::Topology& topo, const SpatialJob& spatial, const TrainingData& data,
                                     double lr_factor);

// The learning-rate schedule of a job of `ranks` ranks on `nodes` nodes at cfg.train.batch_size
// (the linear scaling rule scales by the batch one update averages over: step_plan.hpp's
// UpdateBatch), its multistep milestones in epochs of `steps_per_epoch` steps: the schedule's
// frame (StepPlan::schedule_steps_per_epoch), which a resume on another shape keeps.
// lr_factor: elastic.batch's factor since the first attempt (ElasticBatch::lr_factor); the
// schedule's rates are then the step's, scaled nowhere else.
std::unique_ptr<optim::Schedule> make_schedule(const config::Config& cfg, int ranks, int nodes,
                                               int64_t steps_per_epoch, double lr_factor);
// The batch an update averages over under cfg.parallel.algorithm.
UpdateBatch update_batch_of(parallel::Algorithm algorithm);

}  // namespace squall::train
