#include "src/optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>

#include "src/core/error.hpp"

namespace squall::optim {

double scaled_peak_lr(const ScheduleConfig& config, double base_lr, double update_batch, double factor) {
  if (!config.scale_lr_with_batch) return base_lr * factor;
  if (config.reference_batch <= 0) throw Error("schedule.reference_batch must be > 0");
  return base_lr * update_batch / static_cast<double>(config.reference_batch) * factor;
}

Schedule::Schedule(const ScheduleConfig& config, double peak_lr, int64_t steps_per_epoch)
    : m_config(config), m_peak(peak_lr) {
  const bool epochs = config.milestone_unit == MilestoneUnit::epochs;
  if (epochs && steps_per_epoch <= 0)
    throw Error("schedule.milestone_unit = \"epochs\" needs a known number of steps per epoch");
  for (const int64_t m : config.milestones) m_milestones.push_back(epochs ? m * steps_per_epoch : m);
}

double Schedule::lr_at(int64_t step, int64_t total_steps) const {
  const int64_t warmup = m_config.warmup_steps;
  if (step < warmup) return m_peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  switch (m_config.kind) {
    case ScheduleKind::multistep: {
      const auto passed = std::upper_bound(m_milestones.begin(), m_milestones.end(), step) - m_milestones.begin();
      return m_peak * std::pow(m_config.gamma, static_cast<double>(passed));
    }
    case ScheduleKind::cosine: {
      const int64_t span = total_steps - warmup;
      const double t =
          span > 0 ? std::clamp(static_cast<double>(step - warmup) / static_cast<double>(span), 0.0, 1.0) : 1.0;
      return m_config.min_lr + (m_peak - m_config.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
    }
    case ScheduleKind::constant: break;
  }
  return m_peak;
}

double Schedule::lr_in_segment(int64_t step, int64_t segment_start, int64_t total_steps) const {
  return lr_at(std::max<int64_t>(0, step - segment_start), total_steps - segment_start);
}

namespace {
std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", v);
  return text;
}
}  // namespace

std::string Schedule::describe(int64_t steps) const {
  const int64_t warmup = std::min(m_config.warmup_steps, steps);
  std::string text = warmup > 0 ? "warm-up " + std::to_string(warmup) + " step(s) to " + number(m_peak) + ", then " : "";
  switch (m_config.kind) {
    case ScheduleKind::multistep: {
      text += number(m_peak);
      std::string at;
      for (const int64_t m : m_milestones)
        if (m < steps) at += (at.empty() ? "" : ", ") + std::to_string(m);
      return text + (at.empty() ? " throughout" : ", x " + number(m_config.gamma) + " at step(s) " + at);
    }
    case ScheduleKind::cosine:
      return text + "cosine " + (warmup > 0 ? std::string() : "from " + number(m_peak) + " ") + "to " +
             number(m_config.min_lr);
    case ScheduleKind::constant: break;
  }
  return text + (warmup > 0 ? "constant" : "constant " + number(m_peak));
}

}  // namespace squall::optim
