// The CUDA back end against the CPU back end: Device memory (tracking, copies, zeroing, reuse of
// freed blocks, an impossible allocation) and every Kernels entry of cuda_kernels.cu run on the
// same inputs on both devices, compared bitwise where the two run the same IEEE operations
// (casts, rounding, add, fill, residual, accumulate; NaN payloads made by arithmetic
// excepted) and within a tight tolerance elsewhere. Compiled with or without CUDA (no CUDA
// header here: the GPU is reached through make_device); every test but the first skips when
// no GPU is visible. The matmul / embedding / layer-norm / attention / cross-entropy entries are
// tested with cuda_nn_kernels.cu, not here.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"
#include "runtime/device_factory.h"
#include "runtime/kernels.h"
#include "runtime/status.h"

namespace zt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kSumSquaresBlock = 16384;  // the back ends' fixed block
// Element-wise kernels cap their grid at 8192 blocks of 256 threads; longer buffers exercise the
// grid-stride loop.
constexpr int64_t kGridStrideN = int64_t{8192} * 256 * 2 + 12345;

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

// ---------------------------------------------------------------------------------------------
// Inputs.

std::vector<float> normal_floats(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

// Uniformly random bit patterns: every exponent, subnormals, infinities and NaNs with payloads.
std::vector<float> random_bit_floats(int64_t n, uint32_t seed, bool allow_nan) {
  std::mt19937 rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    do {
      v = from_bits(static_cast<uint32_t>(rng()));
    } while (!allow_nan && std::isnan(v));
  }
  return x;
}

// Values at and around the rounding boundaries of fp16 and bf16, and the special values.
std::vector<float> rounding_edge_floats(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x = {
      0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, -65504.0f, std::nextafter(65520.0f, 0.0f), 65520.0f,
      -65520.0f, 65536.0f, 1e10f, std::numeric_limits<float>::max(),
      -std::numeric_limits<float>::max(), kInf, -kInf, std::numeric_limits<float>::min(),
      std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(), 1e-40f,
      0x1p-24f, 0x1p-25f, -0x1p-25f, 0x1.8p-25f, 0x1p-26f, 0x1p-14f, 0x1.ff8p-15f, 0x1.ffcp-15f,
      from_bits(0x7fc00000u), from_bits(0xffc00000u), from_bits(0x7f800001u),
      from_bits(0xff800001u), from_bits(0x7fc12345u), from_bits(0x7fa00000u),
      from_bits(0x7f7f8000u),  // a bf16 tie between the largest finite bf16 and inf: inf
      from_bits(0x7f7fffffu)};
  for (int k = 0; k < 4000; ++k) {
    const uint32_t sign = (rng() & 1u) << 31;
    // bf16: exact ties (low half 0x8000) on odd and even upper halves, and one either side.
    const uint32_t upper = (static_cast<uint32_t>(rng()) & 0x7f7fu) << 16;  // finite exponents
    x.push_back(from_bits(sign | upper | 0x8000u));
    x.push_back(from_bits(sign | upper | 0x7fffu));
    x.push_back(from_bits(sign | upper | 0x8001u));
    // fp16 normal: exponent in [-14, 15], 10 random mantissa bits, then a tie (0x1000 below).
    const uint32_t exp = static_cast<uint32_t>(127 - 14 + static_cast<int>(rng() % 30));
    const uint32_t mant10 = static_cast<uint32_t>(rng()) & 0x3ffu;
    const uint32_t base = sign | (exp << 23) | (mant10 << 13);
    x.push_back(from_bits(base | 0x1000u));
    x.push_back(from_bits(base | 0x0fffu));
    x.push_back(from_bits(base | 0x1001u));
    // fp16 subnormal ties: odd multiples of 2^-25.
    const float odd = static_cast<float>(2 * (rng() % 1024) + 1);
    x.push_back((sign ? -odd : odd) * 0x1p-25f);
  }
  return x;
}

std::vector<uint16_t> all_16bit_patterns() {
  std::vector<uint16_t> x(65536);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i);
  return x;
}

// ---------------------------------------------------------------------------------------------
// Comparisons. Each reports the first few mismatches with both bit patterns.

