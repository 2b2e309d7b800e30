// MemoryTracker, tracked Device allocation and the device's capacity (zt.device_memory_limit and
// a back end out of room: one error naming category, bytes, holdings and what would fit),
// FlatLayout offsets and ActivationStore's buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
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

// Large zeroing runs on every thread with streaming stores (cpu_device.cpp), small zeroing is a
// memset: either way exactly [dst, dst + bytes) becomes zero, at any alignment and length, on the
// AVX-512 and the SSE2 path.
TEST(Device, ZeroClearsExactlyTheRangeAtAnyOffsetAndLength) {
  CpuDevice device;
  const size_t mib = size_t(1) << 20;
  std::vector<unsigned char> buffer(5 * mib);
  const std::vector<std::pair<size_t, size_t>> ranges = {
      {0, mib}, {3, mib + 5}, {61, 2 * mib + 63}, {64, 3 * mib}, {1, 100}, {7, mib - 1}, {9, 0}};
  for (const char* simd : {"", "sse2"}) {
    if (*simd) setenv("ZT_CPU_SIMD", simd, 1);
    for (const auto& [offset, bytes] : ranges) {
      std::fill(buffer.begin(), buffer.end(), 0xAB);
      device.zero(buffer.data() + offset, bytes);
      size_t wrong = 0;
      for (size_t i = 0; i < buffer.size(); ++i)
        wrong += buffer[i] != (i >= offset && i < offset + bytes ? 0 : 0xAB);
      EXPECT_EQ(wrong, 0u) << "offset " << offset << ", " << bytes << " bytes, ZT_CPU_SIMD='"
                           << simd << "'";
    }
    if (*simd) unsetenv("ZT_CPU_SIMD");
  }
}

// Buffers of 2 MiB and more start on a 2 MiB boundary, where transparent huge pages can back
// them (cpu_device.cpp); smaller ones keep the 64-byte alignment.
TEST(Device, LargeBuffersStartOnAHugePageBoundary) {
  CpuDevice device;
  const size_t mib = size_t(1) << 20;
  for (size_t bytes : {2 * mib, 3 * mib + 5, 64 * mib}) {
    Buffer b = device.alloc(bytes, MemCategory::kParams);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (2 * mib), 0u) << bytes << " bytes";
    device.zero(b.data(), bytes);
    EXPECT_EQ(static_cast<unsigned char*>(b.data())[bytes - 1], 0) << bytes << " bytes";
  }
  Buffer small = device.alloc(1000, MemCategory::kParams);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
}

