// LrSchedule: DeepSpeed's schedules, evaluated in double and returned as float.
#include "zero/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "runtime/status.h"

namespace zt {

LrSchedule::LrSchedule(const SchedulerConfig& scheduler, double optimizer_lr)
    : scheduler_(scheduler), optimizer_lr_(optimizer_lr),
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
  double span =
      std::max<double>(1.0, static_cast<double>(scheduler_.total_num_steps - warmup_steps_));
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
  double span =
      static_cast<double>(std::max<int64_t>(1, scheduler_.total_num_steps - warmup_steps_));
  double progress = std::min(1.0, done / span);
  double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  double min_ratio = scheduler_.cos_min_ratio;
  return std::max(0.0, min_ratio + (1.0 - min_ratio) * cosine);
}

// OneCycle. In the cycle (step < first + second) DeepSpeed evaluates at batch iteration
// step + 1: x is the position within the triangle, rising over the first step size and falling
// over the second; with stairs, the position is floored to whole stairs. After the cycle the lr
// decays from cycle_min_lr as min / (1 + decay_lr_rate * (steps after the cycle + 1) /
// decay_step_size), or stays at cycle_min_lr when either is 0.
double LrSchedule::one_cycle_lr(int64_t step) const {
  const SchedulerConfig& s = scheduler_;
  const double first = static_cast<double>(s.cycle_first_step_size);
  const double second = static_cast<double>(s.cycle_second_step_size);
  const double total = first + second;
  if (static_cast<double>(step) < total) {
    const double iteration = static_cast<double>(step + 1);
    const double ratio = first / total;
    const double cycle = std::floor(1.0 + iteration / total);
    const double x = 1.0 + iteration / total - cycle;
    double scale;
    int64_t stairs;
    if (x <= ratio) {
      scale = x / ratio;
      stairs = s.cycle_first_stair_count;
    } else {
      scale = (x - 1.0) / (ratio - 1.0);
      stairs = s.cycle_second_stair_count;
    }
    if (stairs > 0) {
      const double in_cycle = std::fmod(iteration, total);
      const double position = in_cycle <= first
                                  ? in_cycle * static_cast<double>(stairs) / first
                                  : (total - in_cycle) * static_cast<double>(stairs) / second;
      scale = std::floor(position) / static_cast<double>(stairs);
    }
    return s.cycle_min_lr + (s.cycle_max_lr - s.cycle_min_lr) * scale;
  }
  if (s.decay_step_size == 0 || s.decay_lr_rate == 0.0) return s.cycle_min_lr;
  const double after = static_cast<double>(step) - total + 1.0;
  return s.cycle_min_lr / (1.0 + s.decay_lr_rate * after / static_cast<double>(s.decay_step_size));
}

// LRRangeTest: the lr grows linearly with (step + 1) / step_size, or in whole stairs of it.
double LrSchedule::range_test_lr(int64_t step) const {
  const SchedulerConfig& s = scheduler_;
  double interval = static_cast<double>(step + 1) / static_cast<double>(s.lr_range_test_step_size);
  if (s.lr_range_test_staircase) interval = std::floor(interval);
  return s.lr_range_test_min_lr * (1.0 + s.lr_range_test_step_rate * interval);
}

float LrSchedule::lr_at(int64_t step) const {
  ZT_ASSERT(step >= 0, "learning rate asked for step {}", step);
  const SchedulerConfig& s = scheduler_;
  double delta = s.warmup_max_lr - s.warmup_min_lr;
  switch (s.type) {
    case SchedulerType::kNone: return static_cast<float>(optimizer_lr_);
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
    case SchedulerType::kOneCycle: return static_cast<float>(one_cycle_lr(step));
    case SchedulerType::kLRRangeTest: return static_cast<float>(range_test_lr(step));
  }
  throw_internal("unknown scheduler type");
}

}  // namespace zt