void expect_bitwise(const std::vector<float>& gpu, const std::vector<float>& cpu,
                    const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int reported = 0;
  int64_t mismatches = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (bits_of(gpu[i]) == bits_of(cpu[i])) continue;
    ++mismatches;
    if (reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << ": gpu " << gpu[i] << " (0x" << std::hex
                    << bits_of(gpu[i]) << ") cpu " << cpu[i] << " (0x" << bits_of(cpu[i])
                    << std::dec << ")";
  }
  EXPECT_EQ(mismatches, 0) << what;
}

// |gpu - cpu| <= rel * max(|gpu|, |cpu|); infinities must match exactly, NaN must meet NaN.
template <class T>
void expect_close(const std::vector<T>& gpu, const std::vector<T>& cpu, double rel,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int reported = 0;
  int64_t mismatches = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double g = gpu[i], c = cpu[i];
    bool ok;
    if (std::isnan(g) || std::isnan(c)) {
      ok = std::isnan(g) && std::isnan(c);
    } else if (std::isinf(g) || std::isinf(c)) {
      ok = g == c;
    } else {
      ok = std::abs(g - c) <= rel * std::max(std::abs(g), std::abs(c));
    }
    if (ok) continue;
    ++mismatches;
    if (reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << ": gpu " << g << " cpu " << c
                    << " (relative tolerance " << rel << ")";
  }
  EXPECT_EQ(mismatches, 0) << what;
}

// n elements of dtype t as float (a 16-bit element widened exactly).
float element_as_float(const std::vector<uint8_t>& bytes, DType t, size_t i) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + 2 * i, 2);
  return t == DType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

// Byte buffers of n elements of dtype t compared element by element, bit for bit; with
// nan_is_nan, two NaNs are equal whatever their payloads (arithmetic on a NaN gives the
// canonical NaN on a GPU and the operand's NaN on x86).
void expect_elements_equal(const std::vector<uint8_t>& gpu, const std::vector<uint8_t>& cpu,
                           DType t, int64_t n, bool nan_is_nan, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  ASSERT_EQ(gpu.size(), static_cast<size_t>(n) * dtype_size(t)) << what;
  const size_t size = dtype_size(t);
  int reported = 0;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(gpu.data() + i * size, cpu.data() + i * size, size) == 0) continue;
    const float g = element_as_float(gpu, t, i), c = element_as_float(cpu, t, i);
    if (nan_is_nan && std::isnan(g) && std::isnan(c)) continue;
    ++mismatches;
    if (reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << ": gpu " << g << " cpu " << c;
  }
  EXPECT_EQ(mismatches, 0) << what;
}

// ---------------------------------------------------------------------------------------------
// The fixture: a GPU (skipped without one), the CPU reference, and host <-> device helpers.

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
    gpu_ = make_device(DeviceKind::kCuda, 0);
  }

  Kernels& gk() { return gpu_->kernels(); }
  Kernels& ck() { return cpu_.kernels(); }

  Buffer upload_bytes(const void* host, size_t bytes, MemCategory c = MemCategory::kOther) {
    Buffer b = gpu_->alloc(bytes, c);
    gpu_->copy_from_host(b.data(), host, bytes);
    return b;
  }
  template <class T>
  Buffer upload(const std::vector<T>& host, MemCategory c = MemCategory::kOther) {
    return upload_bytes(host.data(), host.size() * sizeof(T), c);
  }
  template <class T>
  std::vector<T> download(const Buffer& b, int64_t n, int64_t offset = 0) {
    std::vector<T> host(static_cast<size_t>(n));
    gpu_->copy_to_host(host.data(), b.as<T>() + offset, host.size() * sizeof(T));
    return host;
  }
  std::vector<uint8_t> download_bytes(const Buffer& b, size_t bytes) {
    std::vector<uint8_t> host(bytes);
    gpu_->copy_to_host(host.data(), b.data(), bytes);
    return host;
  }

  // floats as n elements of dtype t (rounded by the CPU's cast).
  std::vector<uint8_t> as_dtype(const std::vector<float>& x, DType t) {
    std::vector<uint8_t> bytes(x.size() * dtype_size(t));
    ck().cast(bytes.data(), t, x.data(), DType::kF32, static_cast<int64_t>(x.size()));
    return bytes;
  }

  std::unique_ptr<Device> gpu_;
  CpuDevice cpu_;
};

