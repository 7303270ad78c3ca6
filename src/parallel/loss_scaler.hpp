#pragma once
// fp16 training's dynamic loss scaling (docs/training.md, "Mixed precision"), and the count of
// steps a learner group skipped. The loss gradient is multiplied by the scale S so that small
// gradients survive in f16, and the weight gradients are divided by S before the update. A
// step whose gradients are not finite is skipped (no update) and S halves; after
// `growth_interval` good steps in a row S doubles (PyTorch's GradScaler rule). S lives on the
// host, for the division, and in backend memory, where the loss reads it (a captured pass
// then sees its current value). Without dynamic scaling S is 1 and only skips are counted
// (train.nonfinite = skip).
#include <cstdint>

#include "io/checkpoint/checkpoint_file.hpp"
#include "src/nn/backend.hpp"

namespace squall::parallel {

struct LossScaling {
  bool dynamic = false;
  float initial = 65536.0f;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  // Throws squall::UsageError for a non-positive initial scale or growth interval (dynamic).
  LossScaler(nn::Backend& backend, nn::Stream& stream, const LossScaling& options);

  bool dynamic() const { return m_options.dynamic; }
  float scale() const { return m_scale; }
  // S in backend memory for the loss, or null without dynamic scaling.
  const float* device_scale() const { return m_device ? m_device.data() : nullptr; }
  int64_t skipped_steps() const { return m_skipped; }

  // The end of a step: `skipped` says whether its update was dropped (non-finite gradients).
  // Counts it, and with dynamic scaling moves S; the device copy of S follows on `stream`.
  void end_step(bool skipped, nn::Stream& stream);

  // Checkpoints: "loss_scale", "good_steps", "skipped_steps".
  void save(checkpoint::CheckpointData& out) const;
  void restore(const checkpoint::CheckpointData& in, nn::Stream& stream);

 private:
  void upload(nn::Stream& stream);

  nn::Backend& m_backend;
  LossScaling m_options;
  float m_scale = 1.0f;
  nn::Buffer m_device;    // S, for the loss (dynamic only)
  int64_t m_good = 0;     // good steps in a row since S last moved
  int64_t m_skipped = 0;  // steps whose update was dropped
};

}  // namespace squall::parallel
