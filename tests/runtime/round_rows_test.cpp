// Kernels::round_rows: the CPU back end against dtype.h's scalar rounding, row by row (rows named
// twice, rows not named left alone, rows long enough to be split across threads, every SIMD
// path via ZT_CPU_SIMD), and the CUDA back end bitwise against the CPU (skipped without a GPU).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"
#include "runtime/device_factory.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"

namespace zt {
namespace {

// float(t(x)) by dtype.h.
float round_ref(float x, DType t) {
  switch (t) {
    case DType::kF16: return fp16_to_fp32(fp32_to_fp16(x));
    case DType::kBF16: return bf16_to_fp32(fp32_to_bf16(x));
    case DType::kF32: return x;
  }
  return x;
}

// Random bit patterns (NaNs with payloads, infinities, subnormals, fp16 overflow included) with
// a share of ordinary magnitudes, so both dtypes see ties and ordinary rounding.
std::vector<float> inputs(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(gen());
    x[i] = i % 3 == 0 ? std::bit_cast<float>(bits)
                      : static_cast<float>(static_cast<int32_t>(bits)) * 0x1p-27f;
  }
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The expected result: each row named in `rows` rounded (once: rounding is idempotent).
std::vector<float> reference(const std::vector<float>& x, const std::vector<int32_t>& rows,
                             int64_t row_len, DType t) {
  std::vector<float> out = x;
  std::vector<bool> named(x.size() / row_len, false);
  for (int32_t r : rows) named[r] = true;
  for (size_t r = 0; r < named.size(); ++r)
    if (named[r])
      for (int64_t j = 0; j < row_len; ++j) out[r * row_len + j] = round_ref(x[r * row_len + j], t);
  return out;
}

struct Shape {
  int64_t n_x_rows, row_len;
  std::vector<int32_t> rows;
};

std::vector<Shape> shapes() {
  return {
      {11, 24, {3, 7, 3, 0, 10, 7, 7, 1, 2, 3}},  // repeats, row 4..6, 8, 9 not named
      {5, 13, {4}},                               // an odd row length (SIMD tails)
      {3, 70001, {2, 0, 2}},                      // long rows: columns split over threads
      {4, 8, {}},                                 // nothing named: nothing changes
  };
}

TEST(RoundRows, CpuMatchesScalarRoundingOnEverySimdPath) {
  const char* old = std::getenv("ZT_CPU_SIMD");
  const std::string saved = old ? old : "";
  for (const char* level : {"sse2", "avx2", "avx512"}) {  // a cap above the CPU's is its best
    SCOPED_TRACE(level);
    setenv("ZT_CPU_SIMD", level, 1);
    std::unique_ptr<Kernels> k = make_cpu_kernels();
    if (old)
      setenv("ZT_CPU_SIMD", saved.c_str(), 1);
    else
      unsetenv("ZT_CPU_SIMD");
    for (const Shape& s : shapes()) {
      const std::vector<float> x = inputs(s.n_x_rows * s.row_len, 7 + s.row_len);
      for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
        SCOPED_TRACE(fmt::format("{} rows of {} ({} named), {}", s.n_x_rows, s.row_len,
                                 s.rows.size(), dtype_name(t)));
        std::vector<float> got = x;
        k->round_rows(got.data(), s.rows.data(), static_cast<int64_t>(s.rows.size()), s.row_len, t);
        EXPECT_TRUE(same_bits(got, reference(x, s.rows, s.row_len, t)));
      }
    }
  }
}

TEST(RoundRows, CpuEqualsRoundToOfTheNamedRows) {
  CpuDevice device;
  Kernels& k = device.kernels();
  const int64_t row_len = 1000;
  const std::vector<int32_t> rows = {5, 1, 5};
  for (DType t : {DType::kF16, DType::kBF16}) {
    std::vector<float> x = inputs(8 * row_len, 3), by_rows = x;
    k.round_rows(by_rows.data(), rows.data(), 3, row_len, t);
    k.round_to(x.data() + 1 * row_len, t, row_len);
    k.round_to(x.data() + 5 * row_len, t, row_len);
    EXPECT_TRUE(same_bits(by_rows, x)) << dtype_name(t);
  }
}

TEST(CudaRoundRows, IsBitwiseEqualToCpu) {  // "Cuda*": tests/gpu/device_check.sh runs it
  if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
  std::unique_ptr<Device> gpu = make_device(DeviceKind::kCuda, 0);
  CpuDevice cpu;
  for (const Shape& s : shapes()) {
    const std::vector<float> x = inputs(s.n_x_rows * s.row_len, 11 + s.row_len);
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(fmt::format("{} rows of {}, {}", s.n_x_rows, s.row_len, dtype_name(t)));
      const size_t bytes = x.size() * sizeof(float);
      const size_t row_bytes = s.rows.size() * sizeof(int32_t);
      Buffer dx = gpu->alloc(bytes, MemCategory::kOther);
      Buffer drows = gpu->alloc(row_bytes, MemCategory::kOther);
      gpu->copy_from_host(dx.data(), x.data(), bytes);
      if (row_bytes > 0) gpu->copy_from_host(drows.data(), s.rows.data(), row_bytes);
      gpu->kernels().round_rows(dx.as<float>(), drows.as<int32_t>(),
                                static_cast<int64_t>(s.rows.size()), s.row_len, t);
      std::vector<float> got(x.size()), expected = x;
      gpu->copy_to_host(got.data(), dx.data(), bytes);
      cpu.kernels().round_rows(expected.data(), s.rows.data(), static_cast<int64_t>(s.rows.size()),
                               s.row_len, t);
      EXPECT_TRUE(same_bits(got, expected));
    }
  }
}

}  // namespace
}  // namespace zt