const DType kAllTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
std::string type_name(DType t) { return std::string(dtype_name(t)); }

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

TEST_F(CudaDeviceTest, ImpossibleAllocationThrowsSystemNamingTheBytes) {
  const size_t huge = size_t{1} << 52;  // 4 PiB
  try {
    Buffer b = gpu_->alloc(huge, MemCategory::kParams);
    FAIL() << "a 4 PiB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSystem);
    EXPECT_NE(e.message().find(std::to_string(huge)), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("reserved"), std::string::npos) << e.message();
  }
  EXPECT_EQ(gpu_->memory().current_total(), 0u);
  // The device still works.
  std::vector<float> x = {1.0f, 2.0f, 3.0f};
  Buffer d = upload(x);
  EXPECT_EQ(download<float>(d, 3), x);
}

// ---------------------------------------------------------------------------------------------
// Element-wise kernels.

TEST_F(CudaDeviceTest, GeluForwardMatchesCpu) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{100003}, kGridStrideN}) {
    std::vector<float> x = normal_floats(n, 1, 3.0f);
    if (n > 100) {  // a sweep over the interesting range and the clamps of exp_bounded
      for (int i = 0; i < 100; ++i) x[i] = -60.0f + 1.2f * static_cast<float>(i);
      x[0] = 0.0f;
      x[1] = -0.0f;
      x[2] = 1e-30f;
      x[3] = -1e-30f;
      x[4] = 100.0f;
      x[5] = -100.0f;
    }
    Buffer dx = upload(x);
    Buffer dout = gpu_->alloc(x.size() * sizeof(float), MemCategory::kActivations);
    gk().gelu_forward(dout.as<float>(), dx.as<float>(), n);
    std::vector<float> expected(x.size());
    ck().gelu_forward(expected.data(), x.data(), n);
    expect_close(download<float>(dout, n), expected, 1e-6, "gelu_forward n=" + std::to_string(n));
  }
}

TEST_F(CudaDeviceTest, GeluBackwardAccumulatesAndMatchesCpu) {
  for (int64_t n : {int64_t{5}, int64_t{100003}, kGridStrideN}) {
    std::vector<float> x = normal_floats(n, 2, 3.0f);
    std::vector<float> dout = normal_floats(n, 3);
    std::vector<float> dinp = normal_floats(n, 4);  // accumulated into, not overwritten
    Buffer dx = upload(x), ddout = upload(dout), ddinp = upload(dinp);
    gk().gelu_backward(ddinp.as<float>(), dx.as<float>(), ddout.as<float>(), n);
    ck().gelu_backward(dinp.data(), x.data(), dout.data(), n);
    expect_close(download<float>(ddinp, n), dinp, 1e-6, "gelu_backward n=" + std::to_string(n));
  }
}

// An element's bits do not depend on where it sits or how the buffer is split (kernels.h).
TEST_F(CudaDeviceTest, ElementWiseResultsDoNotDependOnSplitting) {
  const int64_t n = 100003, split = 33331;
  std::vector<float> x = normal_floats(n, 5, 3.0f);
  Buffer dx = upload(x);
  Buffer whole = gpu_->alloc(n * sizeof(float), MemCategory::kOther);
  Buffer parts = gpu_->alloc(n * sizeof(float), MemCategory::kOther);
  gk().gelu_forward(whole.as<float>(), dx.as<float>(), n);
  gk().gelu_forward(parts.as<float>(), dx.as<float>(), split);
  gk().gelu_forward(parts.as<float>() + split, dx.as<float>() + split, n - split);
  expect_bitwise(download<float>(parts, n), download<float>(whole, n), "gelu split");

  std::vector<float> g = normal_floats(n, 6);
  std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
  Buffer p1 = upload(x), m1 = upload(zeros), v1 = upload(zeros), dg = upload(g);
  Buffer p2 = upload(x), m2 = upload(zeros), v2 = upload(zeros);
  AdamWArgs args;
  args.weight_decay = 0.1f;
  gk().adamw(p1.as<float>(), dg.as<float>(), m1.as<float>(), v1.as<float>(), n, args);
  gk().adamw(p2.as<float>(), dg.as<float>(), m2.as<float>(), v2.as<float>(), split, args);
  gk().adamw(p2.as<float>() + split, dg.as<float>() + split, m2.as<float>() + split,
             v2.as<float>() + split, n - split, args);
  expect_bitwise(download<float>(p2, n), download<float>(p1, n), "adamw split params");
  expect_bitwise(download<float>(v2, n), download<float>(v1, n), "adamw split v");
}

