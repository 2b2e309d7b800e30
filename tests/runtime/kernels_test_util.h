// What the CPU kernel suites (kernels_*_test.cpp) share: comparison helpers, finite differences,
// thread-count and instruction-set control, and the KernelsTest fixture (one class for every
// file, as GoogleTest requires of a suite). Helpers only; no tests here.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/kernels.h"

#include "random_data.h"

namespace zt::test {

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |actual - expected| <= atol + rtol·|expected|, element by element, naming the first failures.
inline void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                         double atol, double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < actual.size() && failures < 5; ++i) {
    const double err = std::abs(double(actual[i]) - expected[i]);
    if (!(err <= atol + rtol * std::abs(expected[i]))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << actual[i] << ", want " << expected[i]
                    << " (error " << err << ")";
      ++failures;
    }
  }
}

// Central difference of loss() in x[i]; loss reads x.
inline double central_difference(std::vector<double>& x, size_t i,
                                 const std::function<double()>& loss, double h = 1e-6) {
  const double saved = x[i];
  x[i] = saved + h;
  const double up = loss();
  x[i] = saved - h;
  const double down = loss();
  x[i] = saved;
  return (up - down) / (2 * h);
}

// Finite-difference gradient of loss() in every element of x, plus a starting value per element
// (the kernels accumulate into buffers that hold `start`).
inline std::vector<double> fd_gradient(std::vector<double>& x, const std::function<double()>& loss,
                                       const std::vector<float>& start) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) g[i] = start[i] + central_difference(x, i, loss);
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Runs f with the OpenMP thread count set to n, then restores it.
template <class F>
void with_threads(int n, const F& f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(saved);
}

// A kernel table capped at one instruction set (ZT_CPU_SIMD is read at construction only),
// rounding activations to `activations`.
inline std::unique_ptr<Kernels> kernels_capped_at(const char* level,
                                                  DType activations = DType::kF32) {
  const char* old = std::getenv("ZT_CPU_SIMD");
  const std::string saved = old ? old : "";
  setenv("ZT_CPU_SIMD", level, 1);
  auto k = make_cpu_kernels(activations);
  if (old)
    setenv("ZT_CPU_SIMD", saved.c_str(), 1);
  else
    unsetenv("ZT_CPU_SIMD");
  return k;
}

inline std::vector<const char*> simd_levels() {
  std::vector<const char*> levels = {"sse2"};
  if (__builtin_cpu_supports("avx2")) levels.push_back("avx2");
  if (__builtin_cpu_supports("avx512f")) levels.push_back("avx512");
  return levels;
}

class KernelsTest : public ::testing::Test {
 protected:
  CpuDevice dev_;
  Kernels& k_ = dev_.kernels();
};

}  // namespace zt::test
