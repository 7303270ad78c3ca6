#include "src/parallel/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/core/error.hpp"

namespace squall::parallel {

LossScaler::LossScaler(nn::Backend& backend, nn::Stream& stream, const LossScaling& options)
    : m_backend(backend), m_options(options) {
  if (!options.dynamic) return;
  if (!(options.initial > 0.0f) || options.growth_interval < 1)
    throw UsageError("loss scaling: the initial scale must be positive and the growth interval at least 1");
  m_scale = options.initial;
  m_device = backend.allocate(1);
  upload(stream);
}

void LossScaler::upload(nn::Stream& stream) {
  if (m_device) m_backend.copy_from_host(stream, m_device.data(), &m_scale, 1);
}

void LossScaler::end_step(bool skipped, nn::Stream& stream) {
  if (skipped) ++m_skipped;
  if (!m_options.dynamic) return;
  const float before = m_scale;
  if (skipped) {
    m_good = 0;
    m_scale = std::max(m_scale * 0.5f, std::numeric_limits<float>::min());
  } else if (++m_good >= m_options.growth_interval) {
    m_good = 0;
    const float grown = m_scale * 2.0f;
    if (std::isfinite(grown)) m_scale = grown;
  }
  if (m_scale != before) upload(stream);
}

void LossScaler::save(checkpoint::CheckpointData& out) const {
  out.reals["loss_scale"] = m_scale;
  out.ints["good_steps"] = m_good;
  out.ints["skipped_steps"] = m_skipped;
}

void LossScaler::restore(const checkpoint::CheckpointData& in, nn::Stream& stream) {
  m_scale = static_cast<float>(in.real("loss_scale"));
  m_good = in.integer("good_steps");
  m_skipped = in.integer("skipped_steps");
  upload(stream);
}

}  // namespace squall::parallel
