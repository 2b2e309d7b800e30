// Tests for zero/loss_scaler: the state machine walked step by step against expectations written
// out by hand from DeepSpeed's DynamicLossScaler.update_scale (deepspeed/runtime/fp16/
// loss_scaler.py), then checked against DeepSpeed's own formulation (cur_iter,
// last_overflow_iter) on random overflow sequences. Each walk is placed so an off-by-one in the
// window, the hysteresis or the minimum would change an expected value.
#include "zero/loss_scaler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "runtime/status.h"

namespace zt {
namespace {

using Kind = LossScaleUpdate;
constexpr bool kOverflow = true;
constexpr bool kClean = false;

Fp16Config dynamic_config(int initial_scale_power, int window, int hysteresis,
                          bool consecutive = false, double min_loss_scale = 1.0) {
  Fp16Config c;
  c.enabled = true;
  c.loss_scale = 0.0;
  c.initial_scale_power = initial_scale_power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.consecutive_hysteresis = consecutive;
  c.min_loss_scale = min_loss_scale;
  return c;
}

// One update(), then the whole visible state after it.
void step(LossScaler& scaler, bool overflow, Kind kind, double scale, int hysteresis_left,
          int64_t clean_steps) {
  double before = scaler.scale();
  EXPECT_EQ(scaler.update(overflow), overflow);
  const LossScalerEvent& e = scaler.last_update();
  EXPECT_EQ(e.kind, kind);
  EXPECT_EQ(e.skipped(), overflow);
  EXPECT_EQ(e.scale_before, before);
  EXPECT_EQ(e.scale_after, scale);
  EXPECT_EQ(scaler.scale(), static_cast<float>(scale));
  EXPECT_EQ(scaler.hysteresis_left(), hysteresis_left);
  EXPECT_EQ(e.hysteresis_left, hysteresis_left);
  EXPECT_EQ(scaler.clean_steps(), clean_steps);
  EXPECT_EQ(e.clean_steps, clean_steps);
}

void expect_counters(const LossScaler& scaler, int64_t steps, int64_t skipped, int64_t decreases,
                     int64_t increases) {
  EXPECT_EQ(scaler.counters().steps, steps);
  EXPECT_EQ(scaler.counters().skipped_steps, skipped);
  EXPECT_EQ(scaler.counters().scale_decreases, decreases);
  EXPECT_EQ(scaler.counters().scale_increases, increases);
}

TEST(LossScaler, InitialScaleIsTwoToTheInitialScalePower) {
  LossScaler defaults{Fp16Config{}};  // DeepSpeed's defaults: 2^16, window 1000, hysteresis 2
  EXPECT_TRUE(defaults.dynamic());
  EXPECT_EQ(defaults.scale(), 65536.0f);
  EXPECT_EQ(defaults.hysteresis_left(), 2);
  EXPECT_EQ(defaults.clean_steps(), 0);
  EXPECT_EQ(defaults.last_update().kind, Kind::kClean);
  EXPECT_EQ(defaults.last_update().scale_after, 65536.0);
  expect_counters(defaults, 0, 0, 0, 0);

  EXPECT_EQ(LossScaler(dynamic_config(0, 3, 1)).scale(), 1.0f);
  EXPECT_EQ(LossScaler(dynamic_config(5, 3, 1)).scale(), 32.0f);
}

// Hysteresis 2: the first overflow spends hysteresis, the second halves; the decrease does not
// refill hysteresis, so a third overflow halves again.
TEST(LossScaler, HysteresisTwoKeepsOnceThenHalvesAndStaysSpent) {
  LossScaler s(dynamic_config(4, 1000, 2));
  step(s, kOverflow, Kind::kSkippedHysteresis, 16, 1, 0);
  step(s, kOverflow, Kind::kSkippedDecreased, 8, 1, 0);
  step(s, kOverflow, Kind::kSkippedDecreased, 4, 1, 0);
  step(s, kClean, Kind::kClean, 4, 1, 1);  // no refill on a clean step without growth
  step(s, kOverflow, Kind::kSkippedDecreased, 2, 1, 0);
  expect_counters(s, 5, 4, 3, 0);
}

TEST(LossScaler, HysteresisOneHalvesOnTheFirstOverflow) {
  LossScaler s(dynamic_config(4, 1000, 1));
  EXPECT_EQ(s.hysteresis_left(), 1);
  step(s, kOverflow, Kind::kSkippedDecreased, 8, 1, 0);
}

// Hysteresis 3 at the minimum: spending hysteresis is allowed there, only a decrease is not.
TEST(LossScaler, HysteresisIsSpentEvenAtTheMinimum) {
  LossScaler s(dynamic_config(0, 1000, 3), LossScaler::AtMinScale::kThrow);
  step(s, kOverflow, Kind::kSkippedHysteresis, 1, 2, 0);
  step(s, kOverflow, Kind::kSkippedHysteresis, 1, 1, 0);
  EXPECT_THROW(s.update(kOverflow), Error);
}

// A streak of overflows with kKeep: 8 -> 4 -> 2 (the minimum), then skipped at 2 forever.
TEST(LossScaler, OverflowStreakStopsAtTheMinimumWithKeep) {
  LossScaler s(dynamic_config(3, 1000, 1, false, 2.0), LossScaler::AtMinScale::kKeep);
  step(s, kOverflow, Kind::kSkippedDecreased, 4, 1, 0);
  step(s, kOverflow, Kind::kSkippedDecreased, 2, 1, 0);
  for (int i = 0; i < 5; ++i) step(s, kOverflow, Kind::kSkippedAtMinimum, 2, 1, 0);
  expect_counters(s, 7, 7, 2, 0);
  EXPECT_EQ(s.last_update().describe(),
            "fp16 overflow, step skipped: loss scale kept at the minimum 2");
}

// A minimum that is not a power of two: the halving 4 -> 2 is clamped to 3, then DeepSpeed's
// raise at the minimum; the throw leaves every state and counter as before.
TEST(LossScaler, DecreaseIsClampedAndTheNextOverflowThrowsLeavingStateUnchanged) {
  LossScaler s(dynamic_config(3, 2, 1, false, 3.0));
  step(s, kOverflow, Kind::kSkippedDecreased, 4, 1, 0);
  step(s, kOverflow, Kind::kSkippedDecreased, 3, 1, 0);
  step(s, kClean, Kind::kClean, 3, 1, 1);
  try {
    s.update(kOverflow);
    FAIL() << "no throw at the minimum";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(e.message().find("fp16.min_loss_scale"), std::string::npos) << e.message();
  }
  EXPECT_EQ(s.scale(), 3.0f);
  EXPECT_EQ(s.clean_steps(), 1);
  EXPECT_EQ(s.last_update().kind, Kind::kClean);
  expect_counters(s, 3, 2, 2, 0);
  // The scaler is still usable: clean steps go on and grow on the (window + 1)-th.
  step(s, kClean, Kind::kClean, 3, 1, 2);
  step(s, kClean, Kind::kGrown, 6, 1, 3);
}

// Window 3 from the start: the streak before steps 1..4 is 0, 1, 2, 3, so the first growth is on
// the 4th clean step (window + 1), the next ones every 3rd clean step (7th, 10th).
TEST(LossScaler, GrowsOnTheWindowPlusFirstCleanStepThenEveryWindow) {
  LossScaler s(dynamic_config(4, 3, 2));
  step(s, kClean, Kind::kClean, 16, 2, 1);
  step(s, kClean, Kind::kClean, 16, 2, 2);
  step(s, kClean, Kind::kClean, 16, 2, 3);  // window clean steps done; not yet grown
  step(s, kClean, Kind::kGrown, 32, 2, 4);
  step(s, kClean, Kind::kClean, 32, 2, 5);
  step(s, kClean, Kind::kClean, 32, 2, 6);
  step(s, kClean, Kind::kGrown, 64, 2, 7);  // exactly window steps after the growth
  step(s, kClean, Kind::kClean, 64, 2, 8);
  step(s, kClean, Kind::kClean, 64, 2, 9);
  step(s, kClean, Kind::kGrown, 128, 2, 10);
  expect_counters(s, 10, 0, 0, 3);
  EXPECT_EQ(s.last_update().describe(), "loss scale 64 -> 128 after 9 clean steps");
}

TEST(LossScaler, WindowOneGrowsOnTheSecondCleanStepThenEveryStep) {
  LossScaler s(dynamic_config(0, 1, 1));
  step(s, kClean, Kind::kClean, 1, 1, 1);
  step(s, kClean, Kind::kGrown, 2, 1, 2);
  step(s, kClean, Kind::kGrown, 4, 1, 3);
}

// An overflow on the step that would have grown resets the streak: growth then needs window + 1
// clean steps again, counted from the overflow.
TEST(LossScaler, OverflowResetsTheCleanStreak) {
  LossScaler s(dynamic_config(4, 3, 1));
  step(s, kClean, Kind::kClean, 16, 1, 1);
  step(s, kClean, Kind::kClean, 16, 1, 2);
  step(s, kClean, Kind::kClean, 16, 1, 3);
  step(s, kOverflow, Kind::kSkippedDecreased, 8, 1, 0);  // would have been kGrown
  step(s, kClean, Kind::kClean, 8, 1, 1);
  step(s, kClean, Kind::kClean, 8, 1, 2);
  step(s, kClean, Kind::kClean, 8, 1, 3);
  step(s, kClean, Kind::kGrown, 16, 1, 4);
  // After a growth, an overflow also restarts the count from 0 (not from the growth).
  step(s, kClean, Kind::kClean, 16, 1, 5);
  step(s, kOverflow, Kind::kSkippedDecreased, 8, 1, 0);
  step(s, kClean, Kind::kClean, 8, 1, 1);
  step(s, kClean, Kind::kClean, 8, 1, 2);
  step(s, kClean, Kind::kClean, 8, 1, 3);
  step(s, kClean, Kind::kGrown, 16, 1, 4);
  expect_counters(s, 14, 2, 2, 2);
}

// consecutive_hysteresis false: clean steps do not refill hysteresis; only a growth does.
TEST(LossScaler, WithoutConsecutiveHysteresisOnlyGrowthRefills) {
  LossScaler s(dynamic_config(5, 2, 3, /*consecutive=*/false));
  step(s, kOverflow, Kind::kSkippedHysteresis, 32, 2, 0);
  step(s, kClean, Kind::kClean, 32, 2, 1);
  step(s, kOverflow, Kind::kSkippedHysteresis, 32, 1, 0);
  step(s, kClean, Kind::kClean, 32, 1, 1);
  step(s, kClean, Kind::kClean, 32, 1, 2);
  step(s, kOverflow, Kind::kSkippedDecreased, 16, 1, 0);  // no refill by the decrease
  step(s, kClean, Kind::kClean, 16, 1, 1);
  step(s, kClean, Kind::kClean, 16, 1, 2);
  step(s, kClean, Kind::kGrown, 32, 3, 3);  // refilled to 3 with the growth
  step(s, kOverflow, Kind::kSkippedHysteresis, 32, 2, 0);
  expect_counters(s, 10, 4, 1, 1);
}

// consecutive_hysteresis true: every clean step refills, so isolated overflows never decrease;
// only `hysteresis` overflows in a row do.
TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScaler s(dynamic_config(5, 1000, 2, /*consecutive=*/true));
  for (int i = 0; i < 3; ++i) {
    step(s, kOverflow, Kind::kSkippedHysteresis, 32, 1, 0);
    step(s, kClean, Kind::kClean, 32, 2, 1);
  }
  step(s, kOverflow, Kind::kSkippedHysteresis, 32, 1, 0);
  step(s, kOverflow, Kind::kSkippedDecreased, 16, 1, 0);
  step(s, kOverflow, Kind::kSkippedDecreased, 8, 1, 0);
  step(s, kClean, Kind::kClean, 8, 2, 1);
  expect_counters(s, 10, 6, 2, 0);
}

TEST(LossScaler, ConsecutiveHysteresisStillGrowsOnTheWindow) {
  LossScaler s(dynamic_config(2, 2, 2, /*consecutive=*/true));
  step(s, kOverflow, Kind::kSkippedHysteresis, 4, 1, 0);
  step(s, kClean, Kind::kClean, 4, 2, 1);
  step(s, kClean, Kind::kClean, 4, 2, 2);
  step(s, kClean, Kind::kGrown, 8, 2, 3);
}

// Static scale: update_scale is a no-op in DeepSpeed, but the overflow still skips the step.
// initial_scale_power, hysteresis and min_loss_scale play no part (0.5 is below the minimum 1).
TEST(LossScaler, StaticScaleNeverChangesButReportsSkips) {
  Fp16Config c = dynamic_config(16, 1, 1);
  c.loss_scale = 0.5;
  LossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  EXPECT_EQ(s.scale(), 0.5f);
  for (int i = 0; i < 4; ++i) step(s, kClean, Kind::kClean, 0.5, 1, i + 1);
  for (int i = 0; i < 3; ++i) step(s, kOverflow, Kind::kSkippedStatic, 0.5, 1, 0);
  for (int i = 0; i < 4; ++i) step(s, kClean, Kind::kClean, 0.5, 1, i + 1);
  expect_counters(s, 11, 3, 0, 0);
  s.update(kOverflow);
  EXPECT_EQ(s.last_update().describe(), "fp16 overflow, step skipped: static loss scale 0.5");
}

TEST(LossScaler, DescribeGivesTheNewScaleOfASkippedStep) {
  LossScaler s(dynamic_config(16, 1000, 2));
  s.update(kOverflow);
  EXPECT_EQ(s.last_update().describe(),
            "fp16 overflow, step skipped: loss scale kept at 65536, hysteresis 1 left");
  s.update(kOverflow);
  EXPECT_EQ(s.last_update().describe(), "fp16 overflow, step skipped: loss scale 65536 -> 32768");
  s.update(kClean);
  EXPECT_EQ(s.last_update().describe(), "loss scale 32768");
}

TEST(LossScaler, RejectsInvalidConfigs) {
  auto throws_input = [](const Fp16Config& c) {
    try {
      LossScaler s(c);
    } catch (const Error& e) {
      return e.kind() == ErrorKind::kInput;
    }
    return false;
  };
  Fp16Config c = dynamic_config(4, 3, 2);
  EXPECT_FALSE(throws_input(c));
  c.loss_scale_window = 0;
  EXPECT_TRUE(throws_input(c));
  c = dynamic_config(4, 3, 0);
  EXPECT_TRUE(throws_input(c));
  c = dynamic_config(4, 3, 2, false, 0.0);
  EXPECT_TRUE(throws_input(c));
  c = dynamic_config(64, 3, 2);
  EXPECT_TRUE(throws_input(c));
  c = dynamic_config(-1, 3, 2);
  EXPECT_TRUE(throws_input(c));
  c = dynamic_config(1, 3, 2, false, 4.0);  // initial 2 below the minimum 4
  EXPECT_TRUE(throws_input(c));
  c = dynamic_config(2, 3, 2, false, 4.0);  // initial equal to the minimum is fine
  EXPECT_FALSE(throws_input(c));
  c = dynamic_config(4, 3, 2);
  c.loss_scale = -1.0;
  EXPECT_TRUE(throws_input(c));
}

// DeepSpeed's formulation, written from its description: counters cur_iter and
// last_overflow_iter (start -1); growth when stable_interval = cur_iter - last_overflow_iter - 1
// is > 0 and a multiple of the window. Our clean-streak formulation must agree step by step.
struct IterationModel {
  double scale;
  int delayed_shift, hysteresis_left, window;
  bool consecutive;
  double min_scale;
  int64_t iter = 0, last_overflow_iter = -1;

