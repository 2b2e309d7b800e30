// MemoryTracker, tracked Device allocation, FlatLayout offsets and ActivationStore packing.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/flat_layout.h"
#include "runtime/model.h"
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

TEST(ActivationStore, PackHalvesActivationsAndUnpackGivesTheRoundedValues) {
  CpuDevice device;
  const MemoryTracker& mem = device.memory();
  auto activations = [&] { return mem.current(MemCategory::kActivations); };
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    ActivationStore store(device);
    const int64_t n0 = 1001, n1 = 37, n2 = 4096;
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<float> values[3];
    float* p0 = store.alloc_floats(n0);
    float* stats = store.alloc_stats(n1);
    float* p2 = store.alloc_floats(n2);
    for (auto [p, n, v] :
         {std::tuple{p0, n0, &values[0]}, {stats, n1, &values[1]}, {p2, n2, &values[2]}}) {
      for (int64_t i = 0; i < n; ++i) v->push_back(dist(gen));
      std::memcpy(p, v->data(), n * sizeof(float));
    }
    values[0][5] = 70000.0f;  // past fp16's range: inf when packed to fp16
    p0[5] = 70000.0f;
    const size_t full = (n0 + n1 + n2) * sizeof(float);
    EXPECT_EQ(activations(), full);

    store.pack(dtype);
    EXPECT_TRUE(store.packed());
    EXPECT_EQ(activations(), (n0 + n2) * 2 + n1 * sizeof(float));  // stats stay fp32
    EXPECT_THROW(store.at(0), Error);
    EXPECT_THROW(store.pack(dtype), Error);
    EXPECT_THROW(store.alloc_floats(1), Error);

    store.unpack();
    EXPECT_FALSE(store.packed());
    EXPECT_EQ(activations(), full);
    auto round = [&](float x) {
      return dtype == DType::kF16 ? fp16_to_fp32(fp32_to_fp16(x)) : bf16_to_fp32(fp32_to_bf16(x));
    };
    for (size_t k : {0u, 2u}) {
      const float* p = store.at(k);
      for (size_t i = 0; i < values[k].size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(p[i]), std::bit_cast<uint32_t>(round(values[k][i])))
            << dtype_name(dtype) << " buffer " << k << " element " << i;
    }
    EXPECT_EQ(std::memcmp(store.at(1), values[1].data(), n1 * sizeof(float)), 0);  // stats exact
    EXPECT_EQ(std::isinf(store.at(0)[5]), dtype == DType::kF16);
    store.unpack();  // a no-op when not packed
    EXPECT_EQ(activations(), full);

    store.pack(dtype);
    store.release();  // packed or not, release empties and unpacks
    EXPECT_TRUE(store.empty());
    EXPECT_FALSE(store.packed());
    EXPECT_EQ(activations(), 0u);
    store.alloc_floats(3);
    store.pack(DType::kF32);  // no-op
    EXPECT_FALSE(store.packed());
    EXPECT_EQ(activations(), 3 * sizeof(float));
  }
}

}  // namespace
}  // namespace zt
