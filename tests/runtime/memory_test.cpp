// MemoryTracker, tracked Device allocation and FlatLayout offsets.
#include <gtest/gtest.h>

#include "runtime/cpu/cpu_device.h"
#include "runtime/flat_layout.h"
#include "runtime/status.h"

namespace zt {
namespace {

TEST(MemoryTracker, CurrentAndPeakPerCategoryAndTotal) {
  MemoryTracker t;
  t.on_alloc(MemCategory::kParams, 100);
  t.on_alloc(MemCategory::kActivations, 50);
  t.on_free(MemCategory::kActivations, 50);
  t.on_alloc(MemCategory::kActivations, 20);
  EXPECT_EQ(t.current(MemCategory::kParams), 100u);
  EXPECT_EQ(t.current(MemCategory::kActivations), 20u);
  EXPECT_EQ(t.peak(MemCategory::kActivations), 50u);
  EXPECT_EQ(t.current_total(), 120u);
  EXPECT_EQ(t.peak_total(), 150u);
  t.reset_peaks();
  EXPECT_EQ(t.peak(MemCategory::kActivations), 20u);
  EXPECT_EQ(t.peak_total(), 120u);
  EXPECT_THROW(t.on_free(MemCategory::kGrads, 1), Error);
}

TEST(Device, BuffersAreTrackedAndReleased) {
  CpuDevice device;
  {
    Buffer a = device.alloc(1000, MemCategory::kGrads);
    Buffer b = device.alloc_zeroed(24, MemCategory::kOptimizer);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    EXPECT_EQ(b.as<float>()[5], 0.0f);
    EXPECT_EQ(device.memory().current(MemCategory::kGrads), 1000u);
    Buffer moved = std::move(a);
    EXPECT_FALSE(a);
    EXPECT_EQ(device.memory().current_total(), 1024u);
  }
  EXPECT_EQ(device.memory().current_total(), 0u);
  EXPECT_EQ(device.memory().peak_total(), 1024u);
  // A freed block is reused for the same size and counted again.
  Buffer c = device.alloc(1000, MemCategory::kParams);
  EXPECT_EQ(device.memory().current(MemCategory::kParams), 1000u);
  EXPECT_FALSE(device.alloc(0, MemCategory::kOther));
}

TEST(FlatLayout, AlignedOffsetsAndCounts) {
  FlatLayout layout({ParamSpec{"a", {3, 5}, Decay::kYes, {}, 2}, ParamSpec{"b", {7}, Decay::kNo, {}, -1}});
  ASSERT_EQ(layout.entries().size(), 2u);
  EXPECT_EQ(layout.entries()[0].offset, 0);
  EXPECT_EQ(layout.entries()[1].offset, 16);  // 15 rounded up to 16 floats
  EXPECT_EQ(layout.numel(), 32);
  EXPECT_EQ(layout.param_count(), 2 * 5 + 7);  // padded rows of "a" left out
  EXPECT_EQ(layout.find("b")->numel, 7);
  EXPECT_EQ(layout.find("c"), nullptr);
}

}  // namespace
}  // namespace zt
