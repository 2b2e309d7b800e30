// Decay ranges over flat layouts, counter-based initialisation, and the optimizer's decay rule.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/cpu/cpu_device.h"
#include "zero/optimizer.h"
#include "zero/param_init.h"

namespace zt {
namespace {

FlatLayout sample_layout() {
  return FlatLayout({ParamSpec{"w", {4, 5}, Decay::kYes, {ParamInit::Kind::kNormal, 0.02f}, 3},
                     ParamSpec{"b", {5}, Decay::kNo, {ParamInit::Kind::kOnes}},
                     ParamSpec{"v", {6}, Decay::kYes, {ParamInit::Kind::kNormal, 1.0f}}});
}

TEST(DecayRanges, SkipPaddingAndClipToTheRange) {
  FlatLayout layout = sample_layout();  // w at [0,20), b at [32,37), v at [48,54)
  auto all = decay_ranges(layout, 0, layout.numel());
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].end, 20);
  EXPECT_EQ(all[1].begin, 32);
  EXPECT_EQ(all[1].decay, Decay::kNo);
  auto part = decay_ranges(layout, 10, 35);  // a shard cutting w and b
  ASSERT_EQ(part.size(), 2u);
  EXPECT_EQ(part[0].begin, 0);
  EXPECT_EQ(part[0].end, 10);
  EXPECT_EQ(part[1].begin, 22);
  EXPECT_EQ(part[1].end, 25);
}

TEST(ParamInit, RangeEqualsTheSameSliceOfTheWhole) {
  FlatLayout layout = sample_layout();
  std::vector<float> whole(layout.numel());
  init_flat_buffer(layout, 42, whole.data());
  const ParamSpec& w = layout.entries()[0].spec;
  std::vector<float> piece(7);
  init_param_range(w, 42, 4, 11, piece.data());
  EXPECT_EQ(std::memcmp(piece.data(), whole.data() + 4, 7 * sizeof(float)), 0);
  for (int i = 15; i < 20; ++i) EXPECT_EQ(whole[i], 0.0f) << "padded row element " << i;
  EXPECT_EQ(whole[32], 1.0f);
  std::vector<float> other(layout.numel());
  init_flat_buffer(layout, 43, other.data());
  EXPECT_NE(std::memcmp(whole.data(), other.data(), 20 * sizeof(float)), 0);
}

TEST(Optimizer, DecayOnlyWhereTheTableSays) {
  CpuDevice device;
  FlatLayout layout = sample_layout();
  OptimizerOptions o;
  o.type = OptimizerOptions::Type::kSgd;
  o.weight_decay = 0.5f;
  Optimizer opt(device, device.kernels(), o, {decay_ranges(layout, 0, layout.numel())},
                {layout.numel()});
  std::vector<float> p(layout.numel(), 1.0f), g(layout.numel(), 0.0f);
  opt.step_part(0, 0, layout.numel(), p.data(), g.data(), 0.1f, 1.0f, 1);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.1f * 0.5f);  // w decays
  EXPECT_EQ(p[32], 1.0f);                     // b does not
  EXPECT_EQ(p[25], 1.0f);                     // padding untouched
}

}  // namespace
}  // namespace zt
