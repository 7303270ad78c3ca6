#include "src/train/batch_feed.hpp"

#include <utility>

#include "src/core/error.hpp"

namespace squall::train {

BatchFeed::BatchFeed(input::Loader& loader, const data::SphereAugment& augment, const nn::Shape& sample, uint64_t seed,
                     int rank, bool lookahead)
    : m_loader(loader), m_augment(augment), m_sample(sample), m_seed(seed), m_rank(rank), m_lookahead(lookahead) {
  // A roll in longitude moves columns in from the far side of the whole grid, and a flip swaps
  // the rows of the north and south ends: neither can be done to one rank's window of a sample.
  if (m_loader.window() && m_augment.any()) {
    const std::string keys = m_augment.roll && m_augment.flip ? "data.augment_roll and data.augment_flip"
                             : m_augment.roll                 ? "data.augment_roll"
                                                              : "data.augment_flip";
    throw Error(keys + " augment whole samples, but with parallel.spatial each rank reads only its window (" +
                data::window_text(*m_loader.window()) + ") of each sample: turn " + keys +
                " off, or train without parallel.spatial");
  }
}

BatchFeed::~BatchFeed() { release_all(); }

void BatchFeed::fill(std::vector<const input::Batch*>& held, std::vector<parallel::LearnerBatch>& inputs, int learners,
                     int64_t epoch, int64_t taken, int64_t batches_per_epoch, int64_t step) {
  held.clear();
  inputs.clear();
  for (int j = 0; j < learners; ++j) {
    const input::Batch* data = m_loader.next();
    if (data == nullptr)
      throw Error("loader: epoch " + std::to_string(epoch) + " ended after " + std::to_string(taken + j) + " of " +
                  std::to_string(batches_per_epoch) + " batches");
    // Each sample's draw depends on the step the batch is for, so a resumed run draws alike.
    if (m_augment.any())
      data::augment_batch(m_augment, data->images, data->labels, data->size, m_sample.c(), m_sample.h(), m_sample.w(),
                    m_seed, m_rank, j, step);
    held.push_back(data);
    inputs.push_back({data->images, data->labels});
  }
}

const std::vector<parallel::LearnerBatch>& BatchFeed::take(const StepPlan& plan, int64_t epoch, int64_t used,
                                                           int64_t step) {
  if (!m_next_held.empty()) {  // taken during the step before
    std::swap(m_held, m_next_held);
    std::swap(m_inputs, m_next_inputs);
    m_next_held.clear();
    m_next_inputs.clear();
  } else {
    fill(m_held, m_inputs, plan.learners, epoch, used - plan.learners, plan.batches_per_epoch, step);
  }
  // The next step's batches, within this epoch, for the device to copy during this step.
  if (m_lookahead && epoch_has_step(plan, used) && step + 1 < plan.total_steps)
    fill(m_next_held, m_next_inputs, plan.learners, epoch, used, plan.batches_per_epoch, step + 1);
  return m_inputs;
}

void BatchFeed::release_step() {
  for (const input::Batch* b : m_held) m_loader.release(b);
  m_held.clear();
  m_inputs.clear();
}

void BatchFeed::release_all() {
  release_step();
  for (const input::Batch* b : m_next_held) m_loader.release(b);
  m_next_held.clear();
  m_next_inputs.clear();
}

}  // namespace squall::train
