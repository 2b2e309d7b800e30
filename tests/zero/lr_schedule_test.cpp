// Tests for zero/lr_schedule: each DeepSpeed scheduler (warm-up types, OneCycle with and without
// stairs and decay, LRRangeTest) at chosen steps, against
// the formulas of deepspeed/runtime/lr_schedules.py written out by hand here, including the edge
// cases (warmup_num_steps below 2, steps past total_num_steps, total below warm-up).
#include "zero/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "runtime/status.h"

namespace zt {
namespace {

constexpr double kPi = std::numbers::pi;

SchedulerConfig warmup(SchedulerType type, WarmupType warmup_type, int64_t warmup_steps,
                       int64_t total_steps = 0) {
  SchedulerConfig s;
  s.type = type;
  s.warmup_type = warmup_type;
  s.warmup_num_steps = warmup_steps;
  s.total_num_steps = total_steps;
  s.warmup_min_lr = 1e-5;
  s.warmup_max_lr = 1e-3;
  return s;
}

void expect_lr(const LrSchedule& schedule, int64_t step, double expected) {
  EXPECT_FLOAT_EQ(schedule.lr_at(step), static_cast<float>(expected)) << "step " << step;
}

TEST(LrSchedule, NoSchedulerIsConstant) {
  LrSchedule schedule(SchedulerConfig{}, 3e-4);
  for (int64_t step : {0, 1, 100, 1000000}) expect_lr(schedule, step, 3e-4);
}

TEST(LrSchedule, WarmupLRLog) {
  LrSchedule schedule(warmup(SchedulerType::kWarmupLR, WarmupType::kLog, 10), 0.5);
  const double min = 1e-5, delta = 1e-3 - 1e-5;
  expect_lr(schedule, 0, min);  // log(1) = 0
  expect_lr(schedule, 1, min + delta * std::log(2.0) / std::log(10.0));
  expect_lr(schedule, 4, min + delta * std::log(5.0) / std::log(10.0));
  expect_lr(schedule, 9, min + delta * std::log(10.0) / std::log(10.0));
  expect_lr(schedule, 10, 1e-3);
  expect_lr(schedule, 100000, 1e-3);  // no decay: stays at the peak
}

TEST(LrSchedule, WarmupLRLinear) {
  LrSchedule schedule(warmup(SchedulerType::kWarmupLR, WarmupType::kLinear, 10), 0.5);
  const double min = 1e-5, delta = 1e-3 - 1e-5;
  expect_lr(schedule, 0, min);
  expect_lr(schedule, 5, min + delta * 0.5);
  expect_lr(schedule, 9, min + delta * 0.9);
  expect_lr(schedule, 10, 1e-3);
}

TEST(LrSchedule, WarmupOfOneStepIsTwoAsDeepSpeed) {
  // DeepSpeed: self.warmup_num_steps = max(2, warmup_num_steps).
  LrSchedule linear(warmup(SchedulerType::kWarmupLR, WarmupType::kLinear, 1), 0.5);
  const double min = 1e-5, delta = 1e-3 - 1e-5;
  expect_lr(linear, 0, min);
  expect_lr(linear, 1, min + delta * 0.5);
  expect_lr(linear, 2, 1e-3);
  LrSchedule log(warmup(SchedulerType::kWarmupLR, WarmupType::kLog, 1), 0.5);
  expect_lr(log, 0, min);
  expect_lr(log, 1, min + delta * std::log(2.0) / std::log(2.0));
}

TEST(LrSchedule, WarmupDecayLR) {
  LrSchedule schedule(warmup(SchedulerType::kWarmupDecayLR, WarmupType::kLinear, 10, 110), 0.5);
  const double min = 1e-5, delta = 1e-3 - 1e-5;
  expect_lr(schedule, 5, min + delta * 0.5);             // warm-up
  expect_lr(schedule, 10, min + delta * 100.0 / 100.0);  // (total - step) / (total - warmup)
  expect_lr(schedule, 35, min + delta * 75.0 / 100.0);
  expect_lr(schedule, 60, min + delta * 50.0 / 100.0);
  expect_lr(schedule, 109, min + delta * 1.0 / 100.0);
  expect_lr(schedule, 110, min);
  expect_lr(schedule, 500, min);  // max(0, negative) past the end
}

TEST(LrSchedule, WarmupDecayLRLogWarmup) {
  LrSchedule schedule(warmup(SchedulerType::kWarmupDecayLR, WarmupType::kLog, 10, 110), 0.5);
  const double min = 1e-5, delta = 1e-3 - 1e-5;
  expect_lr(schedule, 3, min + delta * std::log(4.0) / std::log(10.0));
  expect_lr(schedule, 20, min + delta * 90.0 / 100.0);
}

TEST(LrSchedule, WarmupDecayLRTotalBelowWarmup) {
  // total - warmup < 1: the span is max(1, total - warmup) = 1, and the gamma clamps at 0.
  LrSchedule schedule(warmup(SchedulerType::kWarmupDecayLR, WarmupType::kLinear, 10, 5), 0.5);
  expect_lr(schedule, 10, 1e-5);
}

SchedulerConfig cosine(WarmupType warmup_type, int64_t warmup_steps, int64_t total_steps) {
  SchedulerConfig s;
  s.type = SchedulerType::kWarmupCosineLR;
  s.warmup_type = warmup_type;
  s.warmup_num_steps = warmup_steps;
  s.total_num_steps = total_steps;
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.01;
  return s;
}

// cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * progress)) / 2
double cosine_ratio(double progress) { return 0.01 + 0.99 * 0.5 * (1 + std::cos(kPi * progress)); }

TEST(LrSchedule, WarmupCosineLRLinear) {
  const double lr = 6e-4;
  LrSchedule schedule(cosine(WarmupType::kLinear, 10, 110), lr);
  expect_lr(schedule, 0, lr * 0.1);
  expect_lr(schedule, 5, lr * (0.1 + 0.5 * 0.9));
  expect_lr(schedule, 9, lr * (0.1 + 0.9 * 0.9));
  // After warm-up DeepSpeed counts step - warmup + 1 of total - warmup.
  expect_lr(schedule, 10, lr * cosine_ratio(1.0 / 100.0));
  expect_lr(schedule, 59, lr * cosine_ratio(0.5));
  expect_lr(schedule, 84, lr * cosine_ratio(0.75));
  expect_lr(schedule, 109, lr * 0.01);
  expect_lr(schedule, 110, lr * 0.01);   // progress clamps at 1
  expect_lr(schedule, 5000, lr * 0.01);  // no oscillation back up
}

TEST(LrSchedule, WarmupCosineLRLog) {
  const double lr = 1e-3;
  LrSchedule schedule(cosine(WarmupType::kLog, 10, 110), lr);
  expect_lr(schedule, 0, lr * 0.1);
  expect_lr(schedule, 3, lr * (0.1 + 0.9 * std::log(4.0) / std::log(10.0)));
  expect_lr(schedule, 34, lr * cosine_ratio(25.0 / 100.0));
}

TEST(LrSchedule, WarmupCosineLRTotalAtOrBelowWarmup) {
  const double lr = 1e-3;
  LrSchedule schedule(cosine(WarmupType::kLinear, 10, 10), lr);
  expect_lr(schedule, 10, lr * 0.01);
  expect_lr(schedule, 11, lr * 0.01);
}

// OneCycle and LRRangeTest, hand-computed from DeepSpeed's formulas: in the cycle the position
// is x = 1 + (step + 1) / total - floor(1 + (step + 1) / total); rising, scale = x / ratio,
// falling, scale = (x - 1) / (ratio - 1), ratio = first / total.
SchedulerConfig one_cycle(int64_t first, int64_t second) {
  SchedulerConfig s;
  s.type = SchedulerType::kOneCycle;
  s.cycle_min_lr = 0.001;
  s.cycle_max_lr = 0.01;
  s.cycle_first_step_size = first;
  s.cycle_second_step_size = second;
  s.cycle_first_stair_count = 0;
  s.cycle_second_stair_count = 0;
  return s;
}

TEST(LrSchedule, OneCycleSymmetric) {
  LrSchedule schedule(one_cycle(4, 4), 0.5);
  expect_lr(schedule, 0, 0.001 + 0.009 * 0.25);  // x = 1/8, ratio 1/2
  expect_lr(schedule, 1, 0.001 + 0.009 * 0.5);
  expect_lr(schedule, 3, 0.01);                 // x = 1/2: the peak
  expect_lr(schedule, 5, 0.001 + 0.009 * 0.5);  // x = 3/4: (3/4 - 1) / (1/2 - 1)
  expect_lr(schedule, 7, 0.001);                // x = 0: the cycle ends at cycle_min_lr
  expect_lr(schedule, 8, 0.001);                // no decay configured
  expect_lr(schedule, 1000, 0.001);
}

TEST(LrSchedule, OneCycleAsymmetric) {
  LrSchedule schedule(one_cycle(2, 6), 0.5);            // ratio 1/4
  expect_lr(schedule, 0, 0.001 + 0.009 * 0.5);          // x = 1/8
  expect_lr(schedule, 1, 0.01);                         // x = 1/4
  expect_lr(schedule, 4, 0.001 + 0.009 * 0.5);          // x = 5/8: (5/8 - 1) / (1/4 - 1) = 1/2
  expect_lr(schedule, 6, 0.001 + 0.009 * (1.0 / 6.0));  // x = 7/8: (1/8) / (3/4)
}

TEST(LrSchedule, OneCycleStairs) {
  SchedulerConfig s = one_cycle(4, 4);
  s.cycle_first_stair_count = 2;
  s.cycle_second_stair_count = 2;
  LrSchedule schedule(s, 0.5);
  expect_lr(schedule, 0, 0.001);                // position 1 * 2 / 4 = 0.5 -> stair 0
  expect_lr(schedule, 1, 0.001 + 0.009 * 0.5);  // position 1 -> stair 1 of 2
  expect_lr(schedule, 3, 0.01);                 // position 2
  expect_lr(schedule, 4, 0.001 + 0.009 * 0.5);  // falling: (8 - 5) * 2 / 4 = 1.5 -> 1
  expect_lr(schedule, 6, 0.001);                // (8 - 7) * 2 / 4 = 0.5 -> 0
}

TEST(LrSchedule, OneCycleDecayAfterTheCycle) {
  SchedulerConfig s = one_cycle(4, 4);
  s.decay_step_size = 2;
  s.decay_lr_rate = 0.5;
  LrSchedule schedule(s, 0.5);
  expect_lr(schedule, 7, 0.001);                        // still in the cycle
  expect_lr(schedule, 8, 0.001 / (1 + 0.5 * 1 / 2.0));  // 1 step after the cycle
  expect_lr(schedule, 11, 0.001 / (1 + 0.5 * 4 / 2.0));
  s.decay_lr_rate = 0.0;  // a rate of 0 is no decay, as in DeepSpeed
  expect_lr(LrSchedule(s, 0.5), 11, 0.001);
}

TEST(LrSchedule, LRRangeTest) {
  SchedulerConfig s;
  s.type = SchedulerType::kLRRangeTest;
  s.lr_range_test_min_lr = 0.001;
  s.lr_range_test_step_size = 10;
  s.lr_range_test_step_rate = 1.0;
  LrSchedule continuous(s, 0.5);
  expect_lr(continuous, 0, 0.001 * 1.1);  // (0 + 1) / 10
  expect_lr(continuous, 9, 0.002);
  expect_lr(continuous, 29, 0.004);
  s.lr_range_test_staircase = true;
  s.lr_range_test_step_rate = 2.0;
  LrSchedule stairs(s, 0.5);
  expect_lr(stairs, 8, 0.001);        // floor(0.9) = 0
  expect_lr(stairs, 9, 0.001 * 3.0);  // floor(1.0) = 1: 1 + 2 * 1
  expect_lr(stairs, 19, 0.001 * 5.0);
}

TEST(LrSchedule, OneCycleFromParsedConfigTakesDeepSpeedDefaults) {
  nlohmann::json j = {
      {"train_micro_batch_size_per_gpu", 1},
      {"scheduler",
       {{"type", "OneCycle"},
        {"params",
         {{"cycle_min_lr", 0.001},
          {"cycle_max_lr", 0.01},
          {"cycle_first_step_size", 4},
          {"cycle_first_stair_count", 2},
          {"cycle_momentum", false}}}}},
      {"zt", {{"model", "gpt2-tiny"}, {"seq_len", 8}, {"train_data", "t.bin"}, {"steps", 10}}}};
  Config c = parse_config(j, "configs/x.json", 1);
  EXPECT_EQ(c.scheduler.cycle_second_step_size, 4);    // defaults to the first
  EXPECT_EQ(c.scheduler.cycle_second_stair_count, 2);  // defaults to the first
  EXPECT_TRUE(c.notes.empty());                        // cycle_momentum false: nothing to note
  LrSchedule schedule(c.scheduler, c.optimizer.lr);
  expect_lr(schedule, 1, 0.001 + 0.009 * 0.5);
  expect_lr(schedule, 3, 0.01);
}

TEST(LrSchedule, BuiltFromParsedConfig) {
  nlohmann::json j = {
      {"train_micro_batch_size_per_gpu", 1},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 2e-3}}}}},
      {"scheduler",
       {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 4}, {"warmup_type", "linear"}}}}},
      {"zt", {{"model", "gpt2-tiny"}, {"seq_len", 8}, {"train_data", "t.bin"}, {"steps", 10}}}};
  Config c = parse_config(j, "configs/x.json", 1);
  LrSchedule schedule(c.scheduler, c.optimizer.lr);
  expect_lr(schedule, 0, 0.0);         // warmup_min_lr defaults to 0
  expect_lr(schedule, 2, 2e-3 * 0.5);  // WarmupLR peaks at the optimizer's lr by default
  expect_lr(schedule, 4, 2e-3);
}

TEST(LrSchedule, NegativeStepIsAnInternalError) {
  LrSchedule schedule(SchedulerConfig{}, 1e-3);
  try {
    schedule.lr_at(-1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
}

}  // namespace
}  // namespace zt
