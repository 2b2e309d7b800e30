// What the CUDA back end's device and kernel suites (cuda_device_test.cpp, cuda_kernels_test.cpp)
// share: inputs (normal, random-bit and rounding-edge floats), bitwise and tolerance comparisons
// that name the first mismatches, and the CudaDeviceTest fixture (a GPU, skipped without one;
// the CPU reference; host <-> device helpers), one class for both files, as GoogleTest requires
// of a suite. No CUDA header: the GPU is reached through make_device. Helpers only; no tests.
#pragma once

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
#include "runtime/cuda/attention_path.h"
#include "runtime/device.h"
#include "runtime/device_factory.h"
#include "runtime/kernels.h"
#include "runtime/status.h"

namespace zt::test {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr int64_t kSumSquaresBlock = 16384;  // the back ends' fixed block
// Element-wise kernels cap their grid at 8192 blocks of 256 threads; longer buffers exercise the
// grid-stride loop.
inline constexpr int64_t kGridStrideN = int64_t{8192} * 256 * 2 + 12345;

inline float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

// ---------------------------------------------------------------------------------------------
// Inputs.

inline std::vector<float> normal_floats(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

// Uniformly random bit patterns: every exponent, subnormals, infinities and NaNs with payloads.
inline std::vector<float> random_bit_floats(int64_t n, uint32_t seed, bool allow_nan) {
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
inline std::vector<float> rounding_edge_floats(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x = {
      0.0f,
      -0.0f,
      1.0f,
      -1.0f,
      65504.0f,
      -65504.0f,
      std::nextafter(65520.0f, 0.0f),
      65520.0f,
      -65520.0f,
      65536.0f,
      1e10f,
      std::numeric_limits<float>::max(),
      -std::numeric_limits<float>::max(),
      kInf,
      -kInf,
      std::numeric_limits<float>::min(),
      std::numeric_limits<float>::denorm_min(),
      -std::numeric_limits<float>::denorm_min(),
      1e-40f,
      0x1p-24f,
      0x1p-25f,
      -0x1p-25f,
      0x1.8p-25f,
      0x1p-26f,
      0x1p-14f,
      0x1.ff8p-15f,
      0x1.ffcp-15f,
      from_bits(0x7fc00000u),
      from_bits(0xffc00000u),
      from_bits(0x7f800001u),
      from_bits(0xff800001u),
      from_bits(0x7fc12345u),
      from_bits(0x7fa00000u),
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

inline std::vector<uint16_t> all_16bit_patterns() {
  std::vector<uint16_t> x(65536);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i);
  return x;
}

// ---------------------------------------------------------------------------------------------
// Comparisons. Each reports the first few mismatches with both bit patterns.

inline void expect_bitwise(const std::vector<float>& gpu, const std::vector<float>& cpu,
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
inline float element_as_float(const std::vector<uint8_t>& bytes, DType t, size_t i) {
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
inline void expect_elements_equal(const std::vector<uint8_t>& gpu, const std::vector<uint8_t>& cpu,
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
    if (reported++ < 5) ADD_FAILURE() << what << ": element " << i << ": gpu " << g << " cpu " << c;
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
#if ZT_HAVE_CUDA  // the materialised attention, held to the CPU's bits (not cuDNN's)
    set_cuda_attention_path(*gpu_, AttentionPath::kReference);
#endif
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

inline const DType kAllTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
inline std::string type_name(DType t) { return std::string(dtype_name(t)); }

}  // namespace zt::test
