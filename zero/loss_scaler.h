// LossScaler: the fp16 loss scale, updated once per optimizer step from the overflow flag that all
// ranks agreed on, with DeepSpeed's semantics (deepspeed/runtime/fp16/loss_scaler.py: LossScaler
// for a static scale, DynamicLossScaler.update_scale for a dynamic one). Pure arithmetic on a few
// numbers: no tensors, no communication, no logging; the engine logs from last_update().
// Not here: detecting the overflow, the all-reduce that agrees on it, unscaling the gradients,
// writing the scaler's state to a checkpoint (state() and restore() hand it over; the engine's
// checkpoint code stores it).
//
// The rules, each mirroring DeepSpeed (names in parentheses are DeepSpeed's):
//  - Static (fp16.loss_scale > 0; DeepSpeed's LossScaler): the scale is loss_scale forever.
//    update_scale is a no-op in DeepSpeed, but the ZeRO optimizers still check fp16 gradients
//    for overflow and skip the step, so update() still returns true on overflow and counts it.
//  - Dynamic, start: scale 2^initial_scale_power (init_scale), hysteresis left = hysteresis
//    (cur_hysteresis = delayed_shift), no clean steps.
//  - Overflow (the step is skipped; the clean streak resets to 0: last_overflow_iter = cur_iter):
//      * hysteresis left > 1: hysteresis left -= 1, scale kept.
//      * hysteresis left == 1 and scale > min_loss_scale: scale = max(scale / 2, min_loss_scale)
//        (scale_factor 2). Hysteresis is NOT refilled by a decrease: it stays at 1, so until it is
//        refilled every further overflow halves the scale again.
//      * hysteresis left == 1 and scale == min_loss_scale: DeepSpeed raises ("Current loss scale
//        already at minimum", raise_error_at_min_scale, default true) before changing any state.
//        AtMinScale::kThrow does the same (zt::Error, kInput, state untouched);
//        AtMinScale::kKeep is DeepSpeed's raise_error_at_min_scale=false: skip, keep the minimum.
//  - Clean step (no overflow):
//      * consecutive_hysteresis true: hysteresis left = hysteresis on EVERY clean step.
//      * the scale doubles when the clean streak BEFORE this step (stable_interval =
//        cur_iter - last_overflow_iter - 1) is a positive multiple of loss_scale_window. So after
//        an overflow (or from the start) the scale grows on the (window + 1)-th consecutive clean
//        step, and then on every window-th clean step after that growth (the streak is not reset
//        by growth). With consecutive_hysteresis false, hysteresis left is refilled only here,
//        when the scale grows.
//      * then the clean streak += 1.
// There is no maximum scale (DeepSpeed has none).
// Tests: tests/zero/loss_scaler_test.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config.h"

namespace zt {

// What one update() did. Exactly one per optimizer step.
enum class LossScaleUpdate {
  kClean,              // no overflow; scale unchanged
  kGrown,              // no overflow; scale doubled
  kSkippedStatic,      // overflow; static scaler, scale unchanged
  kSkippedHysteresis,  // overflow; one unit of hysteresis spent, scale unchanged
  kSkippedDecreased,   // overflow; scale halved (clamped at min_loss_scale)
  kSkippedAtMinimum,   // overflow; already at min_loss_scale with hysteresis spent (kKeep only)
};

struct LossScalerEvent {
  LossScaleUpdate kind = LossScaleUpdate::kClean;
  double scale_before = 0.0;  // the scale the step's loss was multiplied by
  double scale_after = 0.0;   // the scale for the next step
  int hysteresis_left = 0;    // after the update
  int64_t clean_steps = 0;    // after the update

  bool skipped() const;
  // One line for the engine's log, e.g. "fp16 overflow, step skipped: loss scale 65536 -> 32768".
  std::string describe() const;
};

// Totals for a metrics summary.
struct LossScalerCounters {
  int64_t steps = 0;          // update() calls that returned
  int64_t skipped_steps = 0;  // of which overflowed
  int64_t scale_decreases = 0;
  int64_t scale_increases = 0;
};

// What a checkpoint keeps of a scaler: with the same config, restore(state()) continues exactly
// as the scaler would have (last_update() aside: it describes the step before).
struct LossScalerState {
  double scale = 1.0;
  int hysteresis_left = 1;
  int64_t clean_steps = 0;
  LossScalerCounters counters;
};

class LossScaler {
 public:
  // What an overflow does when the scale is already min_loss_scale and hysteresis is spent.
  enum class AtMinScale {
    kThrow,  // DeepSpeed's default (raise_error_at_min_scale=true): training cannot go on
    kKeep,   // raise_error_at_min_scale=false: skip the step, keep the minimum scale
  };

  // Static when config.loss_scale > 0, else dynamic. Throws kInput for values parse_config
  // rejects (loss_scale < 0, loss_scale_window < 1, hysteresis < 1, min_loss_scale <= 0,
  // initial_scale_power outside [0, 63]) and for a dynamic initial scale below min_loss_scale
  // (DeepSpeed would then RAISE the scale to the minimum on the first overflow).
  explicit LossScaler(const Fp16Config& config, AtMinScale at_min = AtMinScale::kThrow);

  // The scale to multiply the next step's loss by. Kept in double (DeepSpeed's Python float);
  // dynamic scales are 2^k or min_loss_scale * 2^k, exact in float.
  float scale() const { return static_cast<float>(scale_); }
  bool dynamic() const { return dynamic_; }

  // Call once per optimizer step with the overflow flag agreed across all ranks. Returns true
  // when the step must be skipped (overflow). Throws kInput under AtMinScale::kThrow as described
  // above, leaving every state and counter as it was.
  bool update(bool overflow);

  // Overflows the scaler can still absorb (counting the one that halves) before the next
  // decrease; in [1, hysteresis]. A static scaler reports the configured hysteresis, unused.
  int hysteresis_left() const { return hysteresis_left_; }
  // Consecutive clean steps since the last overflow (or construction). Growth does not reset
  // it: DeepSpeed grows when it is a positive multiple of loss_scale_window before a clean step.
  int64_t clean_steps() const { return clean_steps_; }
  // The last update(); before the first one, kClean at the initial scale.
  const LossScalerEvent& last_update() const { return last_update_; }
  const LossScalerCounters& counters() const { return counters_; }

  LossScalerState state() const;
  // Continues from a checkpoint's state. A static scaler keeps its configured scale (only the
  // counters are taken); hysteresis left is clamped to [1, hysteresis] (the config may have
  // changed). kInput for a scale that is not finite and > 0, or negative counts.
  void restore(const LossScalerState& state);

 private:
  bool dynamic_;
  AtMinScale at_min_;
  int hysteresis_;  // the refill value (DeepSpeed's delayed_shift)
  int64_t window_;
  bool consecutive_hysteresis_;
  double min_scale_;
  double scale_;
  int hysteresis_left_;
  int64_t clean_steps_ = 0;
  LossScalerEvent last_update_;
  LossScalerCounters counters_;
};

}  // namespace zt
