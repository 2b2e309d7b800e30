// LrSchedule: the learning rate at each optimizer step, from the scheduler config and the
// optimizer's lr, with DeepSpeed's formulas (deepspeed/runtime/lr_schedules.py: WarmupLR,
// WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest). Pure arithmetic: no state, no
// allocation, no communication. OneCycle's momentum cycling is not applied (the engine's betas
// are fixed; runtime/config notes it).
// Tests: tests/zero/lr_schedule_test.cpp.
#pragma once

#include <cstdint>

#include "runtime/config.h"

namespace zt {

class LrSchedule {
 public:
  // No scheduler (SchedulerType::kNone): the optimizer's lr at every step.
  LrSchedule(const SchedulerConfig& scheduler, double optimizer_lr);

  // The lr used by optimizer step `step`, counted from 0 (DeepSpeed's last_batch_iteration after
  // the scheduler's first step()). step >= 0.
  float lr_at(int64_t step) const;

 private:
  // Warm-up progress in [0, 1) for step < warmup_steps_: log(step + 1) / log(warmup) or
  // step / warmup.
  double warmup_gamma(int64_t step) const;
  double warmup_decay_gamma(int64_t step) const;
  double cosine_ratio(int64_t step) const;
  double one_cycle_lr(int64_t step) const;
  double range_test_lr(int64_t step) const;

  SchedulerConfig scheduler_;
  double optimizer_lr_;
  int64_t warmup_steps_;  // max(2, warmup_num_steps), as DeepSpeed: log(1) would divide by zero
};

}  // namespace zt