  void update(bool overflow) {
    if (overflow) {
      if (hysteresis_left == 1) {
        scale = std::max(scale / 2.0, min_scale);
      } else {
        --hysteresis_left;
      }
      last_overflow_iter = iter;
    } else {
      if (consecutive) hysteresis_left = delayed_shift;
      int64_t stable_interval = iter - last_overflow_iter - 1;
      if (stable_interval > 0 && stable_interval % window == 0) {
        if (!consecutive) hysteresis_left = delayed_shift;
        scale *= 2.0;
      }
    }
    ++iter;
  }
};

TEST(LossScaler, MatchesDeepSpeedIterationFormulaOnRandomSequences) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 200; ++trial) {
    int window = 1 + static_cast<int>(rng() % 5);
    int hysteresis = 1 + static_cast<int>(rng() % 4);
    bool consecutive = rng() % 2 == 1;
    double overflow_p = 0.1 + 0.1 * static_cast<double>(rng() % 6);
    Fp16Config c = dynamic_config(20, window, hysteresis, consecutive, 0.25);
    LossScaler s(c, LossScaler::AtMinScale::kKeep);
    IterationModel m{1048576.0, hysteresis, hysteresis, window, consecutive, 0.25};
    std::bernoulli_distribution overflow_dist(overflow_p);
    for (int i = 0; i < 300; ++i) {
      bool overflow = overflow_dist(rng);
      s.update(overflow);
      m.update(overflow);
      ASSERT_EQ(s.scale(), static_cast<float>(m.scale)) << "trial " << trial << " step " << i;
      ASSERT_EQ(s.hysteresis_left(), m.hysteresis_left) << "trial " << trial << " step " << i;
      ASSERT_EQ(s.clean_steps(), m.iter - m.last_overflow_iter - 1)
          << "trial " << trial << " step " << i;
    }
  }
}

}  // namespace
}  // namespace zt
