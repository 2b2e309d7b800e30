// LrSchedule: DeepSpeed's warm-up schedules, evaluated in double and returned as float.
#include "zero/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "runtime/status.h"

namespace zt {

LrSchedule::LrSchedule(const SchedulerConfig& scheduler, double optimizer_lr)
    : scheduler_(scheduler),
      optimizer_lr_(optimizer_lr),
      warmup_steps_(std::max<int64_t>(2, scheduler.warmup_num_steps)) {}

double LrSchedule::warmup_gamma(int64_t step) const {
  if (scheduler_.warmup_type == WarmupType::kLinear) {
    return static_cast<double>(step) / static_cast<double>(warmup_steps_);
  }
  return std::log(static_cast<double>(step + 1)) / std::log(static_cast<double>(warmup_steps_));
}

// WarmupDecayLR after warm-up: linear from 1 at the end of warm-up to 0 at total_num_steps, then 0.
double LrSchedule::warmup_decay_gamma(int64_t step) const {
  double remaining = static_cast<double>(scheduler_.total_num_steps - step);
  double span = std::max<double>(1.0, static_cast<double>(scheduler_.total_num_steps - warmup_steps_));
  return std::max(0.0, remaining / span);
}

// WarmupCosineLR's ratio of the optimizer's lr. After warm-up DeepSpeed counts the first
// post-warm-up step as 1 (step - warmup + 1), and clamps progress at 1 so the ratio stays at
// cos_min_ratio past total_num_steps.
double LrSchedule::cosine_ratio(int64_t step) const {
  if (step < warmup_steps_) {
    double min_ratio = scheduler_.warmup_min_ratio;
    return min_ratio + warmup_gamma(step) * (1.0 - min_ratio);
  }
  double done = static_cast<double>(step - warmup_steps_ + 1);
  double span = static_cast<double>(std::max<int64_t>(1, scheduler_.total_num_steps - warmup_steps_));
  double progress = std::min(1.0, done / span);
  double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  double min_ratio = scheduler_.cos_min_ratio;
  return std::max(0.0, min_ratio + (1.0 - min_ratio) * cosine);
}

float LrSchedule::lr_at(int64_t step) const {
  ZT_ASSERT(step >= 0, "learning rate asked for step {}", step);
  const SchedulerConfig& s = scheduler_;
  double delta = s.warmup_max_lr - s.warmup_min_lr;
  switch (s.type) {
    case SchedulerType::kNone:
      return static_cast<float>(optimizer_lr_);
    case SchedulerType::kWarmupLR: {
      double gamma = step < warmup_steps_ ? warmup_gamma(step) : 1.0;
      return static_cast<float>(s.warmup_min_lr + delta * gamma);
    }
    case SchedulerType::kWarmupDecayLR: {
      double gamma = step < warmup_steps_ ? warmup_gamma(step) : warmup_decay_gamma(step);
      return static_cast<float>(s.warmup_min_lr + delta * gamma);
    }
    case SchedulerType::kWarmupCosineLR:
      return static_cast<float>(optimizer_lr_ * cosine_ratio(step));
  }
  throw_internal("unknown scheduler type");
}

}  // namespace zt