// The kOutOfMemory error `alloc` throws (ADD_FAILURE and "" when none); it must be one line.
std::string out_of_memory(const std::function<void()>& alloc) {
  try {
    alloc();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    return e.message();
  }
  ADD_FAILURE() << "the allocation succeeded";
  return {};
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(DeviceMemoryLimit, AllocationsUpToTheLimitAndNotPast) {
  CpuDevice device;
  EXPECT_EQ(device.memory_limit(), 0u);
  device.set_memory_limit(1000);
  Buffer params = device.alloc(600, MemCategory::kParams);
  Buffer grads = device.alloc(400, MemCategory::kGrads);  // exactly at the limit
  EXPECT_EQ(device.memory().current_total(), 1000u);
  const std::string message =
      out_of_memory([&] { Buffer b = device.alloc(1, MemCategory::kOptimizer); });
  EXPECT_EQ(message,
            "out of device memory on cpu: optimizer asked for 1 byte but only 0 bytes of the 1000 "
            "bytes zt.device_memory_limit is free; in use: params 600 bytes, grads 400 bytes; "
            "model states do not fit: shard more of them (a higher zero_optimization.stage: stage "
            "3 keeps 1/N of the parameters, gradients and optimizer state on each of N ranks), run "
            "on more ranks, or offload them (zero_optimization.offload_optimizer, "
            "zero_optimization.offload_param), or raise zt.device_memory_limit");
  // Nothing was allocated or counted by the failed call.
  EXPECT_EQ(device.memory().current(MemCategory::kOptimizer), 0u);
  EXPECT_EQ(device.memory().peak_total(), 1000u);
  // Freeing makes room again.
  grads.reset();
  Buffer optimizer = device.alloc(400, MemCategory::kOptimizer);
  EXPECT_EQ(device.memory().current_total(), 1000u);
  EXPECT_FALSE(device.alloc(0, MemCategory::kOther));  // an empty Buffer fits at the limit
  optimizer.reset();
  out_of_memory([&] { Buffer b = device.alloc(401, MemCategory::kOptimizer); });
  // No limit: the back end's own capacity only.
  device.set_memory_limit(0);
  Buffer large = device.alloc(1 << 20, MemCategory::kActivations);
  EXPECT_EQ(device.memory().current_total(), 600u + (1 << 20));
}

TEST(DeviceMemoryLimit, MessageNamesCategoryBytesHoldingsAndWhatWouldFit) {
  CpuDevice device;
  device.set_memory_limit(size_t{6} << 30);
  Buffer params = device.alloc(120'320, MemCategory::kParams);
  Buffer comm = device.alloc(2 << 20, MemCategory::kCommBuffers);
  const std::string big = out_of_memory(
      [&] { Buffer b = device.alloc(size_t{1320702443} * 5, MemCategory::kActivations); });
  EXPECT_CONTAINS(big,
                  "out of device memory on cpu: activations asked for 6.15 GiB "
                  "(6,603,512,215 bytes) but only 6.00 GiB (6,440,233,472 bytes) of the "
                  "6.00 GiB (6,442,450,944 bytes) zt.device_memory_limit is free; ");
  EXPECT_CONTAINS(big,
                  "in use: params 117.50 KiB (120,320 bytes), comm 2.00 MiB (2,097,152 "
                  "bytes); ");
  EXPECT_CONTAINS(big,
                  "activations do not fit: lower train_micro_batch_size_per_gpu or "
                  "zt.seq_len, or recompute them (activation_checkpointing), or raise "
                  "zt.device_memory_limit");
  EXPECT_CONTAINS(
      out_of_memory([&] { Buffer b = device.alloc(size_t{7} << 30, MemCategory::kCommBuffers); }),
      "comm asked for 7.00 GiB (7,516,192,768 bytes) but only");
  EXPECT_CONTAINS(
      out_of_memory([&] { Buffer b = device.alloc(size_t{7} << 30, MemCategory::kCommBuffers); }),
      "communication buffers do not fit: lower zero_optimization.reduce_bucket_size");
  EXPECT_CONTAINS(
      out_of_memory([&] { Buffer b = device.alloc(size_t{7} << 30, MemCategory::kWorkspace); }),
      "workspace asked for 7.00 GiB");
}

// A back end out of room (a GPU whose cudaMalloc fails) reports in the same form as the limit,
// with its own reason in place of the limit's clause.
class RefusingDevice final : public Device {
 public:
  explicit RefusingDevice(size_t capacity) : capacity_(capacity) {}
  std::string name() const override { return "refusing"; }
  Kernels& kernels_for(DType activations) override { return cpu_.kernels_for(activations); }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    cpu_.copy_to_host(host_dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    cpu_.copy_from_host(dst, host_src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override { cpu_.copy(dst, src, bytes); }
  void zero(void* dst, size_t bytes) override { cpu_.zero(dst, bytes); }

 protected:
  void* raw_alloc(size_t bytes, std::string& why) override {
    if (held_ + bytes > capacity_) {
      why = fmt::format("the back end has {} bytes left", capacity_ - held_);
      return nullptr;
    }
    held_ += bytes;
    return ::operator new(bytes, std::align_val_t(64));
  }
  void raw_free(void* data, size_t bytes) override {
    held_ -= bytes;
    ::operator delete(data, std::align_val_t(64));
  }

 private:
  CpuDevice cpu_;
  size_t capacity_;
  size_t held_ = 0;
};

TEST(DeviceMemoryLimit, BackEndOutOfRoomIsTheSameError) {
  RefusingDevice device(4096);
  device.set_memory_limit(1 << 20);  // far above what the back end has: the back end refuses
  Buffer grads = device.alloc(3000, MemCategory::kGrads);
  EXPECT_EQ(out_of_memory([&] { Buffer b = device.alloc(2000, MemCategory::kParams); }),
            "out of device memory on refusing: params asked for 1.95 KiB (2,000 bytes) but the "
            "back end has 1096 bytes left; in use: grads 2.93 KiB (3,000 bytes); model states do "
            "not fit: shard more of them (a higher zero_optimization.stage: stage 3 keeps 1/N of "
            "the parameters, gradients and optimizer state on each of N ranks), run on more "
            "ranks, or offload them (zero_optimization.offload_optimizer, "
            "zero_optimization.offload_param)");
  EXPECT_EQ(device.memory().current_total(), 3000u);
  grads.reset();
  Buffer params = device.alloc(2000, MemCategory::kParams);
  EXPECT_EQ(device.memory().current(MemCategory::kParams), 2000u);
}

TEST(FlatLayout, AlignedOffsetsAndCounts) {
  FlatLayout layout(
      {ParamSpec{"a", {3, 5}, Decay::kYes, {}, 2}, ParamSpec{"b", {7}, Decay::kNo, {}, -1}});
  ASSERT_EQ(layout.entries().size(), 2u);
  EXPECT_EQ(layout.entries()[0].offset, 0);
  EXPECT_EQ(layout.entries()[1].offset, 16);  // 15 rounded up to 16 floats
  EXPECT_EQ(layout.numel(), 32);
  EXPECT_EQ(layout.param_count(), 2 * 5 + 7);  // padded rows of "a" left out
  EXPECT_EQ(layout.find("b")->numel, 7);
  EXPECT_EQ(layout.find("c"), nullptr);
}

TEST(ActivationStore, ActivationsTakeTheStoresDtypeAndStatisticsStayFp32) {
  CpuDevice device;
  const MemoryTracker& mem = device.memory();
  auto activations = [&] { return mem.current(MemCategory::kActivations); };
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    ActivationStore store(device, dtype);
    EXPECT_EQ(store.dtype(), dtype);
    const int64_t n0 = 1001, n1 = 37, n2 = 4096;
    const Operand a0 = store.alloc_acts(n0);
    float* stats = store.alloc_stats(n1);
    const Operand a2 = store.alloc_attention(AttentionRecord{n2, true});
    const Operand record = store.alloc_attention(AttentionRecord{n1, false});
    EXPECT_EQ(a0.dtype, dtype);
    EXPECT_EQ(a2.dtype, dtype);
    EXPECT_EQ(record.dtype, DType::kF32);  // a back end's own record is kept as written
    EXPECT_EQ(activations(), (n0 + n2) * dtype_size(dtype) + 2 * n1 * sizeof(float));
    // Found again by position, as allocated.
    EXPECT_EQ(store.at(0).data, a0.data);
    EXPECT_EQ(store.at(0).dtype, dtype);
    EXPECT_EQ(store.stats_at(1), stats);
    EXPECT_EQ(store.at(2).data, a2.data);
    EXPECT_EQ(store.stats_at(3), record.data);
    if (dtype != DType::kF32) {
      EXPECT_THROW(store.stats_at(0), Error);  // not a statistic
    }
    store.release();
    EXPECT_TRUE(store.empty());
    EXPECT_EQ(activations(), 0u);
  }
}

}  // namespace
}  // namespace zt
