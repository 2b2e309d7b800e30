// LossScaler: DeepSpeed's static and dynamic fp16 loss scaling as a small state machine; the
// rules and their DeepSpeed sources are listed in loss_scaler.h.
#include "zero/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/status.h"

namespace zt {

bool LossScalerEvent::skipped() const {
  return kind != LossScaleUpdate::kClean && kind != LossScaleUpdate::kGrown;
}

std::string LossScalerEvent::describe() const {
  switch (kind) {
    case LossScaleUpdate::kClean: return fmt::format("loss scale {}", scale_after);
    case LossScaleUpdate::kGrown:
      return fmt::format("loss scale {} -> {} after {} clean steps", scale_before, scale_after,
                         clean_steps - 1);
    case LossScaleUpdate::kSkippedStatic:
      return fmt::format("fp16 overflow, step skipped: static loss scale {}", scale_after);
    case LossScaleUpdate::kSkippedHysteresis:
      return fmt::format("fp16 overflow, step skipped: loss scale kept at {}, hysteresis {} left",
                         scale_after, hysteresis_left);
    case LossScaleUpdate::kSkippedDecreased:
      return fmt::format("fp16 overflow, step skipped: loss scale {} -> {}", scale_before,
                         scale_after);
    case LossScaleUpdate::kSkippedAtMinimum:
      return fmt::format("fp16 overflow, step skipped: loss scale kept at the minimum {}",
                         scale_after);
  }
  return "unknown loss scale update";
}

LossScaler::LossScaler(const Fp16Config& config, AtMinScale at_min)
    : dynamic_(config.loss_scale == 0.0), at_min_(at_min), hysteresis_(config.hysteresis),
      window_(config.loss_scale_window), consecutive_hysteresis_(config.consecutive_hysteresis),
      min_scale_(config.min_loss_scale), scale_(config.loss_scale),
      hysteresis_left_(config.hysteresis) {
  if (!(config.loss_scale >= 0.0) || !std::isfinite(config.loss_scale)) {
    throw_input(fmt::format("fp16.loss_scale must be 0 (dynamic) or a finite scale > 0; got {}",
                            config.loss_scale));
  }
  if (dynamic_) {
    if (config.loss_scale_window < 1) {
      throw_input(
          fmt::format("fp16.loss_scale_window must be >= 1; got {}", config.loss_scale_window));
    }
    if (config.hysteresis < 1) {
      throw_input(fmt::format("fp16.hysteresis must be >= 1; got {}", config.hysteresis));
    }
    if (!(config.min_loss_scale > 0.0) || !std::isfinite(config.min_loss_scale)) {
      throw_input(fmt::format("fp16.min_loss_scale must be a finite value > 0; got {}",
                              config.min_loss_scale));
    }
    if (config.initial_scale_power < 0 || config.initial_scale_power > 63) {
      throw_input(fmt::format("fp16.initial_scale_power must be in [0, 63]; got {}",
                              config.initial_scale_power));
    }
    scale_ = std::ldexp(1.0, config.initial_scale_power);
    if (scale_ < min_scale_) {
      throw_input(fmt::format(
          "fp16.min_loss_scale ({}) exceeds the initial scale 2^initial_scale_power ({}); lower "
          "min_loss_scale or raise initial_scale_power",
          min_scale_, scale_));
    }
  }
  last_update_ = {LossScaleUpdate::kClean, scale_, scale_, hysteresis_left_, 0};
}

bool LossScaler::update(bool overflow) {
  LossScalerEvent event{LossScaleUpdate::kClean, scale_, scale_, hysteresis_left_, clean_steps_};
  if (overflow) {
    if (!dynamic_) {
      event.kind = LossScaleUpdate::kSkippedStatic;
    } else if (hysteresis_left_ > 1) {
      event.kind = LossScaleUpdate::kSkippedHysteresis;
      --hysteresis_left_;
    } else if (scale_ == min_scale_) {
      // Checked before any state changes, as DeepSpeed raises before touching its state.
      if (at_min_ == AtMinScale::kThrow) {
        throw_input(fmt::format(
            "fp16 gradients overflowed at the minimum loss scale {} (fp16.min_loss_scale) after "
            "{} steps; training cannot continue: lower the learning rate, lower "
            "fp16.min_loss_scale, or train in bf16",
            min_scale_, counters_.steps));
      }
      event.kind = LossScaleUpdate::kSkippedAtMinimum;
    } else {
      event.kind = LossScaleUpdate::kSkippedDecreased;
      scale_ = std::max(scale_ / 2.0, min_scale_);
      ++counters_.scale_decreases;
    }
    clean_steps_ = 0;
    ++counters_.skipped_steps;
  } else {
    if (dynamic_) {
      if (consecutive_hysteresis_) hysteresis_left_ = hysteresis_;
      if (clean_steps_ > 0 && clean_steps_ % window_ == 0) {
        event.kind = LossScaleUpdate::kGrown;
        if (!consecutive_hysteresis_) hysteresis_left_ = hysteresis_;
        scale_ *= 2.0;
        ++counters_.scale_increases;
      }
    }
    ++clean_steps_;
  }
  ++counters_.steps;
  event.scale_after = scale_;
  event.hysteresis_left = hysteresis_left_;
  event.clean_steps = clean_steps_;
  last_update_ = event;
  return overflow;
}

LossScalerState LossScaler::state() const {
  return LossScalerState{scale_, hysteresis_left_, clean_steps_, counters_};
}

void LossScaler::restore(const LossScalerState& state) {
  if (!(state.scale > 0.0) || !std::isfinite(state.scale))
    throw_input(
        fmt::format("loss scaler state: scale must be finite and > 0; got {}", state.scale));
  const LossScalerCounters& c = state.counters;
  if (state.clean_steps < 0 || c.steps < 0 || c.skipped_steps < 0 || c.scale_decreases < 0 ||
      c.scale_increases < 0)
    throw_input("loss scaler state: negative step counts");
  if (dynamic_) scale_ = std::max(state.scale, min_scale_);
  hysteresis_left_ = std::clamp(state.hysteresis_left, 1, std::max(hysteresis_, 1));
  clean_steps_ = state.clean_steps;
  counters_ = c;
  last_update_ =
      LossScalerEvent{LossScaleUpdate::kClean, scale_, scale_, hysteresis_left_, clean_steps_};
}

}  // namespace zt