TEST_F(CudaDeviceTest, ResidualAndAccumulateAreBitwiseEqualToCpu) {
  for (int64_t n : {int64_t{1}, int64_t{100003}, kGridStrideN}) {
    const std::vector<float> a = normal_floats(n, 7), b = normal_floats(n, 8, 1e-3f);
    Buffer da = upload(a), db = upload(b);
    Buffer dout = gpu_->alloc(n * sizeof(float), MemCategory::kActivations);
    gk().residual_forward(dout.as<float>(), da.as<float>(), db.as<float>(), n);
    std::vector<float> expected(static_cast<size_t>(n));
    ck().residual_forward(expected.data(), a.data(), b.data(), n);
    expect_bitwise(download<float>(dout, n), expected, "residual n=" + std::to_string(n));

    // out aliasing a
    gk().residual_forward(da.as<float>(), da.as<float>(), db.as<float>(), n);
    expect_bitwise(download<float>(da, n), expected, "residual in place");

    // y += x, twice
    std::vector<float> y = normal_floats(n, 9);
    Buffer dy = upload(y);
    gk().accumulate(dy.as<float>(), db.as<float>(), n);
    gk().accumulate(dy.as<float>(), db.as<float>(), n);
    ck().accumulate(y.data(), b.data(), n);
    ck().accumulate(y.data(), b.data(), n);
    expect_bitwise(download<float>(dy, n), y, "accumulate n=" + std::to_string(n));
  }
}

TEST_F(CudaDeviceTest, FillIsBitwiseEqualToCpu) {
  const int64_t n = kGridStrideN;
  for (float value : {1.5f, -0.0f, 0.0f, kInf, from_bits(0x7fc12345u)}) {
    std::vector<float> x = normal_floats(n, 11);
    Buffer dx = upload(x);
    gk().fill(dx.as<float>() + 3, value, n - 5);  // the first 3 and last 2 untouched
    ck().fill(x.data() + 3, value, n - 5);
    expect_bitwise(download<float>(dx, n), x, "fill " + std::to_string(value));
  }
}

// ---------------------------------------------------------------------------------------------
// Optimizers: several steps, so m, v and the momentum buffer carry state between calls.

TEST_F(CudaDeviceTest, AdamWMatchesCpuOverSteps) {
  const int64_t n = 100003;
  for (bool decoupled : {true, false}) {
    for (float weight_decay : {0.0f, 0.1f}) {
      std::vector<float> p = normal_floats(n, 12), m(static_cast<size_t>(n), 0.0f), v = m;
      Buffer dp = upload(p), dm = upload(m), dv = upload(v);
      for (int64_t step = 1; step <= 4; ++step) {
        const std::vector<float> g = normal_floats(n, static_cast<uint32_t>(13 + step));
        Buffer dg = upload(g);
        AdamWArgs args;
        args.lr = 1e-2f;
        args.weight_decay = weight_decay;
        args.step = step;
        args.grad_scale = step == 3 ? 0.25f : 1.0f;
        args.decoupled = decoupled;
        gk().adamw(dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), n, args);
        ck().adamw(p.data(), g.data(), m.data(), v.data(), n, args);
        const std::string what = std::string("adamw decoupled=") + (decoupled ? "1" : "0") +
                                 " wd=" + std::to_string(weight_decay) +
                                 " step=" + std::to_string(step);
        expect_close(download<float>(dp, n), p, 1e-6, what + " params");
        expect_close(download<float>(dm, n), m, 1e-6, what + " m");
        expect_close(download<float>(dv, n), v, 1e-6, what + " v");
      }
    }
  }
}

