// The peak-FMA probe (runtime/cpu/cpu_peak.h): a positive rate under the instruction set's
// bound for the threads that ran it, and the CPU description it is reported with.
#include <gtest/gtest.h>

#include <omp.h>

#include <cstring>
#include <string>

#include "runtime/cpu/cpu_peak.h"

namespace zt {
namespace {

TEST(CpuPeak, RateIsPositiveAndUnderTheIsaBound) {
  const PeakFma peak = measure_peak_fma(3, 0.02);
  EXPECT_EQ(peak.threads, omp_get_max_threads());
  if (std::strcmp(peak.isa, "none") == 0) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  // 2 FMA ports x lanes x 2 flops per cycle per core, at no more than 5 GHz.
  const double flops_per_cycle = std::strcmp(peak.isa, "avx512") == 0 ? 64.0 : 32.0;
  EXPECT_GT(peak.gflops, 0.0);
  EXPECT_LE(peak.gflops, peak.threads * flops_per_cycle * 5.0) << peak.isa;
}

TEST(CpuPeak, OneThreadIsUnderTheBoundForOne) {
  const PeakFma peak = measure_peak_fma(2, 0.02, 1);
  EXPECT_EQ(peak.threads, 1);
  if (std::strcmp(peak.isa, "none") == 0) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  EXPECT_GT(peak.gflops, 0.0);
  EXPECT_LE(peak.gflops, 64.0 * 5.0);
}

TEST(CpuPeak, DescribesTheCpu) {
  EXPECT_FALSE(cpu_model_name().empty());
  const std::string simd = cpu_simd_features();
  EXPECT_FALSE(simd.empty());
  if (__builtin_cpu_supports("avx512f")) {
    EXPECT_NE(simd.find("avx512f"), std::string::npos);
  }
}

}  // namespace
}  // namespace zt
