// What the activation-table suites (activation_rounding_test.cpp, activation_rounding_ops_test.cpp)
// share: 16-bit conversions by dtype.h's scalars, the checks that values are (or are not) a
// dtype's, the one-ulp tolerance and the double matmul reference, and the ActivationRoundingTest
// fixture (the CPU device's fp32 table and its table of the test's dtype), one class for both
// files, as GoogleTest requires of a suite (instantiated once, in activation_rounding_test.cpp).
// Helpers only; no tests here.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "random_data.h"

namespace zt::activation_rounding {

using test::random_floats;

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
inline bool same_bits(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
}

inline uint16_t narrow(float x, DType t) {
  return t == DType::kF16 ? fp32_to_fp16(x) : fp32_to_bf16(x);
}
inline float widen(uint16_t h, DType t) {
  return t == DType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

// x in t's 16 bits (round to nearest even), and back to fp32.
inline std::vector<uint16_t> narrowed(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = narrow(x[i], t);
  return h;
}
inline std::vector<float> widened(const std::vector<uint16_t>& h, DType t) {
  std::vector<float> x(h.size());
  for (size_t i = 0; i < h.size(); ++i) x[i] = widen(h[i], t);
  return x;
}
// x rounded to t by dtype.h's scalar conversions.
inline std::vector<float> rounded(const std::vector<float>& x, DType t) {
  return widened(narrowed(x, t), t);
}

// Every element of x is a value of t.
inline bool all_in(const std::vector<float>& x, DType t) { return same_bits(x, rounded(x, t)); }
// Some element of x is not a value of t: a test that x is unrounded is not vacuous.
inline bool has_unrounded(const std::vector<float>& x, DType t) { return !all_in(x, t); }

// One ulp of t relative to the value: the 16-bit results' tolerance against a double reference.
inline double relative_ulp(DType t) { return t == DType::kF16 ? 0x1p-10 : 0x1p-7; }

// |got - want| <= rel·|want| + abs, element by element, naming the first failures.
inline void expect_within(const std::vector<float>& got, const std::vector<double>& want,
                          double rel, double abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double err = std::abs(double(got[i]) - want[i]);
    if (!(err <= rel * std::abs(want[i]) + abs)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (error "
                    << err << ")";
      ++failures;
    }
  }
}

// The double reference of out (M,N) = inp (M,K) · W + bias, W (K,N) or (N,K) by layout.
inline std::vector<double> matmul_ref(const std::vector<float>& inp, const std::vector<float>& w,
                                      const std::vector<float>& bias, int64_t M, int64_t K,
                                      int64_t N, WeightLayout layout) {
  std::vector<double> out(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias.empty() ? 0.0 : bias[n];
      for (int64_t k = 0; k < K; ++k)
        s += double(inp[m * K + k]) * w[layout == WeightLayout::kInOut ? k * N + n : n * K + k];
      out[m * N + n] = s;
    }
  return out;
}

class ActivationRoundingTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  // Values of the dtype: what activations are under its table.
  std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    return rounded(random_floats(n, seed, lo, hi), dtype());
  }
  CpuDevice dev_;
  Kernels& f32_ = dev_.kernels();
  Kernels& act_ = dev_.kernels_for(GetParam());
};

}  // namespace zt::activation_rounding