TEST_F(CudaDeviceTest, SgdMatchesCpuWithAndWithoutMomentumAndDecay) {
  const int64_t n = 100003;
  for (float momentum : {0.0f, 0.9f}) {
    for (float weight_decay : {0.0f, 0.01f}) {
      std::vector<float> p = normal_floats(n, 20), buf(static_cast<size_t>(n), 0.0f);
      Buffer dp = upload(p), dbuf = upload(buf);
      for (int step = 1; step <= 3; ++step) {
        const std::vector<float> g = normal_floats(n, static_cast<uint32_t>(21 + step));
        Buffer dg = upload(g);
        SgdArgs args;
        args.lr = 0.05f;
        args.momentum = momentum;
        args.weight_decay = weight_decay;
        args.grad_scale = step == 2 ? 0.5f : 1.0f;
        float* gbuf = momentum != 0.0f ? dbuf.as<float>() : nullptr;
        float* cbuf = momentum != 0.0f ? buf.data() : nullptr;
        gk().sgd(dp.as<float>(), dg.as<float>(), gbuf, n, args);
        ck().sgd(p.data(), g.data(), cbuf, n, args);
        const std::string what = "sgd momentum=" + std::to_string(momentum) +
                                 " wd=" + std::to_string(weight_decay) +
                                 " step=" + std::to_string(step);
        expect_close(download<float>(dp, n), p, 1e-6, what + " params");
        if (momentum != 0.0f) expect_close(download<float>(dbuf, n), buf, 1e-6, what + " buf");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Casts, rounding and add: bit for bit.

TEST_F(CudaDeviceTest, CastFromFloatIsBitwiseEqualToCpu) {
  std::vector<float> x = rounding_edge_floats(30);
  const std::vector<float> wide = random_bit_floats(200000, 31, /*allow_nan=*/true);
  const std::vector<float> normal = normal_floats(200000, 32, 100.0f);
  x.insert(x.end(), wide.begin(), wide.end());
  x.insert(x.end(), normal.begin(), normal.end());
  const int64_t n = static_cast<int64_t>(x.size());
  Buffer dx = upload(x);
  for (DType dst : kAllTypes) {
    Buffer dd = gpu_->alloc(n * dtype_size(dst), MemCategory::kOther);
    gk().cast(dd.data(), dst, dx.data(), DType::kF32, n);
    expect_elements_equal(download_bytes(dd, n * dtype_size(dst)), as_dtype(x, dst), dst, n,
                          /*nan_is_nan=*/false, "cast fp32 -> " + type_name(dst));
  }
}

// Every 16-bit pattern, to every type.
TEST_F(CudaDeviceTest, CastFrom16BitTypesIsBitwiseEqualToCpuForEveryPattern) {
  const std::vector<uint16_t> patterns = all_16bit_patterns();
  const int64_t n = static_cast<int64_t>(patterns.size());
  Buffer dsrc = upload(patterns);
  for (DType src : {DType::kF16, DType::kBF16}) {
    for (DType dst : kAllTypes) {
      const size_t bytes = n * dtype_size(dst);
      Buffer dd = gpu_->alloc(bytes, MemCategory::kOther);
      gk().cast(dd.data(), dst, dsrc.data(), src, n);
      std::vector<uint8_t> expected(bytes);
      ck().cast(expected.data(), dst, patterns.data(), src, n);
      expect_elements_equal(download_bytes(dd, bytes), expected, dst, n, /*nan_is_nan=*/false,
                            "cast " + type_name(src) + " -> " + type_name(dst));
    }
  }
}

TEST_F(CudaDeviceTest, CastOfLongBuffersCoversEveryElement) {
  const int64_t n = kGridStrideN;
  const std::vector<float> x = normal_floats(n, 33);
  Buffer dx = upload(x);
  Buffer dh = gpu_->alloc(n * 2, MemCategory::kOther);
  Buffer back = gpu_->alloc(n * 4, MemCategory::kOther);
  gk().cast(dh.data(), DType::kBF16, dx.data(), DType::kF32, n);
  gk().cast(back.data(), DType::kF32, dh.data(), DType::kBF16, n);
  std::vector<float> expected = x;
  ck().round_to(expected.data(), DType::kBF16, n);
  expect_bitwise(download<float>(back, n), expected, "fp32 -> bf16 -> fp32");
}

TEST_F(CudaDeviceTest, RoundToIsBitwiseEqualToCpu) {
  std::vector<float> x = rounding_edge_floats(40);
  const std::vector<float> wide = random_bit_floats(300000, 41, /*allow_nan=*/true);
  x.insert(x.end(), wide.begin(), wide.end());
  const int64_t n = static_cast<int64_t>(x.size());
  for (DType t : kAllTypes) {
    Buffer dx = upload(x);
    gk().round_to(dx.as<float>(), t, n);
    std::vector<float> expected = x;
    ck().round_to(expected.data(), t, n);
    expect_bitwise(download<float>(dx, n), expected, "round_to " + type_name(t));
  }
}

// dst = dst_type(float(a) + float(b)) for all 27 type combinations; data that rounds, ties,
// overflows, and infinities (inf - inf is NaN: payload aside).
TEST_F(CudaDeviceTest, AddIsBitwiseEqualToCpuForEveryTypeCombination) {
  std::vector<float> a = normal_floats(50000, 50), b = normal_floats(50000, 51, 1e-2f);
  const std::vector<float> edges = rounding_edge_floats(52);
  const std::vector<float> wide_a = random_bit_floats(50000, 53, /*allow_nan=*/false);
  const std::vector<float> wide_b = random_bit_floats(50000, 54, /*allow_nan=*/false);
  a.insert(a.end(), edges.begin(), edges.end());
  b.insert(b.end(), edges.rbegin(), edges.rend());
  a.insert(a.end(), wide_a.begin(), wide_a.end());
  b.insert(b.end(), wide_b.begin(), wide_b.end());
  a.insert(a.end(), {kInf, kInf, -0.0f, -0.0f, 65504.0f, 1e-8f});
  b.insert(b.end(), {-kInf, 1.0f, -0.0f, 0.0f, 16.0f, -0.0f});
  const int64_t n = static_cast<int64_t>(a.size());
  for (DType at : kAllTypes) {
    const std::vector<uint8_t> ha = as_dtype(a, at);
    Buffer da = upload(ha);
    for (DType bt : kAllTypes) {
      const std::vector<uint8_t> hb = as_dtype(b, bt);
      Buffer db = upload(hb);
      for (DType dt : kAllTypes) {
        const size_t bytes = n * dtype_size(dt);
        Buffer dd = gpu_->alloc(bytes, MemCategory::kOther);
        gk().add(dd.data(), dt, da.data(), at, db.data(), bt, n);
        std::vector<uint8_t> expected(bytes);
        ck().add(expected.data(), dt, ha.data(), at, hb.data(), bt, n);
        expect_elements_equal(download_bytes(dd, bytes), expected, dt, n, /*nan_is_nan=*/true,
                              "add " + type_name(dt) + " = " + type_name(at) + " + " +
                                  type_name(bt));
      }
    }
  }
}

TEST_F(CudaDeviceTest, AddWithNullAIsACastAndKeepsNegativeZero) {
  std::vector<float> b = rounding_edge_floats(60);
  b.insert(b.end(), {-0.0f, -0.0f, 0.0f});
  const int64_t n = static_cast<int64_t>(b.size());
  for (DType bt : kAllTypes) {
    const std::vector<uint8_t> hb = as_dtype(b, bt);
    Buffer db = upload(hb);
    for (DType dt : kAllTypes) {
      const size_t bytes = n * dtype_size(dt);
      Buffer dd = gpu_->alloc(bytes, MemCategory::kOther);
      gk().add(dd.data(), dt, nullptr, DType::kF32, db.data(), bt, n);
      std::vector<uint8_t> expected(bytes);
      ck().add(expected.data(), dt, nullptr, DType::kF32, hb.data(), bt, n);
      const std::string what = "add null + " + type_name(bt) + " -> " + type_name(dt);
      const std::vector<uint8_t> got = download_bytes(dd, bytes);
      expect_elements_equal(got, expected, dt, n, /*nan_is_nan=*/false, what);
      const float last = element_as_float(got, dt, static_cast<size_t>(n - 2));
      EXPECT_TRUE(last == 0.0f && std::signbit(last)) << what << ": -0 became " << last;
    }
  }
}

TEST_F(CudaDeviceTest, AddInPlaceIntoEitherOperand) {
  const int64_t n = 100003;
  const std::vector<float> a = normal_floats(n, 70), b = normal_floats(n, 71);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const std::vector<uint8_t> ha = as_dtype(a, t), hb = as_dtype(b, t);
    std::vector<uint8_t> expected(ha.size());
    ck().add(expected.data(), t, ha.data(), t, hb.data(), t, n);
    Buffer da = upload(ha), db = upload(hb);
    gk().add(da.data(), t, da.data(), t, db.data(), t, n);  // dst = a
    expect_elements_equal(download_bytes(da, ha.size()), expected, t, n, false,
                          "add in place into a, " + type_name(t));
    Buffer da2 = upload(ha);
    gk().add(db.data(), t, da2.data(), t, db.data(), t, n);  // dst = b
    expect_elements_equal(download_bytes(db, hb.size()), expected, t, n, false,
                          "add in place into b, " + type_name(t));
  }
  // A fp32 accumulator plus a bf16 gradient, in place (the gradient fold of mixed precision).
  const std::vector<uint8_t> hb = as_dtype(b, DType::kBF16);
  std::vector<float> acc = a;
  Buffer dacc = upload(acc), db = upload(hb);
  gk().add(dacc.data(), DType::kF32, dacc.data(), DType::kF32, db.data(), DType::kBF16, n);
  ck().add(acc.data(), DType::kF32, acc.data(), DType::kF32, hb.data(), DType::kBF16, n);
  expect_bitwise(download<float>(dacc, n), acc, "fp32 += bf16 in place");
}

// ---------------------------------------------------------------------------------------------
// Reductions.

TEST_F(CudaDeviceTest, SumSquaresMatchesCpuAndIsDeterministic) {
  for (int64_t n : {int64_t{1}, int64_t{7}, kSumSquaresBlock - 1, kSumSquaresBlock,
                    kSumSquaresBlock + 1, 3 * kSumSquaresBlock + 123, int64_t{5000011}}) {
    const std::vector<float> x = normal_floats(n, static_cast<uint32_t>(90 + n % 1000), 2.0f);
    Buffer dx = upload(x);
    const double got = gk().sum_squares(dx.as<float>(), n);
    const double expected = ck().sum_squares(x.data(), n);
    EXPECT_NEAR(got, expected, 1e-12 * expected) << "n=" << n;
    EXPECT_EQ(std::bit_cast<uint64_t>(gk().sum_squares(dx.as<float>(), n)),
              std::bit_cast<uint64_t>(got))
        << "n=" << n << ": two calls differ";
    if (n > 1000) {  // a range at an offset
      const double part = gk().sum_squares(dx.as<float>() + 999, n - 999);
      const double part_cpu = ck().sum_squares(x.data() + 999, n - 999);
      EXPECT_NEAR(part, part_cpu, 1e-12 * part_cpu) << "n=" << n << " offset 999";
    }
  }
  EXPECT_EQ(gk().sum_squares(nullptr, 0), 0.0);
  // Special values: inf gives inf, NaN gives NaN, on both.
  std::vector<float> y = normal_floats(1000, 91);
  y[500] = kInf;
  Buffer dy = upload(y);
  EXPECT_EQ(gk().sum_squares(dy.as<float>(), 1000), ck().sum_squares(y.data(), 1000));
  y[500] = std::numeric_limits<float>::quiet_NaN();
  Buffer dz = upload(y);
  EXPECT_TRUE(std::isnan(gk().sum_squares(dz.as<float>(), 1000)));
}

// More blocks of 16384 than the reduction's grid (8192 thread blocks): every block is counted
// exactly once. 1.5^2 = 2.25 and every partial sum is exact in double, so the total is exact.
TEST_F(CudaDeviceTest, SumSquaresCoversMoreBlocksThanTheGrid) {
  const int64_t n = int64_t{8192} * kSumSquaresBlock + 5 * kSumSquaresBlock + 77;  // ~0.5 GB
  Buffer dx = gpu_->alloc(n * sizeof(float), MemCategory::kOther);
  gk().fill(dx.as<float>(), 1.5f, n);
  EXPECT_EQ(gk().sum_squares(dx.as<float>(), n), 2.25 * static_cast<double>(n));
  // The last element alone, and the last block's tail.
  EXPECT_EQ(gk().sum_squares(dx.as<float>() + n - 1, 1), 2.25);
  EXPECT_EQ(gk().sum_squares(dx.as<float>() + n - 77, 77), 2.25 * 77);
}

}  // namespace
}  // namespace zt
