// The CUDA back end's Device against the CPU's: the factory without a GPU, memory tracking per
// category and alignment, copies at odd sizes and offsets, zeroing, the caching allocator's reuse
// of freed blocks (stream order and best fit), an impossible allocation and the memory limit
// (zt.device_memory_limit). Every test but the factory's skips when no GPU is visible. Not here:
// the kernels (cuda_kernels_test.cpp, cuda_nn_kernels*_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"
#include "runtime/device_factory.h"
#include "runtime/kernels.h"
#include "runtime/status.h"

#include "cuda_test_util.h"

namespace zt {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// The factory without a GPU (runs on every machine without one).

TEST(CudaFactory, MakeDeviceWithoutGpuThrowsInputNamingTheReason) {
  if (cuda_device_count() != 0) GTEST_SKIP() << "a GPU is visible";
  const std::string reason = cuda_unavailable_reason();
  EXPECT_FALSE(reason.empty());
  try {
    make_device(DeviceKind::kCuda, 0);
    FAIL() << "make_device(kCuda) returned without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(e.message().find("CUDA"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(reason), std::string::npos) << e.message();
  }
  // The CPU device is always there.
  EXPECT_EQ(make_device(DeviceKind::kCpu)->name(), "cpu");
}

// ---------------------------------------------------------------------------------------------
// Device: memory and copies.

TEST_F(CudaDeviceTest, NameAndHostAccess) {
  EXPECT_EQ(gpu_->name().rfind("cuda:0 (", 0), 0u) << gpu_->name();
  EXPECT_EQ(gpu_->name().back(), ')') << gpu_->name();
  EXPECT_FALSE(gpu_->host_accessible());
}

TEST_F(CudaDeviceTest, AllocationsAreTrackedPerCategoryAndAligned) {
  MemoryTracker& mem = gpu_->memory();
  {
    Buffer params = gpu_->alloc(1000, MemCategory::kParams);
    Buffer acts = gpu_->alloc(3 << 20, MemCategory::kActivations);  // large rounding class
    Buffer grads = gpu_->alloc_zeroed(24, MemCategory::kGrads);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(params.data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(acts.data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(grads.data()) % 64, 0u);
    EXPECT_NE(params.data(), acts.data());
    EXPECT_NE(params.data(), grads.data());
    // Tracked at the size asked for, not the rounded block size.
    EXPECT_EQ(mem.current(MemCategory::kParams), 1000u);
    EXPECT_EQ(mem.current(MemCategory::kActivations), size_t{3} << 20);
    EXPECT_EQ(mem.current(MemCategory::kGrads), 24u);
    EXPECT_EQ(mem.current_total(), 1000u + (size_t{3} << 20) + 24u);
    acts.reset();
    EXPECT_EQ(mem.current(MemCategory::kActivations), 0u);
    EXPECT_EQ(mem.peak(MemCategory::kActivations), size_t{3} << 20);
  }
  EXPECT_EQ(mem.current_total(), 0u);
  EXPECT_EQ(mem.peak_total(), 1000u + (size_t{3} << 20) + 24u);
  EXPECT_FALSE(gpu_->alloc(0, MemCategory::kOther));
}

TEST_F(CudaDeviceTest, CopiesRoundTripAtOddSizesAndOffsets) {
  for (size_t bytes : {size_t{1}, size_t{3}, size_t{511}, size_t{512}, size_t{513},
                       size_t{(1 << 20) - 1}, size_t{1 << 20}, size_t{(5 << 20) + 7}}) {
    std::vector<uint8_t> host(bytes);
    std::mt19937 rng(static_cast<uint32_t>(bytes));
    for (uint8_t& b : host) b = static_cast<uint8_t>(rng());
    Buffer d = upload(host);
    EXPECT_EQ(download_bytes(d, bytes), host) << bytes << " bytes";
    // A copy into the middle of the buffer leaves the rest alone.
    if (bytes >= 3) {
      const uint8_t middle[1] = {static_cast<uint8_t>(host[bytes / 2] ^ 0xffu)};
      gpu_->copy_from_host(d.as<uint8_t>() + bytes / 2, middle, 1);
      std::vector<uint8_t> expected = host;
      expected[bytes / 2] = middle[0];
      EXPECT_EQ(download_bytes(d, bytes), expected) << bytes << " bytes";
    }
  }
}

TEST_F(CudaDeviceTest, ZeroAndAllocZeroedClearReusedBlocks) {
  const size_t bytes = 300000;
  const std::vector<uint8_t> dirty(bytes, 0xab);
  {
    Buffer d = upload(dirty);  // freed at the end of the scope, then cached
  }
  Buffer z = gpu_->alloc_zeroed(bytes, MemCategory::kWorkspace);
  EXPECT_EQ(download_bytes(z, bytes), std::vector<uint8_t>(bytes, 0));
  // zero() of a sub-range.
  gpu_->copy_from_host(z.data(), dirty.data(), bytes);
  gpu_->zero(z.as<uint8_t>() + 100, 1000);
  std::vector<uint8_t> expected = dirty;
  std::fill(expected.begin() + 100, expected.begin() + 1100, 0);
  EXPECT_EQ(download_bytes(z, bytes), expected);
}

// Freed blocks come back for later requests (the caching allocator); what a reused block holds
// is what its new owner wrote, in stream order with kernels that used it before.
TEST_F(CudaDeviceTest, ReusedBlocksHoldTheirNewOwnersData) {
  const int64_t n = 100000;
  for (int step = 0; step < 5; ++step) {
    std::vector<float> x = normal_floats(n, 100 + step);
    Buffer a = upload(x, MemCategory::kActivations);
    // x + x = 2x, queued; `a` is freed right after.
    gk().residual_forward(a.as<float>(), a.as<float>(), a.as<float>(), n);
    std::vector<float> expected = x;
    ck().residual_forward(expected.data(), expected.data(), expected.data(), n);
    std::vector<float> got = download<float>(a, n);
    expect_bitwise(got, expected, "doubled before free, step " + std::to_string(step));
    a.reset();
    std::vector<float> y = normal_floats(n, 200 + step);
    Buffer b = upload(y, MemCategory::kActivations);  // likely a's block
    gk().fill(b.as<float>() + n / 2, 7.0f, n - n / 2);
    std::fill(y.begin() + n / 2, y.end(), 7.0f);
    expect_bitwise(download<float>(b, n), y, "new owner, step " + std::to_string(step));
  }
  // Different sizes in one pattern, repeated: every step gets correct, distinct blocks.
  for (int step = 0; step < 3; ++step) {
    std::vector<Buffer> buffers;
    std::vector<std::vector<float>> contents;
    for (int64_t k : {1, 100, 1000, 200000, 300000, 700000}) {
      contents.push_back(normal_floats(k, static_cast<uint32_t>(k + step)));
      buffers.push_back(upload(contents.back()));
    }
    for (size_t j = 0; j < buffers.size(); ++j) {
      expect_bitwise(download<float>(buffers[j], static_cast<int64_t>(contents[j].size())),
                     contents[j], "pattern buffer " + std::to_string(j));
    }
  }
}

// The caching policy (cuda_device.cpp): sizes rounded to 512 B below 1 MiB and to 2 MiB from
// there; a freed block serves the smallest-fitting later request of at least half its size.
// Seen through Device as the same pointer coming back. The device is fresh: nothing cached.
TEST_F(CudaDeviceTest, FreedBlocksAreReusedBestFitWithinTwiceTheRequest) {
  const MemCategory c = MemCategory::kActivations;
  Buffer a = gpu_->alloc(100000, c);  // block 100352
  void* const pa = a.data();
  a.reset();
  Buffer same = gpu_->alloc(100000, c);
  EXPECT_EQ(same.data(), pa) << "same size";
  same.reset();
  Buffer smaller = gpu_->alloc(60000, c);  // 60416 rounded: 100352 <= 2 x 60416
  EXPECT_EQ(smaller.data(), pa) << "within 2x";
  smaller.reset();
  Buffer much_smaller = gpu_->alloc(40000, c);  // 40448 rounded: 100352 > 2 x 40448
  EXPECT_NE(much_smaller.data(), pa) << "beyond 2x";
  Buffer big = gpu_->alloc(200000, c);  // block 200192, new
  void* const pbig = big.data();
  EXPECT_NE(pbig, pa);
  big.reset();
  // Cached now: 100352 (pa) and 200192 (pbig). Best fit takes the smaller block that fits.
  Buffer fit_small = gpu_->alloc(90000, c);
  EXPECT_EQ(fit_small.data(), pa) << "best fit";
  Buffer fit_big = gpu_->alloc(150000, c);
  EXPECT_EQ(fit_big.data(), pbig) << "the next block that fits";
  // The 2 MiB class: 3 MiB takes a 4 MiB block, which 2.5 MiB reuses and 1 MiB - 1 (1 MiB
  // rounded) does not.
  Buffer large = gpu_->alloc(3 << 20, c);
  void* const plarge = large.data();
  large.reset();
  Buffer large2 = gpu_->alloc((5 << 20) / 2, c);
  EXPECT_EQ(large2.data(), plarge);
  large2.reset();
  Buffer under = gpu_->alloc((1 << 20) - 1, c);
  EXPECT_NE(under.data(), plarge);
  // Blocks handed out twice would overlap: write distinct data through all live buffers.
  const std::vector<float> x = normal_floats(90000 / 4, 1), y = normal_floats(150000 / 4, 2);
  gpu_->copy_from_host(fit_small.data(), x.data(), x.size() * sizeof(float));
  gpu_->copy_from_host(fit_big.data(), y.data(), y.size() * sizeof(float));
  gpu_->zero(much_smaller.data(), 40000);
  gpu_->zero(under.data(), (1 << 20) - 1);
  expect_bitwise(download<float>(fit_small, static_cast<int64_t>(x.size())), x, "fit_small");
  expect_bitwise(download<float>(fit_big, static_cast<int64_t>(y.size())), y, "fit_big");
}

TEST_F(CudaDeviceTest, ImpossibleAllocationNamesCategoryBytesAndWhatWouldFit) {
  const size_t huge = size_t{1} << 52;  // 4 PiB
  try {
    Buffer b = gpu_->alloc(huge, MemCategory::kParams);
    FAIL() << "a 4 PiB allocation succeeded";
  } catch (const Error& e) {
    // The form of every back end (runtime/device.h, out_of_memory_message), not a bare CUDA
    // error.
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
    const std::string& m = e.message();
    EXPECT_EQ(m.rfind("out of device memory on " + gpu_->name() +
                          ": params asked for 4.00 PiB "
                          "(4,503,599,627,370,496 bytes) but cudaMalloc of 4.00 PiB",
                      0),
              0u)
        << m;
    EXPECT_NE(m.find("cudaErrorMemoryAllocation"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved"), std::string::npos) << m;
    EXPECT_NE(m.find("offload"), std::string::npos) << m;
    EXPECT_EQ(m.find("zt.device_memory_limit"), std::string::npos) << m;
  }
  EXPECT_EQ(gpu_->memory().current_total(), 0u);
  // The device still works.
  std::vector<float> x = {1.0f, 2.0f, 3.0f};
  Buffer d = upload(x);
  EXPECT_EQ(download<float>(d, 3), x);
}

TEST_F(CudaDeviceTest, MemoryLimitCapsTheGpu) {
  gpu_->set_memory_limit(3 << 20);
  {
    Buffer params = gpu_->alloc(1 << 20, MemCategory::kParams);
    Buffer grads = gpu_->alloc(2 << 20, MemCategory::kGrads);  // exactly at the limit
    try {
      Buffer b = gpu_->alloc(1, MemCategory::kOptimizer);
      ADD_FAILURE() << "an allocation past zt.device_memory_limit succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
      EXPECT_NE(e.message().find("optimizer asked for 1 byte but only 0 bytes of the 3.00 MiB "
                                 "(3,145,728 bytes) zt.device_memory_limit is free; in use: "
                                 "params 1.00 MiB (1,048,576 bytes), grads 2.00 MiB"),
                std::string::npos)
          << e.message();
    }
  }
  Buffer optimizer = gpu_->alloc(3 << 20, MemCategory::kOptimizer);  // freed room is usable
  EXPECT_EQ(gpu_->memory().current_total(), size_t{3} << 20);
}

// offload's pin_memory: the host tier's buffers registered with the GPU, copies through them
// exact; the CPU device has no pinning (its memory is the host's).
TEST_F(CudaDeviceTest, HostTierMemoryIsPinnedForTheGpu) {
  std::unique_ptr<Device> cpu = make_device(DeviceKind::kCpu);
  EXPECT_FALSE(host_pinning_for(*cpu).has_value());
  std::optional<HostPinning> pinning = host_pinning_for(*gpu_);
  ASSERT_TRUE(pinning.has_value());
  CpuDevice host;
  host.set_pinning(std::move(*pinning));
  const size_t bytes = size_t{3} << 20;
  Buffer staged = host.alloc(bytes, MemCategory::kOptimizer);
  EXPECT_TRUE(host.pinning_failure().empty()) << host.pinning_failure();
  EXPECT_GE(host.pinned_bytes(), bytes);
  for (size_t i = 0; i < bytes; ++i)
    staged.as<unsigned char>()[i] = static_cast<unsigned char>(i * 7);
  Buffer on_gpu = gpu_->alloc(bytes, MemCategory::kOther);
  gpu_->copy_from_host(on_gpu.data(), staged.data(), bytes);
  std::vector<unsigned char> back(bytes);
  gpu_->copy_to_host(back.data(), on_gpu.data(), bytes);
  EXPECT_EQ(std::memcmp(back.data(), staged.data(), bytes), 0);
}

}  // namespace
}  // namespace zt
